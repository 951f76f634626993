"""The report's "which method should I pick?" section: every perplexity row measured on the text and
chunking of the main quality table (results/perplexity.json and the stamped results/perplexity_*.json),
its attention speed from results/attn_bench.json, the Pareto fronts of KL against bits per element and
against attention speed, and the lowest-KL setting within about 2, 3 and 4 bits with what it costs.

Everything is read from the JSON; nothing here is typed by hand. A spec measured in several files
takes its newest measurement (by the stamp's date), and each row names the file and commit it came
from, because rows of different runs come from different builds of the engine."""
import glob
import json
import os

# Budgets of the recommendations: "about B bits" means at most B + 0.5 bits per element, everything
# counted (the same bits the quality table shows).
TARGETS = [2, 3, 4]


def bits_counted(r):
    """A perplexity row's bits per element, everything counted: its codes and stored parameters
    (kv_bits_per_element) plus the tokens its cache keeps in fp16 (the sinks and the residual window,
    16 bits an element), as a share of the ctx tokens a sequence holds at the end of a chunk. The
    engine writes it as kv_bits_counted (Method::bits_counted); rows written before that field are
    counted here by the same rule, and rows without the window fields (or with none kept in fp16)
    are their codes' bits."""
    if "kv_bits_counted" in r:
        return r["kv_bits_counted"]
    ctx, kept = r.get("ctx"), r.get("kv_sink_tokens", 0) + r.get("kv_window_tokens", 0)
    if not ctx or kept <= 0:
        return r["kv_bits_per_element"]
    kept = min(kept, ctx)
    return ((ctx - kept) * r["kv_bits_per_element"] + kept * 16.0) / ctx


def _chunking(r):
    return (r.get("ctx"), r.get("chunks"), r.get("part", "all"))


def same_chunking(a, b):
    """Whether two perplexity rows scored the same text with the same chunking."""
    return _chunking(a) == _chunking(b)


def is_reference(kv):
    """fp16 itself and fp16 with sinks or a window: they hold the reference's own numbers, so they
    measure the engine's arithmetic, not a method."""
    return kv == "fp16" or kv.startswith("fp16:")


def quality_rows(results_dir):
    """(chunking, rows): the rows of every perplexity file that used the main table's chunking, the
    newest measurement of each spec, without fp16 (the reference itself) and its variants."""
    main_path = os.path.join(results_dir, "perplexity.json")
    if not os.path.exists(main_path):
        return None, []
    with open(main_path) as f:
        main = json.load(f)
    sources = [("perplexity.json", run["stamp"], run["data"]) for run in main["runs"]]
    for path in sorted(glob.glob(os.path.join(results_dir, "perplexity_*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if "stamp" not in doc or "runs" not in doc.get("data", {}):
            continue
        sources += [(os.path.basename(path), doc["stamp"], r) for r in doc["data"]["runs"]]
    if not main["runs"]:
        return None, []
    chunking = _chunking(sources[0][2])
    newest = {}
    for name, stamp, r in sources:
        if is_reference(r["kv"]) or "kl_mean" not in r or _chunking(r) != chunking:
            continue
        row = dict(r, source=name, commit=stamp["commit"][:7], date=stamp["date"])
        if r["kv"] not in newest or row["date"] > newest[r["kv"]]["date"]:
            newest[r["kv"]] = row
    return chunking, sorted(newest.values(), key=lambda r: (bits_counted(r), r["kl_mean"], r["kv"]))


def attention_speed(results_dir):
    """spec -> attn-bench's median speed-up over fp16, with the run's stamp."""
    path = os.path.join(results_dir, "attn_bench.json")
    if not os.path.exists(path):
        return {}, None
    with open(path) as f:
        run = json.load(f)["runs"][0]
    return ({r["spec"]: r["speedup_vs_fp16"] for r in run["data"]["results"] if "speedup_vs_fp16" in r},
            run["stamp"])


def front(rows, better_x):
    """The rows no other row dominates: none has a KL as low and an x as good, one of them strictly.
    better_x(a, b) says whether x value a is at least as good as b."""
    out = []
    for r in rows:
        dominated = any(o is not r and better_x(o["x"], r["x"]) and o["kl_mean"] <= r["kl_mean"] and
                        (o["x"] != r["x"] or o["kl_mean"] < r["kl_mean"]) for o in rows)
        if not dominated:
            out.append(r)
    return out


def _speed_cell(speed, spec):
    return "%.2f×" % speed[spec] if spec in speed else "not measured"


def _speed_words(speed, spec):
    return "attention at %.2f× fp16's speed" % speed[spec] if spec in speed else "attention speed not measured"


def _kl_cell(r):
    cell = "%.5f" % r["kl_mean"]
    if r.get("n_seeds", 1) > 1 and "kl_mean_min" in r:
        cell += " [%.5f, %.5f] over %d seeds" % (r["kl_mean_min"], r["kl_mean_max"], r["n_seeds"])
    return cell


def _dppl(r):
    base = r.get("ppl_fp16")
    return "%+.2f%%" % (100 * (r["ppl"] / base - 1)) if base else "—"


def recommendations(rows, speed):
    """Per target: the lowest-KL row within the budget, and, where it is another row, the fastest in
    attention among the budget's rows whose KL is at most twice the best's."""
    out = []
    for t in TARGETS:
        fits = [r for r in rows if bits_counted(r) <= t + 0.5]
        if not fits:
            continue
        best = min(fits, key=lambda r: (r["kl_mean"], bits_counted(r)))
        timed = [r for r in fits if r["kv"] in speed and r["kl_mean"] <= 2 * best["kl_mean"]]
        fastest = max(timed, key=lambda r: (speed[r["kv"]], -r["kl_mean"])) if timed else None
        out.append((t, best, fastest if fastest is not best else None))
    return out


def _describe(r, speed):
    needs = "needs `veloxquant calibrate` (%s)" % r["calibration"] if r.get("calibration") else "no calibration"
    return ("`%s`: %.3f bits per element, mean KL %s, PPL %s against fp16, %s, %s" %
            (r["kv"], bits_counted(r), _kl_cell(r), _dppl(r), _speed_words(speed, r["kv"]), needs))


def section(results_dir, plt, savefig, table, llama=None):
    """The section's markdown lines (empty without perplexity results); draws its figure."""
    chunking, rows = quality_rows(results_dir)
    if not rows:
        return []
    speed, speed_stamp = attention_speed(results_dir)
    ctx, chunks, part = chunking
    parts = ["## Which method should I pick?", "",
             "Every setting measured on the quality table's text and chunking (%d chunks of %d tokens, %s), from "
             "`results/perplexity.json` and the stamped `results/perplexity_*.json` files; a setting measured more "
             "than once counts with its newest run. Rows of different files come from different builds, named by "
             "their commit. Attention speed is attn-bench's median speed-up over fp16 (its own shape and "
             "synthetic keys, `results/attn_bench.json`%s); settings it did not run say so." % (
                 chunks, ctx, part, ", commit `%s`" % speed_stamp["commit"][:7] if speed_stamp else ""), ""]
    recs = recommendations(rows, speed)
    if recs:
        parts += ["Recommended settings (lowest mean KL within the budget, everything stored counted in the bits):", ""]
        for t, best, fastest in recs:
            parts.append("- **About %d bits (at most %.1f):** %s." % (t, t + 0.5, _describe(best, speed)))
            if fastest:
                parts.append("  Fastest in attention within the same budget and at most twice that KL: %s." %
                             _describe(fastest, speed))
        parts.append("")
    if llama:
        anchors = ["llama.cpp %s: %.3f bits, KL %.5f" % (r["type"], r["bits_per_element"], r["kl_mean"])
                   for r in llama["runs"] if r["type"] != "f16"]
        parts += ["For comparison, llama.cpp's own caches on the same bytes and chunking: " + "; ".join(anchors) +
                  ".", ""]

    for r in rows:
        r["x"] = bits_counted(r)
    by_bits = front(rows, lambda a, b: a <= b)
    timed = [dict(r, x=speed[r["kv"]]) for r in rows if r["kv"] in speed]
    by_speed = front(timed, lambda a, b: a >= b)
    on_speed = {r["kv"] for r in by_speed}
    trows = [[r["kv"], "%.3f" % bits_counted(r), _kl_cell(r), _dppl(r), _speed_cell(speed, r["kv"]),
              "yes" if r["kv"] in on_speed else "", "`%s` (%s)" % (r["source"], r["commit"])] for r in by_bits]
    parts += ["The Pareto front of quality against memory: no other setting has both fewer bits and a lower mean KL.",
              "", table(["method", "bits/elem", "mean KL", "ΔPPL", "attention vs fp16", "also on the speed front",
                         "from"], trows), ""]
    if by_speed:
        parts += ["The front of quality against attention speed (no other setting is both faster and better): " +
                  ", ".join("`%s` (%.2f×, KL %.4f)" % (r["kv"], r["x"], r["kl_mean"])
                            for r in sorted(by_speed, key=lambda r: -r["x"])) + ".", ""]

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    front_names = {r["kv"] for r in by_bits}
    for r in rows:
        on = r["kv"] in front_names
        a1.scatter(bits_counted(r), r["kl_mean"], color="C0" if on else "lightgray", s=18, zorder=3)
        if on:
            a1.annotate(r["kv"], (bits_counted(r), r["kl_mean"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    a1.step([bits_counted(r) for r in by_bits], [r["kl_mean"] for r in by_bits], where="post", color="C0",
            linewidth=0.8)
    if llama:
        for r in llama["runs"]:
            if r["type"] != "f16":
                a1.scatter(r["bits_per_element"], r["kl_mean"], marker="x", color="black", s=36, zorder=4)
                a1.annotate("llama.cpp " + r["type"], (r["bits_per_element"], r["kl_mean"]), fontsize=6,
                            xytext=(3, -9), textcoords="offset points")
    a1.set_yscale("log")
    a1.set_xlabel("bits per element")
    a1.set_ylabel("mean KL vs fp16 cache")
    a1.set_title("Quality against memory (blue: Pareto front)")
    for r in timed:
        on = r["kv"] in on_speed
        a2.scatter(r["x"], r["kl_mean"], color="C1" if on else "lightgray", s=18, zorder=3)
        a2.annotate(r["kv"], (r["x"], r["kl_mean"]), fontsize=6, xytext=(3, 3), textcoords="offset points",
                    color="black" if on else "gray")
    if by_speed:
        pts = sorted(by_speed, key=lambda r: r["x"])
        a2.plot([r["x"] for r in pts], [r["kl_mean"] for r in pts], color="C1", linewidth=0.8)
    a2.axvline(1.0, color="gray", linewidth=0.8, linestyle="--")
    a2.set_yscale("log")
    a2.set_xlabel("attention speed-up over fp16 (attn-bench)")
    a2.set_ylabel("mean KL vs fp16 cache")
    a2.set_title("Quality against attention speed (orange: front)")
    parts += ["![Pareto fronts](%s)" % savefig(plt, fig, "pareto_fronts.png"), ""]
    return parts
