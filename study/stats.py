"""Plain statistics for the study's report (numpy, float64): correlations, ranks, entropy, the paired bootstrap."""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Tuple

import numpy as np


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r; nan when fewer than 2 points or either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"pearson needs two 1-d sequences of equal length, got {x.shape} and {y.shape}")
    if len(x) < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / denom if denom > 0 else math.nan


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they occupy ([10, 20, 20] -> [1, 2.5, 2.5])."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks (the tie-corrected definition)."""
    return pearson(average_ranks(x), average_ranks(y))


def spearman_p(x: Sequence[float], y: Sequence[float], permutations: int = 20000, seed: int = 0) -> float:
    """Two-sided permutation p-value of Spearman's rho: the share of pairings of y with x whose |rho| reaches the
    observed one (no association: every pairing equally likely). Exact, over all n! pairings, when n! <=
    ``permutations``; otherwise (count + 1) / (permutations + 1) over random pairings, the observed one
    counted. nan where rho is undefined."""
    rx, ry = average_ranks(x), average_ranks(y)
    observed = pearson(rx, ry)
    if math.isnan(observed):
        return math.nan
    n, tol = len(rx), 1e-12
    if math.factorial(n) <= permutations:
        from itertools import permutations as orders

        rhos = np.array([pearson(rx, ry[list(o)]) for o in orders(range(n))])
        return float(np.mean(np.abs(rhos) >= abs(observed) - tol))
    rng = np.random.default_rng(seed)
    hits = sum(abs(pearson(rx, rng.permutation(ry))) >= abs(observed) - tol for _ in range(permutations))
    return (hits + 1) / (permutations + 1)


def entropy_bits(counts: np.ndarray) -> float:
    """Entropy in bits of the distribution given by ``counts``."""
    p = np.asarray(counts, dtype=np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log2(p)).sum())


def paired_bootstrap(a: np.ndarray, b: np.ndarray, gold: Optional[np.ndarray] = None,
                     metric: Optional[Callable[[np.ndarray, np.ndarray], float]] = None,
                     resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """The bootstrap distribution of score(a) - score(b): an array of ``resamples`` differences.

    ``a`` and ``b`` are (runs, examples) arrays, row r of ``a`` paired with row r of ``b`` (the same
    pre-training and fine-tuning seed) and column i the same dev example in both. Each resample draws the
    examples with replacement and, independently, the run pairs with replacement; its difference is the mean
    over the drawn runs of score(a row) - score(b row) on the drawn examples, so the interval holds the noise
    of the dev set and that of the seeds. Without ``metric`` a row's score is the mean of its values (give
    100 * correct for accuracy); with it, ``metric(gold[drawn], row[drawn])`` (MCC, Pearson).
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 2 or a.size == 0:
        raise ValueError(f"paired_bootstrap needs two equal (runs, examples) arrays, got {a.shape} and {b.shape}")
    runs, n = a.shape
    rng = np.random.default_rng(seed)
    out = np.empty(resamples, dtype=np.float64)
    diff = None if metric is not None else a.astype(np.float64) - b.astype(np.float64)
    for k in range(resamples):
        rows = rng.integers(0, runs, size=runs)
        cols = rng.integers(0, n, size=n)
        if diff is not None:
            out[k] = diff[np.ix_(rows, cols)].mean()
        else:
            g = gold[cols]
            out[k] = float(np.mean([metric(g, a[r, cols]) - metric(g, b[r, cols]) for r in rows]))
    return out


def percentile_interval(stats: np.ndarray, level: float = 0.95) -> Tuple[float, float]:
    """The central ``level`` interval of a bootstrap distribution (percentile method)."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.asarray(stats, dtype=np.float64), [tail, 100 - tail])
    return float(low), float(high)
