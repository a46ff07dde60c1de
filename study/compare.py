"""Differences between variants, with what settles them.

* Pre-training loss: paired by pre-training seed (the same data order and masks); settled when every seed
  has the same sign and the smallest difference exceeds both variants' own spread across seeds.
* Downstream scores: a 95% interval from a paired bootstrap over the dev examples and the seed pairs
  (``study.stats.paired_bootstrap``) on the runs at each model's chosen LR, paired by (pre-training
  seed, fine-tuning seed); settled only when the interval excludes 0 and every shared pre-training seed
  gives a difference of the same sign. With one shared pre-training seed the interval can exclude 0 but
  nothing says another pre-training would agree: "dev set only".
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from study.dev_eval import correct, score
from study.runs import Variant, read_json
from study.stats import paired_bootstrap, percentile_interval

RESAMPLES = 2000
AVERAGE = "average"


def _spread(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return max(values) - min(values) if len(values) > 1 else None


@dataclass
class Paired:
    a: str
    b: str
    diffs: Dict[int, float]  # pre-training seed -> value(a) - value(b)
    spread: float  # the larger of the two variants' spreads across seeds (0 with one seed)

    @property
    def signs_agree(self) -> bool:
        return len({math.copysign(1, d) for d in self.diffs.values() if d != 0}) == 1 and 0 not in self.diffs.values()

    @property
    def settled(self) -> bool:
        """Two or more seeds, every seed's difference of the same sign, and the smallest difference larger
        than either variant's own spread across seeds."""
        return (len(self.diffs) >= 2 and self.signs_agree
                and min(abs(d) for d in self.diffs.values()) > self.spread)


def paired_differences(values: Dict[str, Dict[int, float]]) -> List[Paired]:
    """values[variant][seed] -> every pair (a, b) in the given order, over the seeds both have."""
    names = list(values)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            seeds = sorted(set(values[a]) & set(values[b]))
            if not seeds:
                continue
            spreads = [_spread([values[n][s] for s in seeds]) or 0.0 for n in (a, b)]
            out.append(Paired(a, b, {s: values[a][s] - values[b][s] for s in seeds}, max(spreads)))
    return out


# ---- downstream: the paired bootstrap over dev predictions ---------------------------------------------------


@dataclass
class Interval:
    a: str
    b: str
    column: str  # a task column, or "average" (the mean over the columns)
    diff: float  # score(a) - score(b), mean over the paired runs, on the metric's 0-100 scale
    low: float
    high: float
    by_seed: Dict[int, float]  # pre-training seed -> mean difference over its paired fine-tuning runs
    runs: int  # paired runs (pre-training seed, fine-tuning seed)
    examples: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def seeds_agree(self) -> bool:
        return all(math.copysign(1, d) == math.copysign(1, self.diff) and d != 0 for d in self.by_seed.values())

    @property
    def verdict(self) -> str:
        if not self.excludes_zero:
            return "not settled"
        if len(self.by_seed) < 2:
            return "dev set only (1 pre-training seed)"
        return "settled" if self.seeds_agree else "not settled (pre-training seeds disagree)"


def _predictions(run_dir: str, subset: str) -> Optional[Tuple[list, list]]:
    p = read_json(os.path.join(run_dir, "predictions.json"))
    if p is None or subset not in p.get("subsets", {}):
        return None
    return p["subsets"][subset]["gold"], p["subsets"][subset]["pred"]


def column_runs(v: Variant, column: str) -> Dict[Tuple[int, int], Tuple[list, list]]:
    """(pre-training seed, fine-tuning seed) -> (gold, pred) of a variant's runs at its chosen LR."""
    out = {}
    for s in v.seeds:
        pick = s.tasks.get(column)
        if pick is None:
            continue
        for k, d in pick.dirs.items():
            got = _predictions(d, pick.subset)
            if got is not None:
                out[(s.seed, k)] = got
    return out


def _matrix(metric: str, runs: Dict[Tuple[int, int], Tuple[list, list]], keys: List[Tuple[int, int]]) -> np.ndarray:
    if metric == "accuracy":  # per-example 100 * correct: the bootstrap averages them
        return np.array([[100.0 * correct(g, p) for g, p in zip(*runs[k])] for k in keys])
    if metric == "mcc":
        return np.array([[1.0 if p == "1" else 0.0 for p in runs[k][1]] for k in keys])
    return np.array([runs[k][1] for k in keys], dtype=np.float64)


def _metric_fn(metric: str):
    if metric == "accuracy":
        return None
    kind = "mcc" if metric == "mcc" else "pearson"

    def fn(gold: np.ndarray, pred: np.ndarray) -> float:
        as_labels = gold if kind == "pearson" else ["1" if g else "0" for g in gold]
        as_pred = pred if kind == "pearson" else ["1" if p else "0" for p in pred]
        return score(kind, as_labels, as_pred) or 0.0

    return fn


def bootstrap_pairs(variants: Sequence[Variant], columns: Sequence[str], problems: List[str],
                    resamples: int = RESAMPLES) -> List[Interval]:
    """An Interval for every pair of variants and every column, and for the average over the columns (each
    resample's column differences averaged, the columns drawn independently)."""
    runs = {(v.name, c): column_runs(v, c) for v in variants for c in columns}
    missing = [f"{v.name} {c}" for v in variants for c in columns
               if not runs[(v.name, c)] and any(c in s.tasks for s in v.seeds)]  # fine-tuned, but no predictions
    if missing:
        problems.append("no dev predictions (predictions.json) for: " + ", ".join(missing)
                        + ": their downstream differences have no interval")
    out: List[Interval] = []
    for i, va in enumerate(variants):
        for vb in variants[i + 1:]:
            per_col: List[Tuple[Interval, np.ndarray]] = []
            for col in columns:
                ra, rb = runs[(va.name, col)], runs[(vb.name, col)]
                keys = sorted(set(ra) & set(rb))
                if not keys:
                    continue
                gold = ra[keys[0]][0]
                metric = next(s.tasks[col].metric for s in va.seeds if col in s.tasks)
                a, b = _matrix(metric, ra, keys), _matrix(metric, rb, keys)
                g = np.array([1.0 if x == "1" else 0.0 for x in gold]) if metric == "mcc" else (
                    np.array(gold, dtype=np.float64) if metric != "accuracy" else None)
                fn = _metric_fn(metric)
                stats = paired_bootstrap(a, b, g, fn, resamples=resamples, seed=i)
                full = [(a[r].mean() - b[r].mean()) if fn is None else fn(g, a[r]) - fn(g, b[r]) for r in range(len(keys))]
                by_seed: Dict[int, List[float]] = {}
                for (ps, _), d in zip(keys, full):
                    by_seed.setdefault(ps, []).append(d)
                low, high = percentile_interval(stats)
                per_col.append((Interval(va.name, vb.name, col, float(np.mean(full)), low, high,
                                         {s: statistics.mean(d) for s, d in by_seed.items()}, len(keys), len(gold)),
                                stats))
            out += [iv for iv, _ in per_col]
            if len(per_col) == len(columns) and len(columns) > 1:
                stats = np.mean([st for _, st in per_col], axis=0)
                seeds = set.intersection(*(set(iv.by_seed) for iv, _ in per_col))
                low, high = percentile_interval(stats)
                out.append(Interval(va.name, vb.name, AVERAGE, float(np.mean([iv.diff for iv, _ in per_col])), low, high,
                                    {s: statistics.mean(iv.by_seed[s] for iv, _ in per_col) for s in seeds},
                                    min(iv.runs for iv, _ in per_col), sum(iv.examples for iv, _ in per_col)))
    return out


# ---- word order ------------------------------------------------------------------------------------------------


@dataclass
class OrderDrop:
    variant: str
    column: str
    perturbation: str
    drops: List[float]  # one per fine-tuned run at the chosen LR: score(baseline) - score(perturbed)
    changed: int  # dev examples whose text the perturbation altered
    examples: int

    @property
    def mean(self) -> float:
        return statistics.mean(self.drops)

    @property
    def spread(self) -> float:
        return max(self.drops) - min(self.drops)


def order_drops(variants: Sequence[Variant], problems: List[str]) -> List[OrderDrop]:
    """Per variant, task (its first column) and perturbation: the score drop of every run at the chosen LR."""
    out: List[OrderDrop] = []
    for v in variants:
        found: Dict[Tuple[str, str], OrderDrop] = {}
        for s in v.seeds:
            for col, pick in s.tasks.items():
                for _, d in sorted(pick.dirs.items()):
                    rec = read_json(os.path.join(d, "order.json"))
                    if rec is None or rec.get("subset") != pick.subset:
                        continue
                    sets = rec["sets"]
                    for name, data in sets.items():
                        if name in ("original", "role_swap_original"):
                            continue
                        base = sets["role_swap_original"] if name == "role_swap" else sets["original"]
                        before, after = score(rec["metric"], base["gold"], base["pred"]), score(rec["metric"], data["gold"], data["pred"])
                        if before is None or after is None:
                            continue
                        drop = found.setdefault((col, name), OrderDrop(v.name, col, name, [], data["changed"], len(data["gold"])))
                        drop.drops.append(before - after)
        if any(pick.dirs for s in v.seeds for pick in s.tasks.values()) and not found:
            problems.append(f"{v.name}: no word-order results (order.json)")
        out += list(found.values())
    return out
