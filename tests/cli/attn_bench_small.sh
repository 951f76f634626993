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

# --simd avx2 measures the AVX2 kernels (on a CPU that has AVX2) and says so; an unknown target is
# a usage error.
if grep -qw avx2 /proc/cpuinfo; then
  out=$("$1" attn-bench --q-heads 4 --kv-heads 2 --head-dim 64 --ctx 256 --layers 1 --rounds 1 \
        --iters 1 --bandwidth-mib 16 --kv fp16 --kv turbo --simd avx2 --json)
  python3 -c 'import json, sys; t = json.loads(sys.argv[1])["simd_target"]; assert t == "AVX2", t' "$out"
fi
set +e
err=$("$1" attn-bench --ctx 16 --layers 1 --simd sse9 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" -eq 2 ] && [[ "$err" == *"unknown target"* ]] || { echo "--simd sse9: rc $rc, '$err'"; exit 1; }
