#!/usr/bin/env python3
"""The results report: runs a method matrix through perplexity (with KL against fp16), passkey,
bench, attn-bench and fidelity, stores each tool's JSON with a stamp (machine, commit, date, exact
command, duration) in results/, and renders docs/RESULTS.md and docs/figures/*.png from those
files (and llama.cpp's own KL figures, tests/golden/llama_cpp_kl.json) alone, so the document is never
typed and rendering the same JSON gives the same bytes.

    report.py run [--quick] [--only STEP ...]   run the matrix (quick: under 15 minutes on 2 cores), then render
    report.py render            only render, from results/*.json
    either with --out D (write RESULTS.md and figures/ into D instead of docs/) and --results D (read and
    write the JSON in D instead of results/)

Methods that draw a random rotation or sketch are measured over SEEDS consecutive seeds (perplexity
--seeds): their rows give the mean with [min, max] over seeds.

Methods that learn from data (KVQuant; VecInfer, once per seed) are calibrated first, on the first half of the text
(results/calib/, not committed: the run remakes them); perplexity is measured on the second half,
so no method is evaluated on text its calibration saw.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engines  # noqa: E402  (the "both engines" section, beside this file)
import pick  # noqa: E402  (the "which method" section, beside this file)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "tools", "veloxquant", "veloxquant")
MODEL = os.path.join("models", "gemma-3-270m-q4_k_m.gguf")
TEXT = os.path.join("data", "wikitext-2-raw-test.txt")
RESULTS = os.path.join(ROOT, "results")
DOC = os.path.join(ROOT, "docs", "RESULTS.md")
FIGURES = os.path.join(ROOT, "docs", "figures")

KIVI = ["kivi:kbits=2,vbits=2", "kivi:kbits=3,vbits=3", "kivi:kbits=4,vbits=4"]
BASELINES = ["fp16", "q8", "q4", "q4:rot=1"]
KVQUANT = ["kvquant:bits=2,outliers=0", "kvquant:bits=2", "kvquant:bits=3,outliers=0", "kvquant:bits=3",
           "kvquant:bits=4,outliers=0", "kvquant:bits=4", "kvquant:bits=3,weighted=0"]
CALIB = os.path.join("results", "calib")
# llama.cpp's own llama-perplexity --kl-divergence on the second half of the text (ctx 2048, 10
# chunks): the anchors of the quality table (tests/golden/README.md, COMMANDS.md section f).
LLAMA_KL = os.path.join(ROOT, "tests", "golden", "llama_cpp_kl.json")
# Rotation and sketch rows, each measured over SEEDS seeds (its own and the SEEDS-1 after it).
SEEDS = 4
ROTATION_QUICK = ["q4:rot=1", "turbo:bits=3", "turbo:bits=3,norm=length"]
ROTATION = ["q4:rot=1", "turbo:bits=2", "turbo:bits=3", "turbo:bits=3,norm=length", "turbo:bits=4", "rabitq:bits=2",
            "rabitq:bits=3", "qjl", "vecinfer"]


def seed_specs(spec, n):
    """The specs perplexity --seeds n runs for a spec without an explicit seed: its own (default)
    seed and the n-1 after it. VecInfer needs a calibration made for each of them."""
    return [spec] + ["%s%sseed=%d" % (spec, "," if ":" in spec else ":", 1234 + i) for i in range(1, n)]

MATRIX = {
    "quick": {
        "calibrate": {"ctx": 512, "chunks": 4, "specs": ["kvquant:bits=2", "kvquant:bits=3"]},
        "perplexity": {"ctx": 512, "chunks": 4, "seeds": SEEDS,
                       "specs": BASELINES[:3] + KIVI + ["kivi:kaxis=token", "kvquant:bits=2", "kvquant:bits=3"] +
                       ROTATION_QUICK},
        "passkey": {"ctx": "1024,2048", "trials": 4, "specs": ["fp16", "q4:rot=1", "kivi"]},
        "bench": {"prompt": 256, "n": 16, "depths": "0,2048", "reps": 2, "specs": ["fp16", "q8", "q4", "kivi"]},
        "attn_bench": {"ctx": 8192, "layers": 8, "rounds": 3, "iters": 2},
        "fidelity": {"tokens": 512, "queries": 16, "specs": BASELINES[1:] + KIVI + ["kivi:kaxis=token"]},
        "serve": {"specs": ["fp16", "kivi"], "concurrency": "1,2,4,8", "requests": 8, "max_tokens": 32,
                  "hold_tokens": 2000, "hold_budget": "115M", "hold_requests": 20},  # 4 x fp16's 28.5 MiB
    },
    "full": {
        "calibrate": {"ctx": 1024, "chunks": 8, "specs": KVQUANT + seed_specs("vecinfer", SEEDS)},
        "perplexity": {"ctx": 2048, "chunks": 10, "seeds": SEEDS,
                       "specs": BASELINES[:3] + KIVI + ["kivi:kaxis=token"] + KVQUANT + ROTATION},
        "passkey": {"ctx": "1024,4096,8192", "trials": 10, "specs": ["fp16", "q8", "q4:rot=1", "kivi"]},
        "bench": {"prompt": 512, "n": 32, "depths": "0,4096,16384,32000", "reps": 3,
                  "specs": ["fp16", "q8", "q4", "q4:rot=1", "kivi"]},
        "attn_bench": {"ctx": 32768, "layers": 16, "rounds": 5, "iters": 4},
        "fidelity": {"tokens": 2048, "queries": 32, "specs": BASELINES[1:] + KIVI + ["kivi:kaxis=token"]},
        # Sequences of 8k tokens under a budget sized for 4 of them in fp16 (47.3 MiB each).
        "serve": {"specs": ["fp16", "kivi"], "concurrency": "1,2,4,8,16", "requests": 16, "max_tokens": 64,
                  "hold_tokens": 8150, "hold_budget": "190M", "hold_requests": 20},
    },
}


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "os": platform.platform()}


def commit():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def run_tool(args):
    """Runs veloxquant with --json from the repository root; returns (stamp, parsed output)."""
    cmd = ["build/tools/veloxquant/veloxquant"] + args + ["--json"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("report: failed: %s\n%s" % (" ".join(cmd), proc.stderr.strip()[-2000:]))
    stamp = {"command": " ".join(cmd), "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
             "duration_s": round(time.time() - t0, 1), "commit": commit(), "machine": machine()}
    print("report: %5.0f s  %s" % (stamp["duration_s"], stamp["command"]), flush=True)
    return {"stamp": stamp, "data": json.loads(proc.stdout)}


def run_script(args):
    """Runs a script that prints JSON (the load test); returns {stamp, data} as run_tool does."""
    t0 = time.time()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("report: failed: %s\n%s" % (" ".join(args), proc.stderr.strip()[-2000:]))
    stamp = {"command": " ".join(args), "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
             "duration_s": round(time.time() - t0, 1), "commit": commit(), "machine": machine()}
    print("report: %5.0f s  %s" % (stamp["duration_s"], stamp["command"]), flush=True)
    return {"stamp": stamp, "data": json.loads(proc.stdout)}


def save(name, obj):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def calib_path(spec):
    return os.path.join(CALIB, spec.replace(":", "_").replace(",", "_").replace("=", "-") + ".vqcal")


STEPS = ["calibrate", "perplexity", "passkey", "bench", "attn_bench", "attn_bench_avx2", "fidelity", "serve"]


def run(mode, only):
    m = MATRIX[mode]
    t0 = time.time()
    steps = only or STEPS
    c = m["calibrate"]
    if "calibrate" in steps:
        os.makedirs(os.path.join(ROOT, CALIB), exist_ok=True)
        for s in c["specs"]:  # writes the file; prints a table, not JSON
            cmd = ["build/tools/veloxquant/veloxquant", "calibrate", "-m", MODEL, "-f", TEXT, "--part", "first-half",
                   "--kv", s, "-o", calib_path(s), "-c", str(c["ctx"]), "--chunks", str(c["chunks"])]
            t = time.time()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit("report: failed: %s\n%s" % (" ".join(cmd), proc.stderr.strip()[-2000:]))
            print("report: %5.0f s  %s" % (time.time() - t, " ".join(cmd)), flush=True)
    calibs = sum((["--calib", calib_path(s)] for s in c["specs"]), [])
    p = m["perplexity"]
    if "perplexity" in steps:
        # One invocation: a single fp16 pass per chunk serves every method's KL; --seeds runs the
        # methods that draw a rotation or sketch once per seed, the others once.
        kvs = sum((["--kv", s] for s in p["specs"]), [])
        out = run_tool(["perplexity", "-m", MODEL, "-f", TEXT, "--part", "second-half", "-c", str(p["ctx"]),
                        "--chunks", str(p["chunks"]), "--seeds", str(p["seeds"])] + kvs + calibs)
        save("perplexity", {"mode": mode, "runs": [{"stamp": out["stamp"], "data": r} for r in out["data"]["runs"]]})
    k = m["passkey"]
    if "passkey" in steps:
        save("passkey", {"mode": mode, "runs": [
            run_tool(["passkey", "-m", MODEL, "--ctx", k["ctx"], "--trials", str(k["trials"]), "--seed", "1", "--kv", s])
            for s in k["specs"]]})
    b = m["bench"]
    if "bench" in steps:
        kvs = sum((["--kv", s] for s in b["specs"]), [])
        save("bench", {"mode": mode, "runs": [run_tool(
            ["bench", "-m", MODEL, "-f", TEXT, "-p", str(b["prompt"]), "-n", str(b["n"]), "--depths", b["depths"],
             "--reps", str(b["reps"])] + kvs)]})
    a = m["attn_bench"]
    # The same table twice: the best SIMD target, and AVX2 forced (what a CPU without AVX-512 runs).
    for step, simd in (("attn_bench", []), ("attn_bench_avx2", ["--simd", "avx2"])):
        if step in steps:
            save(step, {"mode": mode, "runs": [run_tool(
                ["attn-bench", "--q-heads", "32", "--kv-heads", "8", "--head-dim", "128", "--ctx", str(a["ctx"]),
                 "--layers", str(a["layers"]), "--rounds", str(a["rounds"]), "--iters", str(a["iters"]),
                 "--threads", "2"] + simd)]})
    f = m["fidelity"]
    if "fidelity" in steps:
        kvs = sum((["--kv", s] for s in f["specs"]), [])
        save("fidelity", {"mode": mode, "runs": [run_tool(
            ["fidelity", "-m", MODEL, "-f", TEXT, "--tokens", str(f["tokens"]), "--queries", str(f["queries"])] + kvs)]})
    sv = m["serve"]
    if "serve" in steps:
        kvs = sum((["--kv", s] for s in sv["specs"]), [])
        speed = run_script(["scripts/load-test"] + kvs + ["--concurrency", sv["concurrency"], "--requests",
                           str(sv["requests"]), "--max-tokens", str(sv["max_tokens"])])
        held = run_script(["scripts/load-test"] + kvs + ["--kv-budget", sv["hold_budget"], "--ctx",
                          str(sv["hold_tokens"] + 64), "--hold", str(sv["hold_tokens"]), "--max-tokens", "16",
                          "--requests", str(sv["hold_requests"])])
        save("serve", {"mode": mode, "speed": speed, "hold": held})
    if only:
        return
    save("run", {"mode": mode, "duration_s": round(time.time() - t0, 1), "commit": commit(), "machine": machine()})


# ---------------------------------------------------------------- rendering (from JSON only)

def load(name):
    path = os.path.join(RESULTS, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def stamp_line(stamp):
    duration = stamp.get("duration_s", "?")
    duration = "%s s" % duration if isinstance(duration, (int, float)) else str(duration)
    line = "`%s` — %s, commit `%s`, %s" % (stamp["command"], stamp["date"], stamp["commit"][:12], duration)
    # Sections are rerun on whatever machine a session has: each names its CPU.
    mc = stamp.get("machine")
    if isinstance(mc, dict) and mc.get("cpu"):
        line += ", %s (%s cores)" % (mc["cpu"], mc.get("cores", "?"))
    elif isinstance(mc, str) and mc:
        line += ", " + mc
    if stamp.get("note"):
        line += "; " + stamp["note"]
    return line


def commands(runs):
    """The runs' command lines, each once, in order (one tool run gives several rows)."""
    seen, out = set(), []
    for r in runs:
        line = stamp_line(r["stamp"])
        if line not in seen:
            seen.add(line)
            out.append("- " + line)
    return out


def spread(r, key, fmt):
    """The figure, and for a row measured over several seeds its [min, max] over them."""
    cell = fmt % r.get(key, 0.0)
    if r.get("n_seeds", 1) > 1 and key + "_min" in r:
        cell += " [%s, %s]" % (fmt % r[key + "_min"], fmt % r[key + "_max"])
    return cell


def ppl_rows(runs, base):
    rows = []
    for r in runs:
        d_ppl = "" if base is None else "%+.2f%%" % (100 * (r["ppl"] / base["ppl"] - 1))
        ppl = (spread(r, "ppl", "%.4f") if r.get("n_seeds", 1) > 1 else
               "%.4f ± %.4f" % (r["ppl"], r["ppl_stderr"]))
        rows.append([r["kv"], "%.3f" % pick.bits_counted(r), ppl, d_ppl, spread(r, "kl_mean", "%.5f"),
                     "%.4f" % r.get("kl_p99", 0.0), "%.4f" % r.get("top1_agreement", 1.0),
                     str(r.get("n_seeds", 1))])
    return rows


def seeds_sentence(runs):
    """What the seed column means, from the rows themselves."""
    counts = sorted({r["n_seeds"] for r in runs if r.get("n_seeds", 1) > 1})
    if not counts:
        return []
    seeded = [r["kv"] for r in runs if r.get("n_seeds", 1) > 1]
    return ["Rows of methods that draw a random rotation or sketch (%s) are means over %s seeds each (the "
            "spec's own seed and the ones after it, `perplexity --seeds`): PPL and mean KL give the mean with "
            "[min, max] over seeds, KL p99 and top-1 agreement the mean. The other rows draw nothing and ran "
            "once." % (", ".join("`%s`" % k for k in seeded), " or ".join(str(c) for c in counts)), ""]


def load_llama_kl():
    if not os.path.exists(LLAMA_KL):
        return None
    with open(LLAMA_KL) as f:
        return json.load(f)


def llama_matches(g, first):
    """Whether llama.cpp's figures were measured on this run's text and chunking."""
    return (g["ctx"] == first["ctx"] and g["chunks"] == first["chunks"] and
            g["text"]["part"] == first.get("part", "all"))


def llama_rows(g):
    base = next(r for r in g["runs"] if r["type"] == "f16")
    rows = []
    for r in g["runs"]:
        if r["type"] == "f16":
            continue
        rows.append(["llama.cpp %s †" % r["type"], "%.3f" % r["bits_per_element"],
                     "%.4f ± %.4f" % (r["ppl"], r["ppl_stderr"]), "%+.2f%%" % (100 * (r["ppl"] / base["ppl"] - 1)),
                     "%.5f ± %.5f" % (r["kl_mean"], r["kl_mean_stderr"]), "%.4f" % r["kl_p99"],
                     "%.4f" % r["top1_agreement"], "—"])
    return rows


def llama_note(g, same, ours_fp16):
    base = next(r for r in g["runs"] if r["type"] == "f16")
    return ("† llama.cpp's own figures, from its `llama-perplexity --kl-divergence` (%s, commit `%s`) on the same "
            "model and the same bytes (the second half of the text, %d chunks of %d tokens): KL and ΔPPL against "
            "llama.cpp's own f16 cache, whose PPL is %.4f ± %.4f%s; bits per element from its block layouts. Golden "
            "data and the commands: `tests/golden/llama_cpp_kl.json`%s." % (
                g["llama_cpp"]["repository"], g["llama_cpp"]["commit"][:8], g["chunks"], g["ctx"], base["ppl"],
                base["ppl_stderr"], " (our fp16 cache: %.4f)" % ours_fp16 if same and ours_fp16 else "",
                "" if same else ". This run used another chunking, so they are listed apart and not plotted"))


PPL_HEADER = ["method", "bits/elem", "PPL", "ΔPPL", "mean KL", "KL p99", "top-1 agreement", "seeds"]


def floor_note(runs):
    """What a row that holds the reference's own fp16 numbers (an fp16 spec with sinks or a window,
    which only sums them in another order) says about every other row: the smallest KL this
    engine's arithmetic lets any change of the cache reach."""
    same = [r for r in runs if r["kv"] != "fp16" and pick.is_reference(r["kv"]) and "kl_mean" in r]
    if not same:
        return []
    return [" ".join(
        "`%s` holds the same fp16 numbers as the reference and only sums them in another order: its mean KL, "
        "%.5f (top-1 agreement %.4f), is the floor under every row here." % (r["kv"], r["kl_mean"],
                                                                            r.get("top1_agreement", 1.0))
        for r in same) + " The weight kernels quantize each product's activations to 8 bits, as llama.cpp's "
        "do, so a last-bit difference anywhere in the cache moves some of those roundings by a whole quantum, "
        "and the change spreads through the layers (docs/engine.md).", ""]


def extra_quality_sections(main_first=None, main_fp16_ppl=None):
    """results/perplexity_*.json: single stamped perplexity runs of further method families, made by hand
    with the command in their stamp (the report's own matrix does not run them). A section on the main
    table's text and chunking whose fp16 perplexity differs from the main table's was measured by
    another build of the engine, and says so."""
    parts = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "perplexity_*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if "stamp" not in doc or "runs" not in doc.get("data", {}):
            continue
        runs = doc["data"]["runs"]
        base = next((r for r in runs if r["kv"] == "fp16"), None)
        name = os.path.basename(path)[len("perplexity_"):-len(".json")].replace("_", " ")
        first = runs[0]
        parts += ["### %s" % name, "",
                  "%d chunks of %d tokens (%s), KL against the fp16 cache in the same run; from `results/%s`." %
                  (first["chunks"], first["ctx"], first.get("part", "all"), os.path.basename(path)), ""]
        calib = doc["stamp"].get("calibration_command")
        if calib:
            parts += ["Calibration: `%s`" % calib, ""]
        if (base and main_first and main_fp16_ppl and pick.same_chunking(first, main_first) and
                abs(base["ppl"] / main_fp16_ppl - 1) > 1e-9):
            parts += ["Measured by another build of the engine (commit `%s`): its fp16 perplexity is %.4f, the main "
                      "table's %.4f, so its KL compares with the rows of this section, not with the main table's." %
                      (doc["stamp"]["commit"].split()[0][:12], base["ppl"], main_fp16_ppl), ""]
        parts += seeds_sentence(runs)
        parts += [table(PPL_HEADER, ppl_rows(runs, base)), "", "Command:", ""] + commands([doc]) + [""]
    if parts:
        parts = ["## Quality of further method families (single runs)", ""] + parts
    return parts


def figure_setup():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.figsize": (6.4, 4.0), "figure.dpi": 100, "font.size": 9,
                         "svg.hashsalt": "veloxquant"})
    return plt


def savefig(plt, fig, name):
    os.makedirs(FIGURES, exist_ok=True)
    fig.tight_layout()
    fig.savefig(os.path.join(FIGURES, name), metadata={"Software": None})  # no version stamp: same bytes
    plt.close(fig)
    return "figures/" + name


def render():
    plt = figure_setup()
    parts = ["# Results", "",
             "Generated by `scripts/report` from `results/*.json` (never edited by hand): every table and "
             "figure below is rendered from those files, each stamped with the exact command, commit, date "
             "and machine. Model: Gemma 3 270M (Q4_K_M GGUF); text: WikiText-2 raw test.", ""]
    meta = load("run")
    if meta:
        mc = meta["machine"]
        parts += ["Last run of every step together: `%s` mode, %.0f minutes, commit `%s`; machine: %s, %d cores, "
                  "%.1f GiB. A section rerun since then (`--only`) names its own mode; every command below carries "
                  "its stamp." % (meta["mode"], meta["duration_s"] / 60, meta["commit"][:12], mc["cpu"], mc["cores"],
                                  mc["memory_gib"]), ""]

    ppl = load("perplexity")
    anchors = None  # llama.cpp's figures, where they share the quality table's text and chunking
    runs, base = [], None  # the main table's rows and its fp16 row, which the further sections compare with
    if ppl:
        runs = [r["data"] for r in ppl["runs"]]
        base = next((r for r in runs if r["kv"] == "fp16"), None)
        rows = ppl_rows(runs, base)
        first = runs[0]
        calibrated = sorted({r["calibration"] for r in runs if "calibration" in r})
        text_part = first.get("part", "all")
        parts += ["## Quality: perplexity and KL divergence against the fp16 cache", "",
                  "`%s` mode: %d chunks of %d tokens of the text (%s; llama.cpp's perplexity chunking, second half "
                  "of each chunk scored). Bits per element count everything: codes, scales, zero points, outlier slots, "
                  "every stored parameter, and the tokens kept in fp16 (sinks and the residual window) as their "
                  "share of the %d tokens a sequence holds at the end of a chunk (on sliding-window layers, which "
                  "hold fewer, that share is larger; `bench` measures the bytes resident)." % (
                      ppl.get("mode", "?"), first["chunks"], first["ctx"],
                      "the whole file" if text_part == "all" else "its " + text_part, first["ctx"]), ""]
        if calibrated:
            parts += ["Methods that learn from data were calibrated on: " + "; ".join(calibrated) +
                      " (text never scored here).", ""]
        llama = load_llama_kl()
        same = llama is not None and llama_matches(llama, first)
        anchors = llama if same else None
        parts += seeds_sentence(runs)
        parts += [table(PPL_HEADER, rows + (llama_rows(llama) if same else [])), ""]
        parts += floor_note(runs)
        if llama:
            if not same:
                parts += [table(PPL_HEADER, llama_rows(llama)), ""]
            parts += [llama_note(llama, same, base["ppl"] if base else None), ""]
        fig, ax = plt.subplots()
        for r in runs:
            if r["kv"] == "fp16":
                continue
            x, y = pick.bits_counted(r), max(r["kl_mean"], 1e-6)
            if r.get("n_seeds", 1) > 1 and "kl_mean_min" in r:  # bar: [min, max] over seeds
                ax.errorbar(x, y, yerr=[[y - max(r["kl_mean_min"], 1e-6)], [max(r["kl_mean_max"], 1e-6) - y]],
                            fmt="o", capsize=3)
            else:
                ax.scatter(x, y)
            ax.annotate(r["kv"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        if same:
            for r in llama["runs"]:
                if r["type"] == "f16":
                    continue
                ax.scatter(r["bits_per_element"], r["kl_mean"], marker="x", color="black", s=40)
                ax.annotate("llama.cpp %s" % r["type"], (r["bits_per_element"], r["kl_mean"]), fontsize=7,
                            xytext=(3, -9), textcoords="offset points")
        ax.set_yscale("log")
        ax.set_xlabel("bits per element")
        ax.set_ylabel("mean KL divergence vs fp16 cache")
        ax.set_title("Quality against memory (bars: min–max over seeds; x: llama.cpp's own)" if same else
                     "Quality against memory (bars: min–max over seeds)")
        parts += ["![KL against bits](%s)" % savefig(plt, fig, "kl_vs_bits.png"), ""]
        fig, ax = plt.subplots()
        for r in runs:
            ax.scatter(pick.bits_counted(r), r["ppl"])
            ax.annotate(r["kv"], (pick.bits_counted(r), r["ppl"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        if base:
            ax.axhline(base["ppl"], color="gray", linewidth=0.8, linestyle="--")
        ax.set_xlabel("bits per element")
        ax.set_ylabel("perplexity")
        ax.set_title("Perplexity against memory (dashed: fp16 cache)")
        parts += ["![PPL against bits](%s)" % savefig(plt, fig, "ppl_vs_bits.png"), ""]
        parts += ["Commands:", ""] + commands(ppl["runs"]) + [""]
    parts += extra_quality_sections(runs[0] if runs else None, base["ppl"] if base else None)
    parts += pick.section(RESULTS, plt, savefig, table, anchors)

    pk = load("passkey")
    if pk:
        # results/passkey_*.json: single stamped passkey runs made by hand with the command in their
        # stamp (settings that need a calibration the matrix does not make), shown after the matrix's.
        for path in sorted(glob.glob(os.path.join(RESULTS, "passkey_*.json"))):
            with open(path) as f:
                extra = json.load(f)
            if "stamp" in extra and "results" in extra.get("data", {}):
                pk["runs"].append(extra)
        rows, fig_data = [], {}
        for run in pk["runs"]:
            d = run["data"]
            for r in d["results"]:
                bands = ", ".join("%.0f–%.0f%%: %d/%d" % (100 * b["from"], 100 * b["to"],
                                                           round(b["accuracy"] * b["trials"]), b["trials"])
                                  for b in r["depth_bands"])
                # The commit the run was measured at: the rows come from runs made at different
                # times, and the engine's arithmetic moved between them (docs/engine.md).
                rows.append([d["kv"], r["ctx"], "%.2f" % r["accuracy"], r["trials"], bands,
                             "`%s`" % run["stamp"]["commit"][:7]])
                fig_data.setdefault(d["kv"], []).append((r["ctx"], r["accuracy"]))
        parts += ["## Passkey retrieval", "",
                  "A random 5-digit key hidden at a random depth of filler text; accuracy per length and per "
                  "depth band (correct/trials), and the commit each run was measured at (rows measured at "
                  "different commits compare only loosely: the engine's arithmetic changed between them).", "",
                  table(["method", "tokens", "accuracy", "trials", "by depth", "commit"], rows), ""]
        fig, ax = plt.subplots()
        for kv, pts in fig_data.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kv)
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("retrieval accuracy")
        ax.set_title("Passkey retrieval against length")
        ax.legend()
        parts += ["![passkey](%s)" % savefig(plt, fig, "passkey_vs_length.png"), ""]
        parts += ["Commands:", ""] + commands(pk["runs"]) + [""]

    bench = load("bench")
    if bench:
        run = bench["runs"][0]
        d = run["data"]
        noise = d.get("fp16_noise_floor", 0.0)
        depths = [x["depth"] for x in d["results"][0]["decode"]]
        base = next((r for r in d["results"] if r["spec"] == "fp16"), None)
        rows = []
        for r in d["results"]:
            row = [r["spec"], "%.3f" % r["bits_per_element"],
                   "%.0f [%.0f, %.0f]" % (r["prefill_tps"], r["prefill_tps_min"], r["prefill_tps_max"])]
            for i, x in enumerate(r["decode"]):
                cell = "%.1f [%.1f, %.1f]" % (x["tps"], x["tps_min"], x["tps_max"])
                if base and r is not base:
                    ratio = x["tps"] / base["decode"][i]["tps"]
                    cell += " (%.2f×%s)" % (ratio, ", within noise" if abs(ratio - 1) <= noise else "")
                row.append(cell)
            row += ["%.0f" % r["kv_bytes_per_token"], "%.3f" % r["block_bytes_over_formula"]]
            rows.append(row)
        parts += ["## Speed and memory of the whole model (`bench`)", "",
                  "Tokens/s: median [min, max] over %d interleaved rounds, %d threads; decode ratio against fp16 "
                  "in parentheses. fp16 noise floor (max−min)/median: %.1f%% — a ratio within it is labelled so. "
                  "KV bytes per token: everything resident (pages, fp16 windows, sinks, codec state) at the "
                  "deepest depth; blocks/formula: bytes of compressed pages over the bits-per-element formula "
                  "applied to the tokens they hold (pages are allocated 256 tokens at a time, 64 in sliding-window "
                  "layers, so the last page of each layer and head carries slack, which shrinks as the context "
                  "grows; sliding-window layers also keep a partly visible first page). Peak RSS %.0f MiB." % (d["reps"], d["threads"], 100 * noise, d["peak_rss_bytes"] / 2**20), "",
                  table(["method", "bits/elem", "prefill tok/s"] + ["decode tok/s @%d" % x for x in depths] +
                        ["KV bytes/token", "blocks/formula"], rows), ""]
        fig, ax = plt.subplots()
        for r in d["results"]:
            xs = [x["depth"] for x in r["decode"]]
            ax.errorbar(xs, [x["tps"] for x in r["decode"]],
                        yerr=[[x["tps"] - x["tps_min"] for x in r["decode"]], [x["tps_max"] - x["tps"] for x in r["decode"]]],
                        marker="o", capsize=3, label=r["spec"])
        ax.set_xlabel("tokens already in the cache")
        ax.set_ylabel("decode tokens/s")
        ax.set_title("Decode speed against context length (median, min–max)")
        ax.legend()
        parts += ["![decode speed](%s)" % savefig(plt, fig, "decode_speed_vs_context.png"), ""]
        fig, ax = plt.subplots()
        for r in d["results"]:
            pts = [(x["kv_tokens"], x["kv_bytes"] / 2**20) for x in r["decode"] if "kv_bytes" in x]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=r["spec"])
        ax.set_xlabel("tokens in the cache")
        ax.set_ylabel("resident KV cache (MiB)")
        ax.set_title("KV memory against context length (measured)")
        ax.legend()
        parts += ["![KV memory](%s)" % savefig(plt, fig, "kv_memory_vs_context.png"), ""]
        parts += ["Command: " + stamp_line(run["stamp"]), ""]
    parts += engines.section(RESULTS, plt, savefig, table, stamp_line)

    for step, title in (("attn_bench", "## Decode attention alone (`attn-bench`, synthetic keys with outlier channels)"),
                        ("attn_bench_avx2", "### The same with the AVX2 target forced (`--simd avx2`: a CPU without AVX-512)")):
        ab = load(step)
        if ab:
            parts += attention_table(ab["runs"][0], title)

    fi = load("fidelity")
    if fi:
        run = fi["runs"][0]
        d = run["data"]
        rows = []
        for r in d["results"]:
            m = r["mean"]
            rows.append([r["spec"], "%.3f" % r["bits_per_element"], "%.2e" % m["key_rel_mse"], "%.4f" % m["key_cos"],
                         "%.2e" % m["value_rel_mse"], "%.4f" % m["value_cos"], "%.2e" % m["score_rel_err"],
                         "%.4f" % m["mass_moved"], "%.2e" % m["out_rel_err"],
                         "%.2e (layer %d)" % (r["worst_out_rel_err"], r["worst_layer"])])
        parts += ["## Fidelity on the model's real activations", "",
                  "%d tokens; attention of the last %d query tokens; means over layers." % (d["tokens"], d["queries"]), "",
                  table(["method", "bits/elem", "key rMSE", "key cos", "value rMSE", "value cos", "score rErr",
                         "mass moved", "output rErr", "worst layer"], rows), ""]
        fig, ax = plt.subplots()
        for r in d["results"]:
            ax.plot([x["layer"] for x in r["layers"]], [x["out_rel_err"] for x in r["layers"]], marker=".", label=r["spec"])
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("attention output relative error")
        ax.set_title("Error per layer on real activations")
        ax.legend(fontsize=7)
        parts += ["![fidelity per layer](%s)" % savefig(plt, fig, "fidelity_per_layer.png"), "",
                  "Command: " + stamp_line(run["stamp"]), ""]

    sv = load("serve")
    if sv:
        speed, held = sv["speed"], sv["hold"]
        rows, fig, ax = [], *plt.subplots()
        for run in speed["data"]["runs"]:
            lv = run["levels"]
            for x in lv:
                rows.append([run["kv"], str(x["concurrency"]), "%.1f" % x["aggregate_tokens_per_s"],
                             "%.3f / %.3f" % (x["ttft_s"]["p50"], x["ttft_s"]["p99"]),
                             "%.4f / %.4f" % (x["time_per_output_token_s"]["p50"], x["time_per_output_token_s"]["p99"])])
            ax.plot([x["concurrency"] for x in lv], [x["aggregate_tokens_per_s"] for x in lv], marker="o", label=run["kv"])
        ax.set_xlabel("concurrent streaming requests")
        ax.set_ylabel("aggregate generated tokens/s")
        ax.set_title("veloxquant serve: throughput against concurrency")
        ax.legend()
        hrows = []
        for run in held["data"]["runs"]:
            h = run["hold"]
            kvb = h["kv_bytes_resident_at_peak"]
            hrows.append([run["kv"], str(h["prompt_tokens_each"]), "%.1f" % (h["kv_budget_bytes"] / 2**20),
                          str(h["sequences_held_at_once"]), "%.1f" % (sum(kvb.values()) / 2**20)])
        parts += ["## Serving: concurrent sequences in one KV budget (`veloxquant serve`)", "",
                  "Streaming completions at temperature 0 from `scripts/load-test` on the loopback: aggregate "
                  "generated tokens per second of wall time (prefill and HTTP included), time to first token and "
                  "time per output token (p50 / p99, seconds).", "",
                  table(["kv", "concurrency", "tokens/s", "TTFT p50 / p99", "TPOT p50 / p99"], rows), "",
                  "![serve throughput](%s)" % savefig(plt, fig, "serve_throughput.png"), "",
                  "Command: " + stamp_line(speed["stamp"]), "",
                  "Sequences of the given length held at once under one `--kv-budget`, read from the server's "
                  "own `/metrics` (active sequences at the peak, and the KV bytes resident then):", "",
                  table(["kv", "prompt tokens each", "budget MiB", "sequences held", "KV MiB resident"], hrows), "",
                  "Command: " + stamp_line(held["stamp"]), ""]

    with open(DOC, "w") as f:
        f.write("\n".join(parts).rstrip() + "\n")
    print("report: wrote %s and %s/" % (os.path.relpath(DOC, ROOT), os.path.relpath(FIGURES, ROOT)))


def attention_table(run, title):
    """An attn-bench run as the report's table: every method's time and its per-round ratios to fp16."""
    d = run["data"]
    noise = d.get("fp16_noise_floor", 0.0)
    rows = []
    for r in d["results"]:
        ratio = r.get("speedup_vs_fp16")
        lo, hi = r.get("speedup_vs_fp16_min"), r.get("speedup_vs_fp16_max")
        if r["spec"] == "fp16":
            cell = "1.00× (baseline)"
        elif ratio is None:
            cell = ""
        elif lo is not None and hi is not None:  # paired per-round ratios
            cell = "%.2f× [%.2f, %.2f]%s" % (ratio, lo, hi, " (within noise)" if lo <= 1 <= hi else "")
        else:
            cell = "%.2f×%s" % (ratio, " (within noise)" if abs(ratio - 1) <= noise else "")
        rows.append([r["spec"], "%.3f" % r["bits_per_element"], "%.1f" % (r["kv_bytes"] / 2**20),
                     "%.0f [%.0f, %.0f]" % (r["us_per_token"], r["us_per_token_min"], r["us_per_token_max"]),
                     "%.2f" % r["gbps"], cell])
    return [title, "",
            "SIMD target %s. Read bandwidth measured in the same run: %.2f GB/s; fp16 noise floor %.1f%%." % (
                d.get("simd_target", "best"), d["read_bandwidth_gbps"], 100 * noise), "",
            table(["method", "bits/elem", "KV MiB", "µs/token [min, max]", "GB/s",
                   "vs fp16: median [min, max] of per-round ratios"], rows), "",
            "Command: " + stamp_line(run["stamp"]), ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--quick", action="store_true")
    r.add_argument("--only", nargs="+", choices=STEPS, help="run only these steps (others keep their results)")
    rd = sub.add_parser("render")
    for p in (r, rd):
        p.add_argument("--out", help="write RESULTS.md and figures/ here instead of docs/")
        p.add_argument("--results", help="read (and write) the JSON here instead of results/")
    a = ap.parse_args()
    global DOC, FIGURES, RESULTS
    if a.results:
        RESULTS = os.path.abspath(a.results)
    if a.out:
        DOC, FIGURES = os.path.join(a.out, "RESULTS.md"), os.path.join(a.out, "figures")
    if a.cmd == "run":
        run("quick" if a.quick else "full", a.only)
    render()


if __name__ == "__main__":
    main()
