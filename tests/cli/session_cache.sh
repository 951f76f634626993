#!/usr/bin/env bash
# --save-cache / --load-cache: a run continued from a saved session gives exactly the tokens of an
# uninterrupted run (three methods, greedy and sampled); a flipped byte anywhere, a truncated
# file, another method or a small context are refused with exit status 1 or 2 and one line.
set -euo pipefail
bin=$1 src=$2
model="$src/models/gemma-3-270m-q4_k_m.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids() { grep '^ids:' | cut -d' ' -f2-; }
prompt="The history of the city"
for kv in fp16 q4:rot=1 kivi:residual=8; do
  for sampling in "" "--temp 0.8 --seed 7"; do
    # shellcheck disable=SC2086
    whole=$("$bin" generate -m "$model" -p "$prompt" -n 20 --kv "$kv" --ids $sampling 2>&1 >/dev/null | ids)
    # shellcheck disable=SC2086
    first=$("$bin" generate -m "$model" -p "$prompt" -n 9 --kv "$kv" --ids $sampling --save-cache "$tmp/s" 2>&1 >/dev/null | ids)
    # shellcheck disable=SC2086
    rest=$("$bin" generate -m "$model" -n 11 --ids $sampling --load-cache "$tmp/s" 2>&1 >/dev/null | ids)
    if [[ "$whole" != "$first $rest" ]]; then
      echo "FAIL $kv $sampling: uninterrupted [$whole] vs continued [$first $rest]"
      exit 1
    fi
    echo "ok $kv ${sampling:-greedy}: $whole"
  done
done

# chat: the second turn continued from a saved conversation replies exactly as in one session.
chat="$bin chat -m $model -n 24 --kv q4:rot=1"
# Compared as files, byte for byte: a reply may itself end in a newline, which $(...) would eat.
printf 'Name a fruit.\nAnd a vegetable?\n' | $chat > "$tmp/whole.txt"
printf 'Name a fruit.\n' | $chat --save-cache "$tmp/c" > "$tmp/one.txt"
printf 'And a vegetable?\n' | $bin chat -m "$model" -n 24 --load-cache "$tmp/c" > "$tmp/two.txt"
if ! cat "$tmp/one.txt" "$tmp/two.txt" | cmp -s - "$tmp/whole.txt"; then
  echo "FAIL chat: one session [$(cat "$tmp/whole.txt")] vs continued [$(cat "$tmp/one.txt")] [$(cat "$tmp/two.txt")]"
  exit 1
fi
echo "ok chat continued from a saved conversation"

expect_fail() {  # status, then the command
  local want=$1
  shift
  set +e
  err=$("$@" 2>&1 >/dev/null)
  st=$?
  set -e
  if [[ $st -ne $want ]] || [[ $(printf '%s\n' "$err" | grep -c .) -ne 1 ]]; then
    echo "FAIL: wanted status $want and one line, got $st: $err (command: $*)"
    exit 1
  fi
}
"$bin" generate -m "$model" -p "$prompt" -n 4 --kv q4 --save-cache "$tmp/s" >/dev/null 2>&1
size=$(stat -c %s "$tmp/s")
# Bytes in the header, the method, the cache pages, the window, and the checksum itself.
for off in 0 9 13 21 40 200 5000 $((size / 3)) $((size / 2)) $((size - 700)) $((size - 5)) $((size - 1)); do
  cp "$tmp/s" "$tmp/bad"
  python3 -c "import sys; p=sys.argv[1]; o=int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=0x20; open(p,'wb').write(b)" "$tmp/bad" "$off"
  expect_fail 1 "$bin" generate -m "$model" -n 1 --load-cache "$tmp/bad"
done
head -c $((size - 100)) "$tmp/s" > "$tmp/short"
expect_fail 1 "$bin" generate -m "$model" -n 1 --load-cache "$tmp/short"
expect_fail 2 "$bin" generate -m "$model" -n 1 --kv q8 --load-cache "$tmp/s"
expect_fail 2 "$bin" generate -m "$model" -n 1 -c 4 --load-cache "$tmp/s"
expect_fail 2 "$bin" generate -m "$model" -n 1 --load-cache "$tmp/missing"
echo "damaged, truncated and mismatched files refused"
