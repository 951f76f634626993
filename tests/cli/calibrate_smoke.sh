#!/usr/bin/env bash
# calibrate and --calib end to end: a KVQuant calibration made on the first half of the text is
# used on the second half (one fp16 pass serving two methods); an unwritable output, a missing, other-spec, damaged or
# other-model calibration, or too little text, is refused with one line; a saved KVQuant cache is refused under
# another calibration and continues under its own.
set -euo pipefail
bin=$1 src=$2
model="$src/models/gemma-3-270m-q4_k_m.gguf" text="$src/data/wikitext-2-raw-test.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" calibrate -m "$model" -f "$text" --part first-half --kv kvquant:bits=2 -o "$tmp/a.vqcal" -c 256 --chunks 1 >"$tmp/log"
grep -q "wrote $tmp/a.vqcal: 'kvquant:bits=2'" "$tmp/log"
out=$("$bin" perplexity -m "$model" -f "$text" --part second-half -c 256 --chunks 1 \
      --kv kvquant:bits=2 --kv q4 --calib "$tmp/a.vqcal" --json)
python3 - "$out" <<'PY'
import json, math, sys
runs = json.loads(sys.argv[1])["runs"]
assert [r["kv"] for r in runs] == ["kvquant:bits=2", "q4"], runs
for r in runs:
    assert r["part"] == "second-half" and math.isfinite(r["kl_mean"]) and r["kl_mean"] > 0, r
    assert abs(r["ppl_fp16"] - runs[0]["ppl_fp16"]) < 1e-9  # the same fp16 pass
assert "first-half" in runs[0]["calibration"]
assert 2.0 < runs[0]["kv_bits_per_element"] < 3.0, runs[0]
PY
refuse() {  # expected message, then the command
  local want=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then echo "accepted: $*"; exit 1; fi
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || { cat "$tmp/err"; exit 1; }
  grep -q -- "$want" "$tmp/err" || { echo "expected '$want', got:"; cat "$tmp/err"; exit 1; }
}
ppl=("$bin" perplexity -m "$model" -f "$text" -c 64 --chunks 1)
refuse "needs a calibration made for it (none was given)" "${ppl[@]}" --kv kvquant:bits=2
refuse "is for 'kvquant:bits=2'" "${ppl[@]}" --kv kvquant:bits=3 --calib "$tmp/a.vqcal"
python3 - "$tmp/a.vqcal" "$tmp/bad.vqcal" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 1
open(sys.argv[2], "wb").write(b)
PY
refuse "checksum" "${ppl[@]}" --kv kvquant:bits=2 --calib "$tmp/bad.vqcal"
# An output that cannot be written is refused before the model runs (no progress lines).
refuse "cannot write" "$bin" calibrate -m "$model" -f "$text" --kv kvquant:bits=2 -o "$tmp/no/such/dir/c.vqcal" -c 64 --chunks 1
# Too little text for VecInfer's k-means: refused from inside its parallel loop with one error line
# (after the progress lines) and exit status 2, not an abort.
rc=0
"$bin" calibrate -m "$model" -f "$text" --kv vecinfer -o "$tmp/v.vqcal" -c 64 --chunks 1 >/dev/null 2>"$tmp/err" || rc=$?
[[ $rc -eq 2 ]] || { echo "exit status $rc"; cat "$tmp/err"; exit 1; }
[[ $(grep -c "error" "$tmp/err") -eq 1 ]] && tail -1 "$tmp/err" | grep -q "at least 256 needed" || { cat "$tmp/err"; exit 1; }
[[ ! -e "$tmp/v.vqcal" ]]
refuse "was made for the model Gemma" "$bin" perplexity -m "$src/tests/data/gguf_corpus/ok_tiny_llama.gguf" -f "$text" \
  -c 16 --chunks 1 --kv kvquant:bits=2 --calib "$tmp/a.vqcal"
# A saved cache names its calibration.
"$bin" calibrate -m "$model" -f "$text" --part first-half --kv kvquant:bits=2 -o "$tmp/b.vqcal" -c 128 --chunks 1 >/dev/null
gen=("$bin" generate -m "$model" -c 256 --kv kvquant:bits=2)
"${gen[@]}" --calib "$tmp/a.vqcal" -p "The history of the" -n 8 --save-cache "$tmp/s.vqs" >"$tmp/whole" 2>/dev/null
refuse "calibration" "${gen[@]}" --calib "$tmp/b.vqcal" --load-cache "$tmp/s.vqs" -n 4
"${gen[@]}" --calib "$tmp/a.vqcal" --load-cache "$tmp/s.vqs" -n 4 >/dev/null 2>&1
echo ok
