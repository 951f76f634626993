#!/usr/bin/env bash
# passkey: the fp16 cache retrieves the key at 512 tokens (seeded, deterministic), and the JSON
# carries accuracy per length and depth band.
set -euo pipefail
bin=$1 src=$2
out=$("$bin" passkey -m "$src/models/gemma-3-270m-q4_k_m.gguf" --ctx 512 --trials 4 --seed 1 --json)
python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
[r] = j["results"]
assert r["ctx"] == 512 and r["trials"] == 4, r
assert sum(b["trials"] for b in r["depth_bands"]) == 4
print("accuracy at 512:", r["accuracy"])
assert r["accuracy"] >= 0.75, r
PY
