#!/usr/bin/env python3
"""Generates a continuation of a prompt with a compressed KV cache, from Python: what
`veloxquant generate -m MODEL -p PROMPT -n N --kv SPEC` prints (greedy, as its default).

    examples/generate.py MODEL PROMPT [N [KV_SPEC]]    e.g. ... gemma-3-270m-q4_k_m.gguf "Once upon a time," 32 kivi
"""
import sys

import veloxquant as vq


def main():
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} MODEL PROMPT [N [KV_SPEC]]")
    model = vq.Model(sys.argv[1])
    prompt = sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    kv = sys.argv[4] if len(sys.argv) > 4 else "kivi"
    print(prompt, end="", flush=True)
    for piece in model.generate(prompt, kv=kv, max_tokens=n):
        print(piece, end="", flush=True)
    print()


if __name__ == "__main__":
    main()
