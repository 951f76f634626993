#!/usr/bin/env python3
"""What calling a compressed cache's attention from Python costs over the same call from C++: one
decode step (1 query token, 32 query heads over 8 KV heads of 128) over 4,096 cached tokens, per
method. Both are timed in the same process on the same cache, interleaved in rounds: the C++ side
is a loop of vq_cache_attend calls inside the module (KVCache._c.time_attend), the Python side
KVCache.attend (argument checks, NumPy conversion, the output array, the GIL released and taken
back). Prints per method the median (min, max) microseconds of each and their ratio.

    bench/python_overhead.py [--tokens 4096] [--reps 200] [--rounds 5] [--kv kivi --kv q4 ...]
"""
import argparse
import statistics
import time

import numpy as np

import veloxquant as vq


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--kv", action="append")
    a = ap.parse_args()
    if a.threads:
        vq.set_threads(a.threads)
    rng = np.random.default_rng(0)
    print(f"{'method':<10} {'C++ us':>22} {'Python us':>22} {'Python / C++':>14}")
    for spec in a.kv or ["fp16", "q4", "kivi", "turbo"]:
        cache = vq.KVCache(spec, layers=1, kv_heads=8, head_dim=128)
        k = rng.standard_normal((a.tokens, 8, 128)).astype(np.float32)
        v = rng.standard_normal((a.tokens, 8, 128)).astype(np.float32)
        cache.append(0, k, v)
        q = rng.standard_normal((1, 32, 128)).astype(np.float32)
        cxx, py = [], []
        for _ in range(a.rounds):
            cxx.append(statistics.median(cache._c.time_attend(0, q, a.reps)))
            times = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                cache.attend(0, q)
                times.append(time.perf_counter() - t0)
            py.append(statistics.median(times))
        ratios = [p / c for p, c in zip(py, cxx)]

        def fmt(xs):
            return f"{statistics.median(xs) * 1e6:7.1f} ({min(xs) * 1e6:.1f}-{max(xs) * 1e6:.1f})"
        print(f"{spec:<10} {fmt(cxx):>22} {fmt(py):>22} {statistics.median(ratios):7.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
