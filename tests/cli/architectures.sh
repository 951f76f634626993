#!/usr/bin/env bash
# Every architecture through the CLI, on its random-weight model (write_synthetic_model):
# inspect names the architecture and tokenizer and says the engine runs it; generate, chat,
# perplexity and bench work with a compressed cache (and bench's default prompt stays inside the
# model's vocabulary); an architecture the engine does not run is refused with one line that
# lists those it runs.
set -euo pipefail
bin=$1 writer=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'The rain came in long grey sheets from the west.\nNobody spoke much at the mill.\n%.0s' {1..20} > "$work/text.txt"
for name in llama3 mistral qwen2 qwen3 phi3 gemma2; do
  m="$work/$name.gguf"
  "$writer" "$name" "$m"
  info=$("$bin" inspect -m "$m")
  grep -q "runs: yes" <<<"$info" || { echo "$name: inspect does not say the engine runs it"; echo "$info"; exit 1; }
  arch=$(python3 -c "import sys; print({'llama3':'llama','mistral':'llama'}.get(sys.argv[1], sys.argv[1]))" "$name")
  grep -q "$arch" <<<"$info" || { echo "$name: inspect does not name $arch"; exit 1; }
  "$bin" generate -m "$m" -p "The rain came" -n 6 -c 64 --kv kivi:kbits=2,vbits=2,residual=16 >/dev/null
  printf 'Hello\n' | "$bin" chat -m "$m" --kv q4:rot=1 -n 4 -c 128 >/dev/null
  ppl=$("$bin" perplexity -m "$m" -f "$work/text.txt" -c 64 --chunks 2 --kv fp16 --kv kivi --json)
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); runs=d.get('runs', [d]); assert all(r['ppl'] > 1 for r in runs), d" "$ppl"
  "$bin" bench -m "$m" --kv fp16 --kv q4 -p 32 -n 4 --reps 1 --depths 0,32 >/dev/null
  echo "$name: inspect, generate, chat, perplexity, bench ok"
done
python3 - "$work/llama3.gguf" "$work/unknown.gguf" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'wb').write(data.replace(b'llama', b'lxama', 1))
PY
set +e
err=$("$bin" generate -m "$work/unknown.gguf" -p "a" -n 1 2>&1 >/dev/null)
st=$?
set -e
lines=$(printf '%s\n' "$err" | grep -c .)
if [[ $st -ne 1 || $lines -ne 1 || "$err" != *"'lxama' is not supported"*"qwen3"* ]]; then
  echo "unknown architecture: status $st, $lines lines: $err"
  exit 1
fi
echo "unknown architecture refused: $err"
