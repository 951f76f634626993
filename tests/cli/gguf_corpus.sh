#!/usr/bin/env bash
# The malformed-GGUF corpus (tests/data/gguf_corpus, made by make_corpus.py there): the valid
# tiny model generates; every bad_*.gguf is refused by `generate` with exit status 1 and one
# line that names the file.
set -euo pipefail
bin=$1 src=$2
dir="$src/tests/data/gguf_corpus"
"$bin" generate -m "$dir/ok_tiny_llama.gguf" -p "ab" -n 3 -c 32 >/dev/null 2>&1
n=0
for f in "$dir"/bad_*.gguf; do
  set +e
  err=$("$bin" generate -m "$f" -p "ab" -n 2 -c 32 2>&1 >/dev/null)
  st=$?
  set -e
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $st -ne 1 || $lines -ne 1 || "$err" != *"$f"* ]]; then
    echo "FAIL $(basename "$f"): status $st, $lines lines: $err"
    exit 1
  fi
  n=$((n + 1))
done
echo "$n malformed files refused with status 1 and one line"
[[ $n -ge 30 ]]
