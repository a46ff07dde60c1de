"""Differences between variants, with their uncertainty: all of them exploratory.

The report's confirmatory tests are the comparisons a study declared before it ran (``tupe_study.endpoints``), one
Holm family. Every difference here is exploratory: an interval and an unadjusted p, never "settled".

The pre-training seed is the unit of replication: a new pre-training moves a model's scores more than a new
fine-tuning (in the published 17-variant run, BERT-A's downstream average by 2.6 points over three seeds), so
a difference is measured at the level of the pre-training seeds the two models share.

* Pre-training loss: paired by pre-training seed (the same data order and masks); a t-test over the per-seed
  differences (``tupe_study.stats.t_test``) where two or more seeds are shared, the spread floored at the logging step.
* Downstream scores, paired by (pre-training seed, fine-tuning seed), each run at its model's chosen LR:
  - 1 shared pre-training seed: the paired bootstrap over the dev examples and the runs
    (``tupe_study.stats.paired_bootstrap``): at best "dev set only", a statement about these two checkpoints; its p is
    the percentile interval's own (``tupe_study.stats.bootstrap_p``);
  - 2 or more: a t-interval at the seed level whose variance adds the two noises: the per-seed differences'
    (the pre-training seeds', with the fine-tuning runs inside them) and the dev set's, which every seed
    shares and their spread cannot show (``tupe_study.stats.dev_set_se``): the two parts' half-widths added in quadrature,
    the seeds' at t with n - 1 degrees of freedom, the dev set's at the normal (``tupe_study.stats.t_test``), and the
    p where that interval's edge reaches 0.

Either way a difference's interval and p come from one method: p <= 0.05 exactly when its 95% interval excludes 0.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tupe_study.dev_eval import correct, score
from tupe_study.runs import Variant, read_json
from tupe_study.stats import TTest, bootstrap_p, dev_set_se, paired_bootstrap, percentile_interval, t_test

RESAMPLES = 2000
AVERAGE = "average"
LEVEL = 0.05  # the intervals are 1 - LEVEL

PAIRED_BOOTSTRAP = "paired bootstrap"
T_TEST = "t over pre-training seeds + dev set"
METHOD_LABELS = {PAIRED_BOOTSTRAP: "paired bootstrap, {n} pre-training seed",
                 T_TEST: "t over {n} pre-training seeds + dev-set variance"}


def _spread(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return max(values) - min(values) if len(values) > 1 else None


@dataclass
class Paired:
    """A loss difference paired by pre-training seed, with its t-test where two or more seeds are shared."""
    a: str
    b: str
    diffs: Dict[int, float]  # pre-training seed -> value(a) - value(b)
    spread: float  # the larger of the two variants' spreads across seeds (0 with one seed)
    test: Optional[TTest] = None  # over the seeds' differences (2 or more seeds)

    @property
    def mean(self) -> float:
        return statistics.mean(self.diffs.values())

    @property
    def excludes_zero(self) -> bool:
        """Its 95% t-interval excludes 0 (exploratory: not a test of a declared comparison)."""
        return self.test is not None and (self.test.low > 0 or self.test.high < 0)


def paired_differences(values: Dict[str, Dict[int, float]], resolution: float = 0.0) -> List[Paired]:
    """values[variant][seed] -> every pair (a, b) in the given order, over the seeds both have; the pairs with two
    or more shared seeds are t-tested, the spread floored at ``resolution`` (the step of the logged values: a
    spread below it was not measured)."""
    names = list(values)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            seeds = sorted(set(values[a]) & set(values[b]))
            if not seeds:
                continue
            spreads = [_spread([values[n][s] for s in seeds]) or 0.0 for n in (a, b)]
            diffs = {s: values[a][s] - values[b][s] for s in seeds}
            out.append(Paired(a, b, diffs, max(spreads),
                              t_test(list(diffs.values()), sd_floor=resolution) if len(seeds) >= 2 else None))
    return out


# ---- downstream: the paired bootstrap with one seed, the seed-level t with the dev set's variance ------------


@dataclass
class Interval:
    a: str
    b: str
    column: str  # a task column, or "average" (the mean over the columns)
    diff: float  # score(a) - score(b) on the metric's 0-100 scale: the mean over pre-training seeds of by_seed
    low: float  # the 95% interval of ``method``
    high: float
    by_seed: Dict[int, float]  # pre-training seed -> mean difference over its paired fine-tuning runs
    runs: int  # paired runs (pre-training seed, fine-tuning seed)
    examples: int
    method: str = PAIRED_BOOTSTRAP  # PAIRED_BOOTSTRAP or T_TEST (by the shared pre-training seeds)
    p: float = math.nan  # two-sided p of "no difference", unadjusted (exploratory)
    dev_se: float = math.nan  # the dev set's standard error in the difference (T_TEST)

    @property
    def seeds(self) -> int:
        """Shared pre-training seeds."""
        return len(self.by_seed)

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def method_label(self) -> str:
        """The method with its number of pre-training seeds, as the report's tables name it."""
        return METHOD_LABELS[self.method].format(n=self.seeds)

    @property
    def verdict(self) -> str:
        """What the interval says, exploratory: with one pre-training seed an interval that excludes 0 says only
        that the dev set tells the two checkpoints apart."""
        if not self.excludes_zero:
            return "interval holds 0"
        return "dev set only (1 pre-training seed)" if self.seeds < 2 else "interval excludes 0 (exploratory)"


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


@dataclass
class _Column:
    """One column's paired runs of a pair of variants, as the tests need them."""
    name: str
    keys: List[Tuple[int, int]]  # (pre-training seed, fine-tuning seed) of each row
    a: np.ndarray
    b: np.ndarray
    gold: Optional[np.ndarray]
    fn: object
    flat: np.ndarray  # the paired bootstrap's distribution
    by_seed: Dict[int, float]
    examples: int


def _tested(va: str, vb: str, column: str, parts: List[_Column], resamples: int, seed: int) -> Interval:
    """The Interval of one column (one part) or of the average over the columns (every part), by the method
    that the number of shared pre-training seeds allows."""
    seeds = sorted(set.intersection(*(set(c.by_seed) for c in parts)))
    by_seed = {s: statistics.mean(c.by_seed[s] for c in parts) for s in seeds}
    diff = statistics.mean(by_seed.values())
    flat = np.mean([c.flat for c in parts], axis=0)
    runs, examples = min(len(c.keys) for c in parts), sum(c.examples for c in parts)
    if len(seeds) < 2:
        low, high = percentile_interval(flat)
        return Interval(va, vb, column, diff, low, high, by_seed, runs, examples, PAIRED_BOOTSTRAP, bootstrap_p(flat))
    # each column's dev set is its own sample: their variances add, and the average divides by the columns
    dev_var = 0.0
    for c in parts:
        per_seed_runs = {s: sum(1 for k in c.keys if k[0] == s) for s in seeds}
        weights = np.array([1.0 / (len(seeds) * per_seed_runs[k[0]]) if k[0] in by_seed else 0.0 for k in c.keys])
        dev_var += dev_set_se(c.a, c.b, weights, c.gold, c.fn, resamples, seed) ** 2
    dev_se = math.sqrt(dev_var) / len(parts)
    test = t_test(list(by_seed.values()), extra_se=dev_se)
    return Interval(va, vb, column, diff, test.low, test.high, by_seed, runs, examples, T_TEST, test.p, dev_se)


def bootstrap_pairs(variants: Sequence[Variant], columns: Sequence[str], problems: List[str],
                    resamples: int = RESAMPLES) -> List[Interval]:
    """An Interval for every pair of variants and every column, and for the average over the columns, each by the
    method its shared pre-training seeds allow; all exploratory (no correction: the report's one family is its
    declared comparisons)."""
    runs = {(v.name, c): column_runs(v, c) for v in variants for c in columns}
    missing = [f"{v.name} {c}" for v in variants for c in columns
               if not runs[(v.name, c)] and any(c in s.tasks for s in v.seeds)]  # fine-tuned, but no predictions
    if missing:
        problems.append("no dev predictions (predictions.json) for: " + ", ".join(missing)
                        + ": their downstream differences have no interval")
    out: List[Interval] = []
    for i, va in enumerate(variants):
        for vb in variants[i + 1:]:
            parts: List[_Column] = []
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
                flat = paired_bootstrap(a, b, g, fn, resamples=resamples, seed=i)
                full = [(a[r].mean() - b[r].mean()) if fn is None else fn(g, a[r]) - fn(g, b[r]) for r in range(len(keys))]
                by_seed: Dict[int, List[float]] = {}
                for (ps, _), d in zip(keys, full):
                    by_seed.setdefault(ps, []).append(d)
                parts.append(_Column(col, keys, a, b, g, fn, flat, {s: statistics.mean(d) for s, d in by_seed.items()},
                                     len(gold)))
            out += [_tested(va.name, vb.name, c.name, [c], resamples, i) for c in parts]
            if len(parts) == len(columns) > 1 and set.intersection(*(set(c.by_seed) for c in parts)):
                out.append(_tested(va.name, vb.name, AVERAGE, parts, resamples, i))
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
