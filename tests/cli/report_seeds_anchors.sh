#!/usr/bin/env bash
# The report's quality table from a small perplexity JSON: a row measured over several seeds shows
# its mean with [min, max] and its seed count, and the document says what the seeds are; llama.cpp's
# own KL figures (tests/golden/llama_cpp_kl.json) are rows of the table when the run used the same
# text part and chunking, and a table apart otherwise; rendering twice gives the same bytes.
set -euo pipefail
src=$1
py=/usr/bin/python3
[[ -x $py ]] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# results/perplexity.json as report.py run writes it, with ctx and chunks given.
fixture() {  # DIR CTX CHUNKS
  mkdir -p "$1"
  "$py" - "$1" "$2" "$3" <<'EOF'
import json, sys
d, ctx, chunks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
common = {"ctx": ctx, "chunks": chunks, "part": "second-half", "file": "data/wikitext-2-raw-test.txt",
          "tokens_scored": 10230}
rows = [
    {"kv": "fp16", "kv_bits_per_element": 16.0, "ppl": 14.714, "ppl_stderr": 0.434},
    {"kv": "q4", "kv_bits_per_element": 4.5, "ppl": 15.9, "ppl_stderr": 0.47, "kl_mean": 0.11, "kl_p99": 0.8,
     "top1_agreement": 0.83},
    {"kv": "turbo:bits=3", "kv_bits_per_element": 3.0625, "ppl": 27.5, "ppl_stderr": 0.8, "ppl_min": 25.1,
     "ppl_max": 30.2, "kl_mean": 0.6, "kl_mean_min": 0.49, "kl_mean_max": 0.77, "kl_p99": 3.5,
     "top1_agreement": 0.62, "n_seeds": 4,
     "seeds": [{"seed": 1234 + i, "kv": "turbo:bits=3", "ppl": 27.5, "ppl_stderr": 0.8, "kl_mean": 0.6,
                "kl_p99": 3.5, "top1_agreement": 0.62} for i in range(4)]},
]
stamp = {"command": "build/tools/veloxquant/veloxquant perplexity --seeds 4", "date": "2026-01-01T00:00:00Z",
         "duration_s": 1.0, "commit": "0" * 40, "machine": {"cpu": "test", "cores": 2}}
runs = [{"stamp": stamp, "data": dict(common, **r)} for r in rows]
json.dump({"mode": "full", "runs": runs}, open(d + "/perplexity.json", "w"), indent=1, sort_keys=True)
EOF
}

fixture "$tmp/same" 2048 10
"$py" "$src/tools/report/report.py" render --results "$tmp/same" --out "$tmp/a" >/dev/null
"$py" "$src/tools/report/report.py" render --results "$tmp/same" --out "$tmp/b" >/dev/null
doc=$tmp/a/RESULTS.md
cmp "$doc" "$tmp/b/RESULTS.md" || fail "two renders of the same JSON differ"
cmp "$tmp/a/figures/kl_vs_bits.png" "$tmp/b/figures/kl_vs_bits.png" || fail "two renders of the KL figure differ"

grep -qF '| turbo:bits=3 | 3.062 | 27.5000 [25.1000, 30.2000] | +86.90% | 0.60000 [0.49000, 0.77000] | 3.5000 | 0.6200 | 4 |' "$doc" ||
  fail "the seeded row lacks its mean [min, max] and seed count"
grep -qF '| q4 | 4.500 | 15.9000 ± 0.4700 | +8.06% | 0.11000 | 0.8000 | 0.8300 | 1 |' "$doc" ||
  fail "a row without seeds is not as before"
grep -qF 'are means over 4 seeds each' "$doc" || fail "no sentence on the seeds"
grep -qF '(`turbo:bits=3`)' "$doc" || fail "the sentence does not name the seeded rows"

# Every llama.cpp cache type of the golden file is a row of the quality table, with its own figures.
"$py" - "$src/tests/golden/llama_cpp_kl.json" > "$tmp/expected" <<'EOF'
import json, sys
g = json.load(open(sys.argv[1]))
types = [r["type"] for r in g["runs"]]
assert "f16" in types and {"q4_0", "q8_0"} <= set(types), types
for r in g["runs"]:
    if r["type"] != "f16":
        print("| llama.cpp %s † | %.3f | %.4f ± %.4f |" % (r["type"], r["bits_per_element"], r["ppl"], r["ppl_stderr"]))
        print("| %.5f ± %.5f | %.4f | %.4f | — |" % (r["kl_mean"], r["kl_mean_stderr"], r["kl_p99"], r["top1_agreement"]))
EOF
[[ $(wc -l < "$tmp/expected") -ge 4 ]] || fail "too few llama.cpp rows expected"
while IFS= read -r line; do
  grep -qF -- "$line" "$doc" || fail "missing llama.cpp figures: $line"
done < "$tmp/expected"
# ... in the quality table itself: no blank line between our rows and llama.cpp's.
awk '/^\| turbo:bits=3 /{t=1; next} t && /^$/{exit 1} t && /^\| llama\.cpp q4_0/{found=1; exit} END{exit !found}' "$doc" ||
  fail "llama.cpp's rows are not in the quality table"
grep -qF "llama.cpp's own figures, from its \`llama-perplexity --kl-divergence\`" "$doc" || fail "the anchors are not labelled"
grep -qF '(our fp16 cache: 14.7140)' "$doc" || fail "the note does not give our fp16 PPL beside llama.cpp's"

# Another chunking: the anchors are listed apart, said to be so, and no seeds sentence without seeds.
fixture "$tmp/other" 512 4
"$py" - "$tmp/other/perplexity.json" <<'EOF'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
for r in d["runs"]:
    for k in ("n_seeds", "ppl_min", "ppl_max", "kl_mean_min", "kl_mean_max", "seeds"):
        r["data"].pop(k, None)
json.dump(d, open(p, "w"), indent=1, sort_keys=True)
EOF
"$py" "$src/tools/report/report.py" render --results "$tmp/other" --out "$tmp/c" >/dev/null
doc=$tmp/c/RESULTS.md
grep -qF 'listed apart and not plotted' "$doc" || fail "anchors of another chunking are not said to be apart"
awk '/^\| turbo:bits=3 /{t=1; next} t && /^$/{gap=1} t && /^\| llama\.cpp q4_0/{exit !gap} END{}' "$doc" ||
  fail "anchors of another chunking are in the run's own table"
grep -qF '| llama.cpp q4_0 †' "$doc" || fail "anchors of another chunking are missing"
! grep -qF 'means over' "$doc" || fail "a seeds sentence without seeded rows"
echo "seeded rows, their sentence and llama.cpp's anchors rendered as expected"
