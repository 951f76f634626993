#!/usr/bin/env bash
# Perplexity of Gemma 3 270M over the first 20 chunks of 512 tokens of the WikiText test file,
# fp16 cache, within 0.5% of llama.cpp's llama-perplexity on the same bytes
# (tests/golden/perplexity.json: 19.7459 with its default flash attention, 19.7834 without).
set -euo pipefail
bin=$1 src=$2
out=$("$bin" perplexity -m "$src/models/gemma-3-270m-q4_k_m.gguf" -f "$src/data/wikitext-2-raw-test.txt" \
      -c 512 --chunks 20 -t 2 --json)
python3 - "$out" "$src/tests/golden/perplexity.json" <<'PY'
import json, sys
got = json.loads(sys.argv[1])
runs = json.load(open(sys.argv[2]))["runs"]
ref = next(r for r in runs if r["n_ctx"] == 512 and r["flash_attn"].startswith("auto"))
rel = abs(got["ppl"] - ref["ppl"]) / ref["ppl"]
print(f"ppl {got['ppl']:.4f} +/- {got['ppl_stderr']:.4f} vs llama.cpp {ref['ppl']} +/- {ref['ppl_stderr']}: {100*rel:.3f}%")
assert got["tokens_scored"] == ref["total_scored_tokens"], got["tokens_scored"]
assert rel < 0.005, rel
PY
