#!/usr/bin/env bash
# fidelity on real activations: fp16 storage reproduces fp16 attention exactly and keys within
# fp16 rounding; q4 and KIVI errors are ordered by bits; KIVI-2 per-channel keys reconstruct
# better than per-token keys (the paper's finding, on Gemma's real keys).
set -euo pipefail
bin=$1 src=$2
out=$("$bin" fidelity -m "$src/models/gemma-3-270m-q4_k_m.gguf" -f "$src/data/wikitext-2-raw-test.txt" \
      --tokens 384 --queries 16 --kv fp16 --kv q8 --kv q4 --kv kivi --kv kivi:kaxis=token --json)
python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
r = {x["spec"]: x for x in j["results"]}
assert len(r["fp16"]["layers"]) == 18
m = {s: r[s]["mean"] for s in r}
print({s: (round(m[s]["key_rel_mse"], 6), round(m[s]["out_rel_err"], 4)) for s in m})
assert m["fp16"]["out_rel_err"] == 0 and m["fp16"]["key_rel_mse"] < 1e-6, m["fp16"]
assert m["q8"]["key_rel_mse"] < m["q4"]["key_rel_mse"] < m["kivi"]["key_rel_mse"]
assert m["q8"]["out_rel_err"] < m["q4"]["out_rel_err"]
assert m["kivi"]["key_rel_mse"] < m["kivi:kaxis=token"]["key_rel_mse"]
assert m["kivi"]["mass_moved"] < m["kivi:kaxis=token"]["mass_moved"]
for s in m:
    assert 0 <= m[s]["mass_moved"] <= 1 and m[s]["key_cos"] <= 1.0000001
PY
