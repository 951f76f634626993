#!/usr/bin/env bash
# Same input, same output at any thread count: for every registered method (plain and, where it
# applies, rotated; and TurboQuant's fractional split and pieces), generate's token ids and perplexity's
# whole JSON (PPL, KL, top-1) are identical with 1 and 2 threads; a method that learns from data
# is calibrated (at both thread counts: the two files must be identical too; RateQuant's probe
# kept to one 128-token chunk). The optional third argument K/N runs every N-th spec starting at
# the K-th, so ctest can run the shards side by side.
set -euo pipefail
bin=$1 src=$2 shard=${3:-1/1}
shard_k=${shard%/*} shard_n=${shard#*/}
[[ $shard_k =~ ^[0-9]+$ && $shard_n =~ ^[0-9]+$ && $shard_k -ge 1 && $shard_k -le $shard_n ]] || { echo "bad shard '$shard' (want K/N, 1 <= K <= N)"; exit 2; }
model="$src/models/gemma-3-270m-q4_k_m.gguf"
text="$src/data/wikitext-2-raw-test.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
specs=$("$bin" methods --json | python3 -c '
import json, sys
for m in json.load(sys.stdin):
    print(m["name"] + (" calib" if m["needs_calibration"] else ""))
    if any(p["name"] == "rot" for p in m["params"]):
        print(m["name"] + ":rot=1")' | tr ' ' '+')
# Code paths that defaults do not reach: TurboQuant's fractional split (per-group channel masks)
# and its pieces (two per head of 256, their scores added).
specs="$specs turbo:bits=2,outliers=128 turbo:bits=3,channels=128"
index=0
for entry in $specs; do
  index=$((index + 1))
  (( (index - shard_k) % shard_n == 0 )) || continue
  kv=${entry%+calib}
  calib=()
  if [[ $entry == *+calib ]]; then
    for t in 1 2; do
      "$bin" calibrate -m "$model" -f "$text" --part first-half --kv "$kv" -o "calib_$t" -c 128 --chunks 2 --probe-tokens 128 -t $t >/dev/null 2>&1
    done
    cmp -s calib_1 calib_2 || { echo "FAIL $kv: calibration differs"; exit 1; }
    calib=(--calib calib_1)
  fi
  for t in 1 2; do
    "$bin" generate -m "$model" -p "The capital of France" -n 12 --kv "$kv" "${calib[@]}" --ids -t $t 2>&1 >/dev/null | grep '^ids:' > "gen_$t"
    "$bin" perplexity -m "$model" -f "$text" -c 256 --chunks 1 --kv "$kv" "${calib[@]}" --json -t $t 2>/dev/null > "ppl_$t"
  done
  cmp -s gen_1 gen_2 || { echo "FAIL $kv: generate differs"; diff gen_1 gen_2; exit 1; }
  cmp -s ppl_1 ppl_2 || { echo "FAIL $kv: perplexity differs"; diff ppl_1 ppl_2; exit 1; }
  echo "ok $kv: $(python3 -c 'import json,sys; print("ppl", json.load(open(sys.argv[1]))["ppl"])' ppl_1)"
done
