#!/usr/bin/env bash
# `methods --json` lists every method with its bits per element.
set -eu
out=$("$1" methods --json)
python3 - "$out" <<'PY'
import json, sys
m = {x["name"]: x for x in json.loads(sys.argv[1])}
assert {"fp16", "bf16", "q8", "q4"} <= m.keys(), m.keys()
assert m["q8"]["bits_per_element"] == 8.5 and m["q4"]["bits_per_element"] == 4.5
assert any(p["name"] == "rot" for p in m["q4"]["params"])
PY
