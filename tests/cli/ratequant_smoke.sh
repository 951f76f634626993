#!/usr/bin/env bash
# RateQuant end to end on a tiny probe: calibrate writes a file whose allocation meets the budget
# exactly, inspect prints its table, perplexity uses it on the other half of the text and reports
# the allocation's bits; a budget that whole widths cannot meet, an avg outside [lo, hi], a file
# for another avg and a damaged file are refused with one line (usage errors exit 2).
set -euo pipefail
bin=$1 src=$2
model="$src/models/gemma-3-270m-q4_k_m.gguf" text="$src/data/wikitext-2-raw-test.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" calibrate -m "$model" -f "$text" --part first-half --kv ratequant:base=kivi,avg=2.5 -c 64 --probe-tokens 64 \
  -o "$tmp/rq.vqcal" >"$tmp/log" 2>/dev/null
grep -q "wrote $tmp/rq.vqcal: 'ratequant:avg=2.5'" "$tmp/log"
"$bin" inspect --calib "$tmp/rq.vqcal" >"$tmp/inspect"
grep -q "average width 2.5000 bits over 36 units" "$tmp/inspect"
python3 - "$tmp/inspect" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(i for i, l in enumerate(lines) if l.startswith("layer"))
rows = [l.split() for l in lines[head + 2:head + 20]]
assert len(rows) == 18 and [int(r[0]) for r in rows] == list(range(18)), rows
widths = [int(r[1]) for r in rows] + [int(r[2]) for r in rows]
assert all(2 <= w <= 4 for w in widths) and sum(widths) == 90, widths
assert all(len(r) == 9 for r in rows), rows  # layer, two widths, KL at 2, 3, 4 bits for keys and values
PY
out=$("$bin" perplexity -m "$model" -f "$text" --part second-half -c 256 --chunks 1 \
      --kv ratequant:base=kivi,avg=2.5 --calib "$tmp/rq.vqcal" --json)
python3 - "$out" <<'PY'
import json, math, sys
r = json.loads(sys.argv[1])
assert r["kv"] == "ratequant:avg=2.5" and math.isfinite(r["kl_mean"]) and "first-half" in r["calibration"], r
assert abs(r["kv_bits_per_element"] - 3.5) < 1e-12, r  # kivi: 2.5 bits of code + fp16 scale and zero per 32
PY
# Over KVQuant: the datatypes are learned at every width first, and the file carries each layer's
# at its allocated widths; avg to four decimals (77/36) keeps the cache under 2.5 bits per element.
"$bin" calibrate -m "$model" -f "$text" --part first-half --kv ratequant:base=kvquant,avg=2.1389 -c 64 --chunks 2 \
  --probe-tokens 64 -o "$tmp/rqk.vqcal" >"$tmp/log" 2>/dev/null
grep -q "wrote $tmp/rqk.vqcal: 'ratequant:base=kvquant,avg=2.1389'" "$tmp/log"
"$bin" inspect --calib "$tmp/rqk.vqcal" | grep -q "average width 2.1389 bits over 36 units"
out=$("$bin" perplexity -m "$model" -f "$text" --part second-half -c 256 --chunks 1 \
      --kv ratequant:base=kvquant,avg=2.1389 --calib "$tmp/rqk.vqcal" --json)
python3 - "$out" <<'PY'
import json, math, sys
r = json.loads(sys.argv[1])
assert r["kv"] == "ratequant:base=kvquant,avg=2.1389" and math.isfinite(r["kl_mean"]), r
# kvquant:bits=2 is 2.359 bits per element at d = 256; 5 of 36 units one bit wider
assert abs(r["kv_bits_per_element"] - (2.359375 + 5 / 36)) < 1e-9, r
PY
# attn-bench, with no model to probe, spreads the budget evenly over its layers.
"$bin" attn-bench --ctx 64 --layers 2 --rounds 1 --iters 1 --kv fp16 --kv ratequant:base=kvquant,avg=2.25 >"$tmp/ab"
grep -q "^ratequant:base=kvquant,avg=2.25 " "$tmp/ab"
refuse() {  # expected exit status, expected message, then the command
  local rc_want=$1 want=$2; shift 2
  local rc=0
  "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc -eq $rc_want ]] || { echo "exit $rc (want $rc_want): $*"; cat "$tmp/err"; exit 1; }
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || { cat "$tmp/err"; exit 1; }
  grep -q -- "$want" "$tmp/err" || { echo "expected '$want', got:"; cat "$tmp/err"; exit 1; }
}
cal=("$bin" calibrate -m "$model" -f "$text" -c 64 --probe-tokens 64 -o "$tmp/x.vqcal")
refuse 2 "not a whole number" "${cal[@]}" --kv ratequant:avg=2.3
refuse 2 "outside \[lo, hi\]" "${cal[@]}" --kv ratequant:avg=4.5
refuse 2 "lo=4 is above hi=3" "${cal[@]}" --kv ratequant:lo=4,hi=3,avg=3
ppl=("$bin" perplexity -m "$model" -f "$text" -c 64 --chunks 1)
refuse 2 "is for 'ratequant:avg=2.5'" "${ppl[@]}" --kv ratequant:avg=3 --calib "$tmp/rq.vqcal"
python3 - "$tmp/rq.vqcal" "$tmp/bad.vqcal" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 1
open(sys.argv[2], "wb").write(b)
PY
refuse 1 "checksum" "${ppl[@]}" --kv ratequant:avg=2.5 --calib "$tmp/bad.vqcal"
refuse 1 "checksum" "$bin" inspect --calib "$tmp/bad.vqcal"
echo ok
