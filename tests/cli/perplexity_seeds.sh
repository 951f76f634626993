#!/usr/bin/env bash
# perplexity --seeds: a rotation method (TurboQuant) runs with its seed and the next one against
# one fp16 pass; its kl_mean and ppl are the means of the per-seed values, the two seeds give
# different caches and so different KL, the first seed's run is the spec's own (the same numbers
# as without --seeds), and methods that draw nothing (fp16, q8) run once. Bad counts are usage
# errors: exit 2 and one line.
set -euo pipefail
bin=$1 src=$2
run=("$bin" perplexity -m "$src/models/gemma-3-270m-q4_k_m.gguf" -f "$src/data/wikitext-2-raw-test.txt"
     -c 128 --chunks 1 -t 2)
swept=$("${run[@]}" --kv fp16 --kv turbo:bits=3 --kv q8 --seeds 2 --json 2>/dev/null)
single=$("${run[@]}" --kv turbo:bits=3 --json 2>/dev/null)
text=$("${run[@]}" --kv q8 --kv turbo:bits=3 --seeds 2 2>/dev/null)
python3 - "$swept" "$single" "$text" <<'PY'
import json, math, sys
runs = {r["kv"]: r for r in json.loads(sys.argv[1])["runs"]}
single = json.loads(sys.argv[2])
text = sys.argv[3]
t = runs["turbo"]
seeds = t["seeds"]
print("turbo per seed:", [(s["seed"], s["kv"], round(s["kl_mean"], 6), round(s["ppl"], 4)) for s in seeds])
assert t["n_seeds"] == 2 and len(seeds) == 2, t
assert seeds[1]["seed"] == seeds[0]["seed"] + 1
assert seeds[0]["kv"] == "turbo" and seeds[1]["kv"] == "turbo:seed=%d" % seeds[1]["seed"], seeds
for key in ("kl_mean", "ppl"):
    vals = [s[key] for s in seeds]
    assert math.isclose(t[key], sum(vals) / len(vals), rel_tol=1e-12), (key, t[key], vals)
    assert t[key + "_min"] == min(vals) and t[key + "_max"] == max(vals), (key, t)
assert seeds[0]["kl_mean"] != seeds[1]["kl_mean"], "two seeds gave the same cache"
# The first seed is the spec itself: the run without --seeds, bit for bit.
assert seeds[0]["kl_mean"] == single["kl_mean"] and seeds[0]["ppl"] == single["ppl"], (seeds[0], single)
assert "seeds" not in single and "n_seeds" not in single
for kv in ("fp16", "q8"):
    assert runs[kv]["n_seeds"] == 1 and "seeds" not in runs[kv], runs[kv]
assert runs["q8"]["ppl_fp16"] == t["ppl_fp16"] == runs["fp16"]["ppl"]
row = next(l for l in text.splitlines() if l.startswith("turbo "))
# kv, bits/elem, counted (the same: turbo keeps no fp16 tokens by default), seeds, ...
assert row.split()[3] == "2" and row.split()[1] == row.split()[2] and "[" in row, row
assert runs["q8"]["kv_bits_counted"] == runs["q8"]["kv_bits_per_element"] == 8.5, runs["q8"]
PY
fail=0
for n in 0 -1 x 100000; do
  set +e
  err=$("${run[@]}" --kv turbo --seeds "$n" 2>&1 >/dev/null)
  rc=$?
  set -e
  if [[ $rc -ne 2 ]]; then echo "FAIL: --seeds $n exit $rc (want 2)"; fail=1; fi
  if [[ $(printf '%s\n' "$err" | wc -l) -ne 1 || $err != *--seeds* ]]; then echo "FAIL: --seeds $n: $err"; fail=1; fi
done
exit $fail
