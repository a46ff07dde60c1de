"""tupe_study.noise: "an order may be read" fires in at most 5% of studies where no model differs, where the rule it
replaced (the models' span against the largest spread of one model over its own seeds) fired in most of them."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tupe_study import noise, stats

STUDIES = 4000  # simulated null studies per shape
# 3 standard errors of the estimated rate over STUDIES, plus 3 of the null's own 5% point (DRAWS simulated studies)
SLACK = 3 * math.sqrt(0.05 * 0.95 / STUDIES) + 3 * math.sqrt(0.05 * 0.95 / noise.DRAWS)
SHAPES = {"18 models, 2 on 3 seeds": [3, 3] + [1] * 16, "2 models x 10 seeds": [10, 10]}


def study(counts, rng, shift=None):
    """Per model its per-seed scores, every one N(0, 1) plus the model's shift (none: no difference)."""
    shift = shift or [0.0] * len(counts)
    return [list(rng.standard_normal(n) + d) for n, d in zip(counts, shift)]


def old_rule(scores) -> bool:
    """The replaced rule, plainly: the span of the models' means exceeds the largest max - min of one model over its
    own seeds."""
    means = [sum(x) / len(x) for x in scores]
    return max(means) - min(means) > max(max(x) - min(x) for x in scores if len(x) >= 2)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_order_rule_holds_its_level_under_the_null(shape):
    counts, rng = SHAPES[shape], np.random.default_rng(7)
    new = old = 0
    for _ in range(STUDIES):
        scores = study(counts, rng)
        new += noise.span_test(scores).beyond
        old += old_rule(scores)
    assert new / STUDIES <= 0.05 + SLACK, (shape, new / STUDIES)
    if shape.startswith("18"):  # measured: new 4.9% and 4.8% of the 4,000; old 88.6% and 0%
        assert old / STUDIES > 0.8  # the replaced rule: about 89% of null studies "may read an order"
    else:
        assert old / STUDIES < 0.01  # and with 10 seeds each it hardly sees a real difference either (below)


def test_order_rule_fires_on_a_real_difference():
    rng = np.random.default_rng(11)
    big = noise.span_test(study(SHAPES["18 models, 2 on 3 seeds"], rng, [0.0] * 17 + [12.0]))
    assert big.beyond and big.p < 0.01
    tens = [study([10, 10], rng, [0.0, 2.0]) for _ in range(200)]  # 2 SD between the two models
    assert np.mean([noise.span_test(s).beyond for s in tens]) > 0.95
    assert np.mean([old_rule(s) for s in tens]) < 0.2  # 2 SD < the range of 10 seeds: the old rule saw it in 3.5%


def test_two_models_agree_with_the_two_sample_t():
    """With two models the ratio is |mean a - mean b| / pooled SD, the two-sample t up to a constant: the Monte Carlo
    p is the t-test's up to the simulation's error."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        a, b = rng.standard_normal(6), rng.standard_normal(4) + 1.0
        t = noise.span_test([list(a), list(b)])
        sd = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / 8)
        assert t.sd == pytest.approx(sd) and t.df == 8 and t.span == pytest.approx(abs(a.mean() - b.mean()))
        want = stats.t_two_sided_p(t.span / (sd * math.sqrt(1 / 6 + 1 / 4)), 8)
        assert t.p == pytest.approx(want, abs=0.01)
        assert t.beyond == (t.span > t.limit)


def test_no_model_with_two_seeds_means_the_noise_is_not_measured():
    assert noise.span_test([[1.0], [2.0], [3.0]]) is None
    assert noise.span_test([[1.0, 2.0]]) is None  # one model: no span
    assert noise.null_ratios((1, 3)) is noise.null_ratios((1, 3))  # one simulation per shape, reproducible
