#!/usr/bin/env bash
# RateQuant per KV head end to end, on the random-weight Qwen2 model of write_synthetic_model (two
# layers of two KV heads): calibrate probes every (layer, side, head) and writes a version-5 file
# whose allocation meets the budget over the 8 units; inspect prints a row per layer and head;
# perplexity and attn-bench run with it, over KIVI and over KVQuant; a per-layer file is refused
# for the per-head spec with one line.
set -euo pipefail
bin=$1 writer=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'The rain came in long grey sheets from the west.\nNobody spoke much at the mill.\n%.0s' {1..40} > "$tmp/text.txt"
model="$tmp/qwen2.gguf"
"$writer" qwen2 "$model"
cal=("$bin" calibrate -m "$model" -f "$tmp/text.txt" --part first-half -c 64 --probe-tokens 64)
"${cal[@]}" --kv ratequant:avg=2.5,unit=head -o "$tmp/rq.vqcal" >"$tmp/log" 2>"$tmp/err"
grep -q "wrote $tmp/rq.vqcal: 'ratequant:avg=2.5,unit=head'" "$tmp/log"
grep -q "2 layers x 2 sides x 2 KV heads x 3 widths" "$tmp/err"
python3 - "$tmp/rq.vqcal" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"VQCALIB1" and struct.unpack("<I", b[8:12])[0] == 5, b[:12]
PY
"$bin" inspect --calib "$tmp/rq.vqcal" >"$tmp/inspect"
grep -q "average width 2.5000 bits over 8 units (keys and values of 2 layers, per KV head)" "$tmp/inspect"
python3 - "$tmp/inspect" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(i for i, l in enumerate(lines) if l.startswith("layer"))
assert lines[head].split()[:4] == ["layer", "KV", "head", "key"], lines[head]
rows = [l.split() for l in lines[head + 2:head + 6]]
assert [(int(r[0]), int(r[1])) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)], rows
widths = [int(r[2]) for r in rows] + [int(r[3]) for r in rows]
assert all(2 <= w <= 4 for w in widths) and sum(widths) == 20, widths
assert all(len(r) == 10 for r in rows), rows  # layer, head, two widths, KL at 2, 3, 4 bits for keys and values
PY
ppl=("$bin" perplexity -m "$model" -f "$tmp/text.txt" --part second-half -c 64 --chunks 1)
out=$("${ppl[@]}" --kv ratequant:avg=2.5,unit=head --calib "$tmp/rq.vqcal" --json)
python3 - "$out" <<'PY'
import json, math, sys
r = json.loads(sys.argv[1])
assert r["kv"] == "ratequant:avg=2.5,unit=head" and math.isfinite(r["kl_mean"]), r
assert abs(r["kv_bits_per_element"] - 3.5) < 1e-12, r  # kivi: 2.5 bits of code + fp16 scale and zero per 32
PY
# Over KVQuant: each head's datatypes at its widths.
"${cal[@]}" --chunks 2 --kv ratequant:base=kvquant,avg=2.25,unit=head -o "$tmp/rqk.vqcal" >"$tmp/log" 2>/dev/null
"$bin" inspect --calib "$tmp/rqk.vqcal" | grep -q "average width 2.2500 bits over 8 units"
out=$("${ppl[@]}" --kv ratequant:base=kvquant,avg=2.25,unit=head --calib "$tmp/rqk.vqcal" --json)
python3 -c "import json,math,sys; r=json.loads(sys.argv[1]); assert math.isfinite(r['kl_mean']), r" "$out"
# attn-bench, with no model to probe, spreads the budget over every layer and head.
"$bin" attn-bench --ctx 64 --layers 2 --q-heads 4 --kv-heads 2 --head-dim 64 --rounds 1 --iters 1 --kv fp16 \
  --kv ratequant:base=kvquant,avg=2.25,unit=head >"$tmp/ab"
grep -q "^ratequant:base=kvquant,avg=2.25,unit=head " "$tmp/ab"
# A per-layer file for the per-head spec is refused with one line (exit 2: the wrong file).
"${cal[@]}" --kv ratequant:avg=2.5 -o "$tmp/layer.vqcal" >/dev/null 2>&1
rc=0
"${ppl[@]}" --kv ratequant:avg=2.5,unit=head --calib "$tmp/layer.vqcal" >/dev/null 2>"$tmp/err" || rc=$?
[[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "is for 'ratequant:avg=2.5'" "$tmp/err" || {
  echo "exit $rc:"; cat "$tmp/err"; exit 1; }
echo ok
