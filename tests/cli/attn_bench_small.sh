#!/usr/bin/env bash
# attn-bench runs end to end on a small shape (KVQuant calibrated on its synthetic data) and
# prints the documented JSON fields.
set -eu
out=$("$1" attn-bench --q-heads 4 --kv-heads 2 --head-dim 64 --ctx 512 --layers 2 --rounds 2 \
      --iters 1 --bandwidth-mib 16 --kv fp16 --kv q4:rot=1 --kv kvquant --kv turbo --json)
python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
assert j["read_bandwidth_gbps"] > 0
specs = [r["spec"] for r in j["results"]]
assert specs == ["fp16", "q4:rot=1", "kvquant", "turbo"], specs  # kvquant: calibrated on the synthetic data
for r in j["results"]:
    for k in ("spec", "bits_per_element", "kv_bytes", "us_per_token", "gbps"):
        assert k in r, k
    assert r["us_per_token"] > 0 and r["kv_bytes"] > 0
    # speed-up: median of per-round paired ratios, within their range
    assert r["speedup_vs_fp16_min"] <= r["speedup_vs_fp16"] <= r["speedup_vs_fp16_max"]
assert j["results"][1]["kv_bytes"] < j["results"][0]["kv_bytes"]
PY
