#!/usr/bin/env python3
"""Interleaved prefill/decode speed: `veloxquant bench` against llama.cpp's `llama-bench` on one GGUF.

Each round runs every contender once, in order (ours, llama.cpp -fa 1, llama.cpp -fa 0, ...), each as its
own process under /usr/bin/time -v (peak RSS), with `uptime` and the busiest other processes recorded
just before it and the other processes' share of the machine's CPU during it (/proc/stat less the run's
own CPU time; both engines collapse when the 2 cores are shared, so rounds are also summarized "clean",
under --clean). --wait-idle S waits up to S seconds for an idle machine before each run. Each process
reports a median over its own --reps / -r repetitions; this script prints each run, then the median
[min, max] over rounds, and ours/llama.cpp ratios taken from the same round.

  python3 bench/vs_llamacpp.py -m /work/bench-models/llama3-8b-shape-8l-q4_k_m.gguf --rounds 4 \
      --wait-idle 240 --out /work/bench-models/vs_llamacpp

Decode at depth, with compressed caches on both sides: --depth D fills D tokens first (ours
`bench --depths D`, llama-bench `-d D`); --kv SPEC (repeatable) runs ours once per cache method and
--ctk TYPES (comma separated) runs llama.cpp once per cache type (the same type for keys and values,
flash attention on, as llama.cpp's quantized V cache needs); -p 0 skips the prefill figure. Every
ours/llama.cpp pair gets its same-round ratio.

  python3 bench/vs_llamacpp.py -m llama3-8b-attn-4l-f16.gguf --depth 16384 -p 0 -n 32 --reps 1 \
      --rounds 2 --fa 1 --kv fp16 --kv kivi:kbits=2,vbits=2 --ctk f16,q4_0,turbo3 --out vs-d16k

--results FILE also writes the runs as a stamped results file for the report (`scripts/report`'s
"Both engines" section reads results/vs_llamacpp_*.json): {"stamp": {command, commit, llama_cpp_commit,
date, duration_s, machine}, "data": {"runs": [...]}}. --pack RUNS_JSON --results FILE --command "..."
writes that file from a finished run's runs.json instead of running anything (the commits and the
command are then given, since they are those of the run, not of the checkout).
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def busy_idle():
    """(busy, idle) CPU seconds of the whole machine so far, from /proc/stat."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(v) - v[3] - v[4]) / hz, (v[3] + v[4]) / hz


def wait_idle(max_s, need=0.9):
    """Wait (up to max_s) until the machine was at least `need` idle over the last 2 s."""
    t_end = time.time() + max_s
    while True:
        b0, i0 = busy_idle()
        time.sleep(2)
        b1, i1 = busy_idle()
        if (i1 - i0) / max(1e-9, (b1 - b0) + (i1 - i0)) >= need or time.time() > t_end:
            return


def git_head(path):
    return sh(f"git -C '{path}' rev-parse HEAD 2>/dev/null")


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    mem = int(open("/proc/meminfo").readline().split()[1]) * 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "os": platform.platform()}


def write_results(path, runs, command, commit, llama_commit, date, duration_s):
    """The stamped results file the report reads (see the module's docstring). A figure not measured
    (prefill with -p 0) is null there, not NaN, so that the file is plain JSON."""
    def plain(x):
        if isinstance(x, float) and x != x:
            return None
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x
    runs = plain(runs)
    doc = {"stamp": {"command": command, "commit": commit, "llama_cpp_commit": llama_commit, "date": date,
                     "duration_s": round(duration_s, 1), "machine": machine()},
           "data": {"runs": runs}}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def timed(cmd, tag, out):
    """Run argv under /usr/bin/time -v; return (stdout, peak RSS MiB, wall s, others' CPU share during the run)."""
    b0, _ = busy_idle()
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    wall = time.time() - t0
    b1, _ = busy_idle()
    open(os.path.join(out, tag + ".out"), "w").write(p.stdout)
    open(os.path.join(out, tag + ".err"), "w").write(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"{tag}: rc {p.returncode}\n{p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024
    own = sum(float(re.search(k + r" time \(seconds\): ([\d.]+)", p.stderr).group(1)) for k in ("User", "System"))
    others = max(0.0, (b1 - b0) - own) / (wall * os.cpu_count())
    return p.stdout, rss, wall, others


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("--vq", default="/work/main/build/tools/veloxquant/veloxquant")
    ap.add_argument("--llama-bench", default="/work/oracle/llama.cpp/build/bin/llama-bench")
    ap.add_argument("--fa", default="1,0", help="llama.cpp flash-attention settings, one contender each")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--depth", type=int, default=0, help="tokens in the cache before the decode figure")
    ap.add_argument("--kv", action="append", help="our cache method (repeatable; default fp16)")
    ap.add_argument("--ctk", default="f16", help="llama.cpp cache types, comma separated (keys and values)")
    ap.add_argument("--out", help="folder for each process's output and runs.json")
    ap.add_argument("--results", help="also write the stamped results file the report reads")
    ap.add_argument("--llama-commit", default="", help="llama.cpp's commit for the stamp (default: git of --llama-bench's tree)")
    ap.add_argument("--pack", help="with --results: pack this finished run's runs.json, running nothing")
    ap.add_argument("--commit", default="", help="with --pack: our commit that made the runs")
    ap.add_argument("--command", default="", help="with --pack: the command that made the runs")
    ap.add_argument("--date", default="", help="with --pack: when the runs started (UTC, ISO 8601)")
    ap.add_argument("--duration", type=float, default=0.0, help="with --pack: the runs' wall seconds")
    ap.add_argument("--clean", type=float, default=0.05, help="others' CPU share under which a round pair counts as clean")
    ap.add_argument("--wait-idle", type=float, default=0, help="before each run wait up to this many s for an idle machine")
    a = ap.parse_args()
    if a.pack:
        if not (a.results and a.commit and a.llama_commit and a.command and a.date):
            sys.exit("vs_llamacpp: --pack needs --results, --commit, --llama-commit, --command and --date")
        with open(a.pack) as f:
            write_results(a.results, json.load(f), a.command, a.commit, a.llama_commit, a.date, a.duration)
        return
    if not (a.out and a.model):
        sys.exit("vs_llamacpp: -m and --out are required")
    os.makedirs(a.out, exist_ok=True)
    t_start, date = time.time(), datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    t, p, n, r, d = str(a.threads), str(a.p), str(a.n), str(a.reps), str(a.depth)
    kvs = a.kv or ["fp16"]
    cont = {}
    for kv in kvs:
        # ours needs a prompt of at least one token for its (then unused) prefill figure
        cont["ours" if kvs == ["fp16"] else f"ours {kv}"] = [
            a.vq, "bench", "-m", a.model, "--kv", kv, "-p", str(max(1, a.p)), "-n", n, "--reps", r,
            "--depths", d, "-t", t, "--json"]
    types = a.ctk.split(",")
    for fa in a.fa.split(","):
        for ct in types:
            name = f"llama.cpp fa{fa}" + ("" if types == ["f16"] else f" {ct}")
            cont[name] = [a.llama_bench, "-m", a.model, "-t", t, "-p", p, "-n", n, "-r", r, "-fa", fa,
                          "-d", d, "-ctk", ct, "-ctv", ct, "-o", "json"]
    runs = []
    for rnd in range(a.rounds):
        for name, cmd in cont.items():
            if a.wait_idle > 0:
                wait_idle(a.wait_idle)
            load = sh("uptime")
            # other processes' CPU over the last 0.5 s (top's second sample), busiest first
            top = sh("top -b -n 2 -d 0.5 -w 200").split("\n\n")[-1].splitlines()[1:5]
            busy = ";".join(f"{c[8]}% {c[11]}" for c in (l.split() for l in top) if len(c) > 11)
            tag = f"r{rnd}_" + name.replace(" ", "_").replace(".", "")
            out, rss, wall, others = timed(cmd, tag, a.out)
            j = json.loads(out)
            if name.startswith("ours"):
                res = j["results"][0]
                pp, tg = res["prefill_tps"], res["decode"][0]["tps"]
                pp_mm = (res["prefill_tps_min"], res["prefill_tps_max"])
                tg_mm = (res["decode"][0]["tps_min"], res["decode"][0]["tps_max"])
            else:
                gr = next(x for x in j if x["n_prompt"] == 0)
                tg, tg_mm = statistics.median(gr["samples_ts"]), (min(gr["samples_ts"]), max(gr["samples_ts"]))
                pr = next((x for x in j if x["n_gen"] == 0), None)
                pp, pp_mm = (statistics.median(pr["samples_ts"]), (min(pr["samples_ts"]), max(pr["samples_ts"]))) \
                    if pr else (float("nan"), (float("nan"), float("nan")))
            if a.p == 0:
                pp, pp_mm = float("nan"), (float("nan"), float("nan"))
            run = dict(round=rnd, name=name, depth=a.depth, prefill=pp, prefill_minmax=pp_mm, decode=tg, decode_minmax=tg_mm,
                       rss_mib=rss, wall_s=wall, others_cpu=others, uptime=load, busiest=busy, cmd=" ".join(cmd))
            runs.append(run)
            print(f"round {rnd} {name:16s} prefill {pp:7.2f} [{pp_mm[0]:.2f}, {pp_mm[1]:.2f}]  decode {tg:6.2f} "
                  f"[{tg_mm[0]:.2f}, {tg_mm[1]:.2f}]  RSS {rss:5.0f} MiB  wall {wall:5.1f} s  others {100 * others:3.0f}%"
                  f"  | {load.split('load')[-1]}"
                  f" | {busy}", flush=True)
    json.dump(runs, open(os.path.join(a.out, "runs.json"), "w"), indent=1)
    if a.results:
        llama = a.llama_commit or git_head(os.path.dirname(os.path.abspath(a.llama_bench)))
        write_results(a.results, runs, " ".join(["python3", "bench/vs_llamacpp.py"] + sys.argv[1:]), git_head(ROOT),
                      llama, date, time.time() - t_start)

    def mmm(v):
        return f"{statistics.median(v):7.2f} [{min(v):.2f}, {max(v):.2f}]"
    print("\nover rounds: median [min, max] of each run's median (all runs; then runs with others' CPU < clean)")
    for name in cont:
        every = [x for x in runs if x["name"] == name]
        clean = [x for x in every if x["others_cpu"] < a.clean]
        for rs in ([every, clean] if 0 < len(clean) < len(every) else [every]):
                print(f"{name:16s} n={len(rs)} prefill {mmm([x['prefill'] for x in rs])}  decode "
                      f"{mmm([x['decode'] for x in rs])}  RSS {mmm([x['rss_mib'] for x in rs])} MiB")
    for mine in [c for c in cont if c.startswith("ours")]:
        ours = {x["round"]: x for x in runs if x["name"] == mine}
        for name in [c for c in cont if not c.startswith("ours")]:
            rs = [x for x in runs if x["name"] == name]
            clean = [x for x in rs if max(x["others_cpu"], ours[x["round"]]["others_cpu"]) < a.clean]
            for k in ("prefill", "decode") if a.p > 0 else ("decode",):
                line = f"{mine}/{name} {k:8s} ratio (same round) {mmm([ours[x['round']][k] / x[k] for x in rs])}"
                if clean:
                    line += f"   clean rounds only ({len(clean)}): {mmm([ours[x['round']][k] / x[k] for x in clean])}"
                print(line)


if __name__ == "__main__":
    main()
