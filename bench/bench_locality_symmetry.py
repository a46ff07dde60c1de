"""Time locality/symmetry: vectorised functions on 512x512 vs a plain loop on a smaller matrix.

Usage: python bench/bench_locality_symmetry.py [--n 512] [--loop-n 128] [--repeat 20]
The loop version mirrors the official calculate.py (Python loops + sklearn MinMaxScaler per row).
"""
from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

from tupe_tools.analysis import locality_symmetry as ls  # numpy only: no torch, no fairseq


def loop_locality(m: np.ndarray) -> float:
    n = len(m)
    return sum(m[i][j] / 2 ** abs(i - j) for i in range(n) for j in range(n)) / n


def loop_symmetry(m: np.ndarray) -> float:
    from sklearn.preprocessing import MinMaxScaler

    n, pooled = len(m), []
    for i in range(1, n - 1):
        deltas = np.array([abs(m[i][i - k] - m[i][i + k]) for k in range(1, min(i, n - 1 - i) + 1)])
        pooled.extend(MinMaxScaler().fit_transform(deltas.reshape(-1, 1))[:, 0])
    return 1 - sum(pooled) / len(pooled)


def ms_per_call(f: Callable[[np.ndarray], float], m: np.ndarray, repeat: int) -> float:
    f(m)  # warm caches (index tables, kernel)
    t0 = time.perf_counter()
    for _ in range(repeat):
        f(m)
    return (time.perf_counter() - t0) / repeat * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--loop-n", type=int, default=128)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    big = rng.random((args.n, args.n))
    big /= big.sum(1, keepdims=True)
    small = big[: args.loop_n, : args.loop_n] / big[: args.loop_n, : args.loop_n].sum(1, keepdims=True)
    batch = np.broadcast_to(big, (12, args.n, args.n)).copy()

    print(f"n={args.n}, {args.repeat} calls each (ms per call)")
    for f in (ls.locality, ls.symmetry, ls.symmetry_scaled):
        print(f"  {f.__name__:16s} {ms_per_call(f, big, args.repeat):8.2f} ms")
    print(f"  symmetry, 12 heads at once: {ms_per_call(ls.symmetry, batch, 3):8.2f} ms")
    print(f"n={args.loop_n}: vectorised vs plain loop (1 call)")
    for fast, slow in ((ls.locality, loop_locality), (ls.symmetry, loop_symmetry)):
        t_fast, t_slow = ms_per_call(fast, small, args.repeat), ms_per_call(slow, small, 1)
        print(f"  {fast.__name__:16s} {t_fast:8.2f} ms   loop {t_slow:9.1f} ms   x{t_slow / t_fast:,.0f}")


if __name__ == "__main__":
    main()
