#!/usr/bin/env python3
"""Read llama-perplexity's output for the f16 base run and the --kl-divergence runs (COMMANDS.md,
section f) and write golden/llama_cpp_kl.json.

    make_kl_json.py DIR META.json OUT.json
DIR holds TYPE.out and TYPE.log (stdout, stderr) of each run, TYPE.secs (wall seconds) and
TYPE.start (UTC start); META.json the fields that are not in llama.cpp's output (commit, machine,
commands, the text's cut). The f16 run gives PPL only (its logits are the base); each other type
gives PPL, mean KL with its uncertainty, KL percentiles and "Same top p" (top-1 agreement)."""
import json, re, sys

# Bits per element of each cache type, from its ggml block: bytes * 8 / elements per block
# (ggml/src/ggml-common.h at the recorded commit).
BLOCKS = {"f16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32), "turbo3": (50, 128)}

NUM = r"([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)"


def grab(text, label, pair=False):
    m = re.search(re.escape(label) + r"\s*:?\s*" + NUM + (r"\s*±\s*" + NUM if pair else ""), text)
    if not m:
        sys.exit("no '%s' in the output" % label)
    return (float(m.group(1)), float(m.group(2))) if pair else float(m.group(1))


def run(d, t):
    text = open("%s/%s.out" % (d, t), encoding="utf-8").read() + open("%s/%s.log" % (d, t), encoding="utf-8").read()
    by, n = BLOCKS[t]
    r = {"type": t, "bits_per_element": by * 8 / n, "duration_s": int(open("%s/%s.secs" % (d, t)).read()),
         "date": open("%s/%s.start" % (d, t)).read().strip()}
    if t == "f16":
        m = re.search(r"Final estimate: PPL = " + NUM + r" \+/- " + NUM, text)
        r["ppl"], r["ppl_stderr"] = float(m.group(1)), float(m.group(2))
        return r
    r["ppl"], r["ppl_stderr"] = grab(text, "Mean PPL(Q)", True)
    r["ppl_base"], _ = grab(text, "Mean PPL(base)", True)
    r["kl_mean"], r["kl_mean_stderr"] = grab(text, "Mean    KLD", True)
    r["kl_max"] = grab(text, "Maximum KLD")
    r["kl_p99_9"] = grab(text, "99.9%   KLD")
    r["kl_p99"] = grab(text, "99.0%   KLD")
    r["kl_median"] = grab(text, "Median  KLD")
    top, top_err = grab(text, "Same top p", True)
    r["top1_agreement"], r["top1_agreement_stderr"] = round(top / 100, 7), round(top_err / 100, 7)
    return r


def main():
    d, meta, out = sys.argv[1:4]
    g = json.load(open(meta))
    g["runs"] = [run(d, t) for t in g["types"]]
    del g["types"]
    with open(out, "w") as f:
        json.dump(g, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
