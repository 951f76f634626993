#!/usr/bin/env bash
# fidelity --seeds: TurboQuant runs with three consecutive seeds; the worst layer's key rMSE is
# reported per seed and as min/mean/max (the seeds differ), the per-layer figures are the means
# over seeds, and q8 (nothing drawn) runs once. --seeds 0 is a usage error: exit 2, one line.
set -euo pipefail
bin=$1 src=$2
run=("$bin" fidelity -m "$src/models/gemma-3-270m-q4_k_m.gguf" -f "$src/data/wikitext-2-raw-test.txt"
     --tokens 256 --queries 8)
out=$("${run[@]}" --kv q8 --kv turbo:bits=3 --seeds 3 --json)
text=$("${run[@]}" --kv turbo:bits=3 --seeds 3)
python3 - "$out" "$text" <<'PY'
import json, math, sys
r = {x["spec"]: x for x in json.loads(sys.argv[1])["results"]}
t, q8 = r["turbo"], r["q8"]
seeds = t["seeds"]
wk = [s["worst_key_rel_mse"] for s in seeds]
print("turbo worst-layer key rMSE per seed:", [(s["seed"], s["worst_key_layer"], round(x, 6)) for s, x in zip(seeds, wk)])
assert t["n_seeds"] == 3 and [s["seed"] for s in seeds] == [seeds[0]["seed"] + i for i in range(3)]
assert len(set(wk)) == 3, "the seeds gave the same keys"
assert t["worst_key_rel_mse"]["min"] == min(wk) and t["worst_key_rel_mse"]["max"] == max(wk)
assert math.isclose(t["worst_key_rel_mse"]["mean"], sum(wk) / 3, rel_tol=1e-12)
for s in seeds:
    assert s["worst_key_rel_mse"] == max(s["worst_key_rel_mse"], s["mean"]["key_rel_mse"])
means = [s["mean"]["key_rel_mse"] for s in seeds]
assert math.isclose(t["mean"]["key_rel_mse"], sum(means) / 3, rel_tol=1e-9), (t["mean"], means)
assert q8["n_seeds"] == 1 and "seeds" not in q8
row = next(l for l in sys.argv[2].splitlines() if l.startswith("turbo "))
assert " / " in row, row
PY
set +e
err=$("${run[@]}" --kv turbo --seeds 0 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -eq 2 && $(printf '%s\n' "$err" | wc -l) -eq 1 && $err == *--seeds* ]] || { echo "FAIL: --seeds 0: exit $rc: $err"; exit 1; }
