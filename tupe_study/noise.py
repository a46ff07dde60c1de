"""Whether the models of a column differ beyond the pre-training seed's noise: a test calibrated under the null.

The statistic is the span (max - min) of the models' means over their own pre-training seeds, in units of the
pooled within-model standard deviation of the models with two or more seeds (their seeds' deviations from their
own mean, pooled; the models are assumed to share that noise). Under "no model differs" with normal seed noise,
that ratio has the same distribution whatever the noise's size, so it is simulated once per shape (each model's
number of seeds): every model's per-seed score drawn from one standard normal, the same ratio computed, ``DRAWS``
times with the fixed seed ``SEED`` (the report is reproducible). A column's span is **beyond the noise** when its
Monte Carlo p, (1 + simulated ratios >= the observed) / (DRAWS + 1), is <= ``LEVEL``: such a rule fires in at most
5% of studies where no model differs. The rule it replaces (span > the largest spread of one model over its
seeds) fired in 89% of such studies of 18 models, 2 of them on 3 seeds: ``tests/test_study_noise.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tupe_study.runs import SeedRun, Variant

LEVEL = 0.05
DRAWS = 9999  # simulated null studies per shape: p in steps of 1 / 10,000
SEED = 0
LOCALITY_KEYS = ("loc_pos", "sym_pos", "loc_attn", "sym_attn")


@dataclass(frozen=True)
class SpanTest:
    """A column's span across ``models`` models against the seed noise (``sd``: the pooled within-model standard
    deviation, ``df`` its degrees of freedom); ``limit``: the span that models with no difference reach in ``LEVEL``
    of simulated studies with this noise and these seed counts."""
    span: float
    sd: float
    df: int
    limit: float
    p: float
    models: int

    @property
    def beyond(self) -> bool:
        return self.p <= LEVEL


def seed_value(s: SeedRun, key: str, columns: Sequence[str]) -> Optional[float]:
    """One pre-training seed's value of a study.csv column (``final_valid_loss``, ``TASK_median``,
    ``downstream_avg``, a locality measure, ``loss_lenL``); None where it has none or the column is not kept per
    seed."""
    if key == "final_valid_loss":
        return s.final
    if key == "downstream_avg":
        return s.downstream(columns)
    if key.endswith("_median"):
        pick = s.tasks.get(key[:-len("_median")])
        return pick.median if pick else None
    if key in LOCALITY_KEYS:
        return s.locality.get(key)
    if key.startswith("loss_len") and s.longer:
        return s.longer["lengths"].get(key[len("loss_len"):])
    return None


def seed_scores(variants: Sequence[Variant], key: str, columns: Sequence[str]) -> List[List[float]]:
    """Per model with a value, its per-seed values of ``key``."""
    out = [[x for x in (seed_value(s, key, columns) for s in v.seeds) if x is not None] for v in variants]
    return [x for x in out if x]


def pooled_sd(scores: Sequence[Sequence[float]]) -> Tuple[float, int]:
    """The pooled within-model standard deviation of the models with 2+ values, and its degrees of freedom
    (sum of n - 1; 0: not measured)."""
    several = [np.asarray(x, dtype=np.float64) for x in scores if len(x) >= 2]
    df = sum(len(x) - 1 for x in several)
    if not df:
        return math.nan, 0
    return math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in several) / df), df


@lru_cache(maxsize=64)
def null_ratios(counts: Tuple[int, ...], draws: int = DRAWS, seed: int = SEED) -> np.ndarray:
    """``draws`` spans of the models' means over the pooled within-model SD, for models with ``counts`` seeds
    each and no difference between them (every score standard normal), sorted in ascending order."""
    rng = np.random.default_rng(seed)
    means, squares = [], np.zeros(draws)
    for n in counts:
        x = rng.standard_normal((draws, n))
        means.append(x.mean(axis=1))
        if n >= 2:
            squares += ((x - x.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    means = np.array(means)
    df = sum(n - 1 for n in counts if n >= 2)
    return np.sort((means.max(axis=0) - means.min(axis=0)) / np.sqrt(squares / df))


def span_test(scores: Sequence[Sequence[float]]) -> Optional[SpanTest]:
    """The test of one column from each model's per-seed values; None with fewer than 2 models or no model with
    2+ seeds (the noise not measured)."""
    sd, df = pooled_sd(scores)
    if len(scores) < 2 or not df:
        return None
    means = [float(np.mean(x)) for x in scores]
    span = max(means) - min(means)
    null = null_ratios(tuple(sorted(len(x) for x in scores)))
    ratio = span / sd if sd > 0 else (math.inf if span > 0 else 0.0)
    p = (1 + int(len(null) - np.searchsorted(null, ratio, side="left"))) / (len(null) + 1)
    # the ratio at which p reaches LEVEL: the (LEVEL (DRAWS + 1))-th largest simulated ratio
    limit = float(null[len(null) - int(math.floor(LEVEL * (len(null) + 1)))]) * sd
    return SpanTest(span, sd, df, limit, p, len(scores))


def span_tests(variants: Sequence[Variant], keys: Sequence[str], columns: Sequence[str]) -> Dict[str, SpanTest]:
    """{key: its SpanTest} for the keys whose seed noise some model measures."""
    tests = {key: span_test(seed_scores(variants, key, columns)) for key in keys}
    return {k: t for k, t in tests.items() if t is not None}
