#!/usr/bin/env bash
# Writes what `veloxquant` prints for a fixed set of inputs into OUTDIR, so that a refactoring can
# be shown to leave behaviour unchanged: `diff -r BEFORE AFTER` (after running this at both
# commits) must print nothing. Covers the method table, perplexity JSON for every method (the
# calibrated ones with calibrations learned here), attn-bench's bits and bytes columns (its speed
# columns are timings, left out) and the bytes of saved sessions. About 5 minutes on 2 cores.
#   bench/behaviour_snapshot.sh OUTDIR [path/to/veloxquant]
set -euo pipefail
out=$1
vq=${2:-build/tools/veloxquant/veloxquant}
model=models/gemma-3-270m-q4_k_m.gguf
text=data/wikitext-2-raw-test.txt
mkdir -p "$out/calib"

"$vq" methods > "$out/methods.txt"
"$vq" methods --json > "$out/methods.json"

for m in kvquant vecinfer spectral commvq; do
  "$vq" calibrate -m "$model" -f "$text" --kv "$m" -c 256 --chunks 1 -o "$out/calib/$m.vqcal" -t 2 >/dev/null 2>&1
done
plain=(fp16 bf16 q8 q4 q4:rot=1 kivi kivi:kbits=4,vbits=4 kivi:kaxis=token turbo turbo:bits=2 turbo:bits=1
       turbo:bits=2,outliers=64 turbo-rvq:bits=1 turbo-prod turbo-prod:bits=2 polar qjl rabitq
       rabitq:bits=2)
args=()
for m in "${plain[@]}"; do args+=(--kv "$m"); done
"$vq" perplexity -m "$model" -f "$text" -c 256 --chunks 2 -t 2 --json "${args[@]}" > "$out/perplexity.json"
for m in kvquant vecinfer spectral commvq; do
  "$vq" perplexity -m "$model" -f "$text" -c 256 --chunks 2 -t 2 --json --kv "$m" --calib "$out/calib/$m.vqcal" \
    > "$out/perplexity_$m.json"
done

"$vq" attn-bench --q-heads 8 --kv-heads 2 --head-dim 128 --ctx 512 --layers 2 --iters 2 --rounds 1 -t 2 --json |
  python3 -c '
import json, sys
d = json.load(sys.stdin)
rows = d["results"]
keep = ("spec", "bits", "bytes")
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if any(s in k for s in keep)}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
json.dump(strip(rows), sys.stdout, indent=1, sort_keys=True)
' > "$out/attn_bench_bits.json"

for m in fp16 q4 kivi turbo rabitq:bits=2 polar qjl; do
  f="$out/session_${m//[:=,]/_}.vqs"
  "$vq" generate -m "$model" -p "The capital of France is" -n 8 -t 2 --kv "$m" --save-cache "$f" >/dev/null 2>&1
done
(cd "$out" && sha256sum session_*.vqs > sessions.sha256 && rm session_*.vqs)
echo "behaviour_snapshot: wrote $out" >&2
