#!/usr/bin/env python3
"""Golden logits of llama.cpp for the synthetic model of each architecture.

For each NAME: writes the model with the project's write_synthetic_model, tokenizes TEXT with
llama.cpp's llama-tokenize (ids as llama.cpp would feed them, BOS by the vocabulary's flag), runs
dump_logits (a short program against llama.h, see COMMANDS.md) with flash attention on and off,
and writes tests/golden/arch/NAME.json: the token ids, the file's CRC-32, llama.cpp's largest
|logit(FA on) - logit(FA off)| over every position and vocabulary entry, and per position the
top 16 ids plus 48 fixed ids with their FA-on and FA-off logits, llama.cpp's top-1 and its
top-1/top-2 margin.

usage: make_golden.py BUILD_DIR LLAMA_BIN_DIR DUMP_LOGITS OUT_DIR NAME...
"""
import json
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np

TEXT = ("The rain came in long grey sheets from the west, and the water moved faster than anyone "
        "remembered. At noon the baker counted the families on the hill.")
ARCH = {"llama3": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
        "gemma2": "gemma2"}


def main():
    build, llama_bin, dump, out_dir = sys.argv[1:5]
    names = sys.argv[5:]
    rng = np.random.default_rng(2026)
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, name + ".gguf")
            subprocess.run([os.path.join(build, "tests", "write_synthetic_model"), name, model], check=True)
            crc = zlib.crc32(open(model, "rb").read()) & 0xFFFFFFFF
            txt = os.path.join(tmp, "text.txt")
            open(txt, "w").write(TEXT)
            ids = subprocess.run([os.path.join(llama_bin, "llama-tokenize"), "-m", model, "-f", txt, "--ids",
                                  "--no-escape", "--log-disable"], check=True, capture_output=True,
                                 text=True).stdout
            tokens = [int(t) for t in ids.strip().strip("[]").split(",")]
            tok_file = os.path.join(tmp, "tokens.txt")
            open(tok_file, "w").write("\n".join(map(str, tokens)) + "\n")
            logits = {}
            for fa in ("on", "off"):
                out = os.path.join(tmp, f"logits_{fa}.f32")
                res = subprocess.run([dump, model, tok_file, out, fa, "2"], check=True, capture_output=True,
                                     text=True)
                words = res.stdout.split()
                n_tok, n_vocab = int(words[words.index("n_tokens") + 1]), int(words[words.index("n_vocab") + 1])
                logits[fa] = np.fromfile(out, dtype=np.float32).reshape(n_tok, n_vocab)
            on, off = logits["on"], logits["off"]
            fixed = rng.choice(n_vocab, size=48, replace=False)
            positions = []
            for p in range(len(tokens)):
                order = np.argsort(-on[p], kind="stable")
                keep = list(dict.fromkeys([int(i) for i in order[:16]] + [int(i) for i in fixed]))
                positions.append({
                    "ids": keep,
                    "fa_on": [float(on[p, i]) for i in keep],
                    "fa_off": [float(off[p, i]) for i in keep],
                    "top1": int(order[0]),
                    "margin": float(on[p, order[0]] - on[p, order[1]]),
                })
            golden = {
                "name": name,
                "arch": ARCH[name],
                "file_crc32": crc,
                "text": TEXT,
                "tokens": tokens,
                "n_vocab": n_vocab,
                "fa_on_vs_off_max_abs": float(np.max(np.abs(on - off))),
                "logit_std": float(on.std()),
                "positions": positions,
            }
            with open(os.path.join(out_dir, name + ".json"), "w") as f:
                json.dump(golden, f, indent=0)
            print(f"{name}: {len(tokens)} tokens, vocab {n_vocab}, FA on/off max |d| "
                  f"{golden['fa_on_vs_off_max_abs']:.3g}, logit std {golden['logit_std']:.3g}")


if __name__ == "__main__":
    main()
