#!/usr/bin/env bash
# A cache that would exceed --kv-budget is refused before allocation: one line, exit status 2.
set -u
bin=$1 src=$2
err=$("$bin" generate -m "$src/models/gemma-3-270m-q4_k_m.gguf" -p hi -n 2 -c 32768 --kv-budget 64M 2>&1 >/dev/null)
rc=$?
[[ $rc -eq 2 ]] || { echo "exit $rc, want 2"; exit 1; }
[[ $(printf '%s\n' "$err" | wc -l) -eq 1 && $err == *"--kv-budget"* ]] || { echo "message: $err"; exit 1; }
"$bin" generate -m "$src/models/gemma-3-270m-q4_k_m.gguf" -p hi -n 2 -c 40000 >/dev/null 2>&1
[[ $? -eq 2 ]] || { echo "a context beyond the model's 32768 was not refused"; exit 1; }
"$bin" generate -m "$src/models/gemma-3-270m-q4_k_m.gguf" -p hi -n 2 -c 512 --kv q4 --kv-budget 64M >/dev/null 2>&1 || { echo "a small cache was refused"; exit 1; }
