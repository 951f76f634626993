"""The report's "both engines" section: decode speed (and, where a run measured it, prefill speed) of
`veloxquant bench` and llama.cpp's `llama-bench` on the same GGUF, the same threads and the same
depth, run interleaved by bench/vs_llamacpp.py and saved by its --results flag as
results/vs_llamacpp_*.json (one file per depth or per model).

Each contender's figure is the median [min, max] over rounds of its process's own median; a ratio
is taken within each round (ours / llama.cpp's run of that round), then its median [min, max] over
rounds, so that the machine's drift between rounds does not enter it."""
import glob
import json
import os
import statistics


def load_runs(results_dir):
    """[(file name, stamp, runs)] of every results/vs_llamacpp_*.json, in name order."""
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, "vs_llamacpp_*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if "stamp" in doc and doc.get("data", {}).get("runs"):
            out.append((os.path.basename(path), doc["stamp"], doc["data"]["runs"]))
    return out


def _mmm(values, fmt):
    return (fmt + " [" + fmt + ", " + fmt + "]") % (statistics.median(values), min(values), max(values))


def contenders(runs):
    """Contender names in the order of the first round."""
    names = []
    for r in runs:
        if r["name"] not in names:
            names.append(r["name"])
    return names


def same_round_ratios(runs, mine, theirs, key="decode"):
    """Ours / theirs speed (key: decode or prefill) within each round that has both."""
    a = {r["round"]: r[key] for r in runs if r["name"] == mine}
    b = {r["round"]: r[key] for r in runs if r["name"] == theirs}
    return [a[k] / b[k] for k in sorted(a) if k in b and b[k] > 0]


def measured(value):
    """A prefill figure a run has (runs with -p 0 store NaN or nothing)."""
    return isinstance(value, (int, float)) and value == value and value > 0


def speed_table(runs, names, refs, key, table, with_rss):
    """One row per contender: its key speed over rounds, peak RSS if asked, then its same-round ratio to
    each llama.cpp run."""
    rows = []
    for n in names:
        rs = [r for r in runs if r["name"] == n]
        row = [n, _mmm([r[key] for r in rs], "%.2f")]
        if with_rss:
            row.append("%.0f" % statistics.median(r["rss_mib"] for r in rs))
        for ref in refs:
            ratios = same_round_ratios(runs, n, ref, key) if n != ref else []
            row.append(_mmm(ratios, "%.2f×") if ratios else ("1" if n == ref else ""))
        rows.append(row)
    head = ["engine, cache", key + " tok/s"] + (["peak RSS MiB"] if with_rss else [])
    return table(head + ["against " + ref for ref in refs], rows)


def section(results_dir, plt, savefig, table, stamp_line):
    sets = load_runs(results_dir)
    if not sets:
        return []
    parts = ["## Both engines: decode at depth, and prefill (`bench` against llama.cpp's `llama-bench`)", "",
             "The same GGUF file, threads and depth for both engines, run one process at a time and interleaved "
             "by round (`bench/vs_llamacpp.py`). Decode (and, where measured, prefill) tokens/s: median [min, max] "
             "over rounds; ratios are taken "
             "within a round, then their median [min, max]. llama.cpp runs with flash attention on, as its "
             "quantized caches need; its cache type names keys and values.", ""]
    fig, ax = plt.subplots()
    labels, xs = [], []
    for i, (name, stamp, runs) in enumerate(sets):
        depth = runs[0].get("depth", 0)
        names = contenders(runs)
        refs = [n for n in names if n.startswith("llama.cpp")]
        rounds = len({r["round"] for r in runs})
        model = next((r["cmd"].split(" -m ")[1].split()[0] for r in runs if " -m " in r["cmd"]), "?")
        parts += ["### Depth %d, %s (%d round%s)" % (depth, os.path.basename(model), rounds, "" if rounds == 1 else "s"),
                  "", speed_table(runs, names, refs, "decode", table, True), ""]
        if all(measured(r.get("prefill")) for r in runs):
            parts += ["Prefill of the same runs:", "", speed_table(runs, names, refs, "prefill", table, False), ""]
        parts += ["From `results/%s`, llama.cpp commit `%s`. Command: %s" % (
                      name, stamp.get("llama_cpp_commit", "?")[:12], stamp_line(stamp)), ""]
        for j, n in enumerate(names):
            rs = [r["decode"] for r in runs if r["name"] == n]
            x = i * (len(names) + 1) + j
            ax.bar(x, statistics.median(rs), color="C0" if n.startswith("ours") else "C1")
            ax.errorbar(x, statistics.median(rs), yerr=[[statistics.median(rs) - min(rs)], [max(rs) - statistics.median(rs)]],
                        color="black", capsize=2, linewidth=0.8)
            labels.append("%s @%d, %s" % (n.replace("llama.cpp fa1", "llama.cpp"), depth, os.path.basename(model)[:24]))
            xs.append(x)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=6)
    ax.set_yscale("log")  # (files from 0.1 to 1 GB decode from about 10 to 300 tokens/s)
    ax.set_ylabel("decode tokens/s")
    ax.set_title("Decode: ours (blue) and llama.cpp (orange), same file and depth")
    parts += ["![both engines](%s)" % savefig(plt, fig, "engines_decode_at_depth.png"), ""]
    return parts
