#!/usr/bin/env bash
# The report's "which method should I pick?" section from small JSON fixtures: the Pareto front of
# KL against bits holds exactly the undominated settings; a row of another chunking is left out; a
# setting measured twice counts with its newest run; bits count the tokens kept in fp16 (a window
# of 128 at 2048 tokens moves a 2-bit setting out of the 2-bit budget); each budget recommends its
# lowest-KL setting and says its cost; the speed front uses attn-bench's figures; an fp16 row with
# a sink is the table's floor, not a method; two renders give the same bytes.
set -euo pipefail
src=$1
py=/usr/bin/python3
[[ -x $py ]] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$tmp/res"
"$py" - "$tmp/res" <<'PY'
import json, sys
d = sys.argv[1]
def stamp(commit, date):
    return {"command": "veloxquant perplexity", "date": date, "duration_s": 1.0, "commit": commit * 40,
            "machine": {"cpu": "test", "cores": 2}}
def row(kv, bits, kl, ppl, ctx=2048, **extra):
    return dict({"kv": kv, "kv_bits_per_element": bits, "kl_mean": kl, "ppl": ppl, "ppl_stderr": 0.1,
                 "ppl_fp16": 10.0, "ctx": ctx, "chunks": 10, "part": "second-half", "kl_p99": 1.0,
                 "top1_agreement": 0.9}, **extra)
main = [row("fp16", 16, 0.0, 10.0), row("q8", 8.5, 0.01, 10.1), row("q4", 4.5, 0.12, 11.0),
        row("kivi", 3.0, 0.40, 14.0), row("kvquant:bits=2", 2.36, 0.25, 12.5, calibration="first half"),
        row("worse", 4.0, 0.30, 13.0),  # dominated by kvquant:bits=2 (fewer bits, lower KL)
        # 2 bits of codes and a 128-token fp16 window: (1920 x 2 + 128 x 16) / 2048 = 2.875 bits
        row("windowed", 2.0, 0.20, 12.0, kv_window_tokens=128, kv_sink_tokens=0),
        # the reference's own numbers summed in another order: the engine's floor, not a method
        row("fp16:sink=1", 16, 0.005, 10.0, kv_sink_tokens=1)]
json.dump({"mode": "full", "runs": [{"stamp": stamp("a", "2026-01-01T00:00:00Z"), "data": r} for r in main]},
          open(d + "/perplexity.json", "w"))
extra = [row("fp16", 16, 0.0, 10.0), row("q4", 4.5, 0.11, 10.9),  # newer q4
         row("turbo:bits=3", 3.06, 0.5, 15.0, n_seeds=4, kl_mean_min=0.45, kl_mean_max=0.6),
         row("tiny", 1.0, 0.01, 10.1, ctx=512)]  # another chunking: left out
json.dump({"stamp": stamp("b", "2026-02-01T00:00:00Z"), "data": {"runs": extra}},
          open(d + "/perplexity_extra.json", "w"))
# Another build of the engine: its fp16 perplexity differs on the same text and chunking.
old = [row("fp16", 16, 0.0, 10.2), row("old", 16, 0.5, 15.0)]  # dominated by q8
json.dump({"stamp": stamp("c", "2025-12-01T00:00:00Z"), "data": {"runs": old}},
          open(d + "/perplexity_old.json", "w"))
res = [{"spec": s, "speedup_vs_fp16": x, "bits_per_element": 4.0, "kv_bytes": 2**20, "us_per_token": 100 / x,
        "us_per_token_min": 90 / x, "us_per_token_max": 110 / x, "gbps": 10.0} for s, x in [("fp16", 1.0), ("q8", 1.3), ("q4", 2.4), ("kivi", 2.5),
                                                       ("turbo:bits=3", 1.9), ("worse", 0.5)]]
json.dump({"mode": "full", "runs": [{"stamp": stamp("c", "2026-03-01T00:00:00Z"), "data": {"results": res, "read_bandwidth_gbps": 30.0,
                                                                           "fp16_noise_floor": 0.02}}]},
          open(d + "/attn_bench.json", "w"))
PY
"$py" - "$src/tools/report" "$tmp/res" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import pick
chunking, rows = pick.quality_rows(sys.argv[2])
names = [r["kv"] for r in rows]
assert chunking == (2048, 10, "second-half"), chunking
assert "fp16" not in names and "fp16:sink=1" not in names and "tiny" not in names, names
q4 = next(r for r in rows if r["kv"] == "q4")
assert q4["kl_mean"] == 0.11 and q4["source"] == "perplexity_extra.json", q4
windowed = next(r for r in rows if r["kv"] == "windowed")
assert pick.bits_counted(windowed) == 2.875, pick.bits_counted(windowed)
assert pick.bits_counted(dict(windowed, kv_window_tokens=0, kv_sink_tokens=1)) == (2047 * 2 + 16) / 2048
assert pick.is_reference("fp16:sink=1") and pick.is_reference("fp16") and not pick.is_reference("fp16x")
assert not pick.is_reference("q8") and not pick.is_reference("k=fp16,v=q4")
# The engine's own count, where a row carries it, is the one shown.
assert pick.bits_counted(dict(windowed, kv_bits_counted=2.5)) == 2.5
for r in rows:
    r["x"] = pick.bits_counted(r)
front = [r["kv"] for r in pick.front(rows, lambda a, b: a <= b)]
assert front == ["kvquant:bits=2", "windowed", "q4", "q8"], front
speed, _ = pick.attention_speed(sys.argv[2])
recs = {t: (b["kv"], f and f["kv"]) for t, b, f in pick.recommendations(rows, speed)}
assert recs == {2: ("kvquant:bits=2", None), 3: ("windowed", "kivi"), 4: ("q4", None)}, recs
PY
for out in a b; do "$py" "$src/tools/report/report.py" render --results "$tmp/res" --out "$tmp/$out" >/dev/null; done
doc=$tmp/a/RESULTS.md
cmp "$doc" "$tmp/b/RESULTS.md" || fail "two renders differ"
cmp "$tmp/a/figures/pareto_fronts.png" "$tmp/b/figures/pareto_fronts.png" || fail "two renders of the figure differ"
grep -qF '## Which method should I pick?' "$doc" || fail "no section"
grep -qF '`fp16:sink=1` holds the same fp16 numbers as the reference and only sums them in another order: its mean KL, 0.00500 (top-1 agreement 0.9000), is the floor under every row here.' "$doc" || fail "no floor note"
grep -qF 'Measured by another build of the engine (commit `cccccccccccc`): its fp16 perplexity is 10.2000, the main table'"'"'s 10.0000' "$doc" ||
  fail "no note on a section of another build"
[[ $(grep -c 'Measured by another build' "$doc") == 1 ]] || fail "a section of the same build called another build"
grep -qF -- '- **About 2 bits (at most 2.5):** `kvquant:bits=2`: 2.360 bits per element, mean KL 0.25000, PPL +25.00% against fp16, attention speed not measured, needs `veloxquant calibrate` (first half).' "$doc" ||
  fail "the 2-bit recommendation or its cost"
grep -qF 'Fastest in attention within the same budget and at most twice that KL: `kivi`' "$doc" || fail "no faster alternative at 3 bits"
grep -qF '| q4 | 4.500 | 0.11000 | +9.00% | 2.40× | yes | `perplexity_extra.json` (bbbbbbb) |' "$doc" || fail "the front's q4 row"
sed -n '/^## Which method should I pick?/,/^!\[Pareto fronts\]/p' "$doc" > "$tmp/section"
! grep -qF '| worse |' "$tmp/section" || fail "a dominated setting is on the front"
grep -qF '`kivi` (2.50×, KL 0.4000), `q4` (2.40×, KL 0.1100)' "$doc" || fail "the speed front"
echo "pick section: fronts, newest runs and recommendations as expected"
