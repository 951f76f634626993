#!/usr/bin/env bash
# The report's "both engines" section and the hand-made passkey rows, from small JSON fixtures:
# each contender's median [min, max] over rounds, ratios taken within a round (not of the medians),
# a prefill table where the runs measured prefill,
# every llama.cpp run a column, the stamp's llama.cpp commit named; a results/passkey_*.json run adds
# its rows after the matrix's; two renders give the same bytes.
set -euo pipefail
src=$1
py=/usr/bin/python3
[[ -x $py ]] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$tmp/res"
"$py" - "$tmp/res" <<'PY'
import json, sys
d = sys.argv[1]
def stamp(cmd):
    return {"command": cmd, "date": "2026-01-01T00:00:00Z", "duration_s": 1.0, "commit": "a" * 40,
            "llama_cpp_commit": "b" * 40, "machine": {"cpu": "test", "cores": 2}}
def run(rnd, name, decode, rss=100.0):
    cmd = ("veloxquant bench -m /x/attn.gguf" if name.startswith("ours") else "llama-bench -m /x/attn.gguf")
    return {"round": rnd, "name": name, "depth": 16384, "decode": decode, "decode_minmax": [decode, decode],
            "prefill": float("nan"), "prefill_minmax": [0, 0], "rss_mib": rss, "wall_s": 1.0, "others_cpu": 0.0,
            "uptime": "", "busiest": "", "cmd": cmd}
# Same-round ratios of ours fp16 to llama.cpp f16: 40/10 = 4 and 30/15 = 2 (median 3), while the
# ratio of the medians would be 35/12.5 = 2.8.
runs = [run(0, "ours fp16", 40.0), run(0, "llama.cpp fa1 f16", 10.0), run(0, "llama.cpp fa1 q4_0", 4.0),
        run(1, "ours fp16", 30.0), run(1, "llama.cpp fa1 f16", 15.0), run(1, "llama.cpp fa1 q4_0", 5.0)]
json.dump({"stamp": stamp("python3 bench/vs_llamacpp.py --depth 16384"), "data": {"runs": runs}},
          open(d + "/vs_llamacpp_d16384.json", "w"))
# A depth-0 run with prefill figures: same-round prefill ratios 600/500 = 1.2 and 400/500 = 0.8.
runs0 = [dict(run(0, "ours fp16", 90.0), depth=0, prefill=600.0), dict(run(0, "llama.cpp fa1 f16", 100.0), depth=0, prefill=500.0),
         dict(run(1, "ours fp16", 90.0), depth=0, prefill=400.0), dict(run(1, "llama.cpp fa1 f16", 100.0), depth=0, prefill=500.0)]
json.dump({"stamp": stamp("python3 bench/vs_llamacpp.py"), "data": {"runs": runs0}}, open(d + "/vs_llamacpp_d0.json", "w"))
def pk(kv, accs):
    return {"kv": kv, "model": "m.gguf", "results": [
        {"ctx": c, "accuracy": a, "trials": 10, "depth_bands": [{"from": 0.0, "to": 1.0, "accuracy": a, "trials": 10}]}
        for c, a in accs]}
json.dump({"mode": "full", "runs": [{"stamp": stamp("veloxquant passkey --kv fp16"), "data": pk("fp16", [(4096, 0.7)])}]},
          open(d + "/passkey.json", "w"))
json.dump({"stamp": stamp("veloxquant passkey --kv kvquant:bits=2"), "data": pk("kvquant:bits=2", [(4096, 0.6)])},
          open(d + "/passkey_kvquant2.json", "w"))
PY
for out in a b; do "$py" "$src/tools/report/report.py" render --results "$tmp/res" --out "$tmp/$out" >/dev/null; done
doc=$tmp/a/RESULTS.md
cmp "$doc" "$tmp/b/RESULTS.md" || fail "two renders differ"
cmp "$tmp/a/figures/engines_decode_at_depth.png" "$tmp/b/figures/engines_decode_at_depth.png" || fail "two renders of the figure differ"
grep -qF '## Both engines: decode at depth, and prefill' "$doc" || fail "no section"
grep -qF '| ours fp16 | 500.00 [400.00, 600.00] | 1.00× [0.80×, 1.20×] |' "$doc" || fail "the prefill row of a depth-0 run"
[[ $(grep -c 'Prefill of the same runs:' "$doc") == 1 ]] || fail "a prefill table only where the runs measured prefill"
grep -qF '### Depth 16384, attn.gguf (2 rounds)' "$doc" || fail "the depth heading"
grep -qF '| engine, cache | decode tok/s | peak RSS MiB | against llama.cpp fa1 f16 | against llama.cpp fa1 q4_0 |' "$doc" ||
  fail "one column per llama.cpp run"
grep -qF '| ours fp16 | 35.00 [30.00, 40.00] | 100 | 3.00× [2.00×, 4.00×] | 8.00× [6.00×, 10.00×] |' "$doc" ||
  fail "ours against llama.cpp, ratios within rounds"
grep -qF '| llama.cpp fa1 f16 | 12.50 [10.00, 15.00] | 100 | 1 | 2.75× [2.50×, 3.00×] |' "$doc" || fail "llama.cpp's own row"
grep -qF 'llama.cpp commit `bbbbbbbbbbbb`' "$doc" || fail "llama.cpp's commit"
grep -qF '| kvquant:bits=2 | 4096 | 0.60 | 10 |' "$doc" || fail "the hand-made passkey run"
grep -qF '| fp16 | 4096 | 0.70 | 10 |' "$doc" || fail "the matrix's passkey run"
echo "engines section and passkey rows as expected"
