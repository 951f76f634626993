#!/usr/bin/env bash
# chat answers each stdin line (two turns, the cache kept between them) and exits 0 at EOF.
# Gemma 3 270M is a base model: its replies to the chat template are not meaningful (llama.cpp's
# are not either), so only the mechanics are checked.
set -euo pipefail
bin=$1 src=$2
out=$(printf 'Hello\nTell me more\n' | "$bin" chat -m "$src/models/gemma-3-270m-q4_k_m.gguf" --kv q4:rot=1 -n 12 -c 256)
[[ -n $out ]] || { echo "no reply"; exit 1; }
echo "$out"
