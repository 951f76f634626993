#!/usr/bin/env bash
# docs/RESULTS.md is generated, never typed: rendering the committed results/*.json again gives
# the committed document byte for byte, and the figures it links exist.
set -euo pipefail
src=$1
py=/usr/bin/python3
[[ -x $py ]] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$src/tools/report/report.py" render --out "$tmp" >/dev/null
diff "$tmp/RESULTS.md" "$src/docs/RESULTS.md"
n=0
for f in $(grep -o 'figures/[a-z_]*\.png' "$src/docs/RESULTS.md"); do
  [[ -f "$src/docs/$f" && -f "$tmp/$f" ]] || { echo "missing $f"; exit 1; }
  n=$((n + 1))
done
echo "RESULTS.md reproduced from results/*.json; $n figures"
[[ $n -ge 4 ]]
