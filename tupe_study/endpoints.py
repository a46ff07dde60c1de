"""The study's confirmatory comparisons: declared before it runs, tested as one family.

``ENDPOINTS`` (a recorded setting: ``OUT/settings.env`` refuses a rerun that changes it) names them, each as
``MEASURE:A:B``, the per-pre-training-seed paired difference value(A) - value(B) of two MLM models of the study::

    ENDPOINTS="final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a"    # TUPE's claim: lower, and sooner

The report tests exactly these as one Holm family (its size stated), each by a t-test over the shared
pre-training seeds; every other comparison of the report is exploratory. ``EQUIVALENCE_BITS`` (recorded too)
is the margin, stated beforehand, within which a declared difference counts as "no difference": only a
two one-sided tests (TOST) procedure against it says so; otherwise a difference that is not shown is "not
resolved".

``updates_to@TARGET:A:B`` counts steps instead: per seed the update at which each model's validation loss first
reaches TARGET bits (``updates_to``; censored at the budget when it never does), compared by an exact sign test with
the order-statistic interval of the median difference, in the same Holm family; no TOST (its margin is in bits).
TARGET is a number of bits or ``halfway`` (``halfway_target``: resolved elsewhere, handed to the report).

The declaration's syntax (``Endpoint``, ``parse_declaration``, ``parse_margin``) is ``tupe_study.declaration``'s,
re-exported here; the report reads it as ``tupe_study.report_spec.ReportSpec``.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from tupe_study.stats import SignTest, TTest, holm, median_interval, sign_test_p, t_test, t_two_sided_p
from tupe_common.errors import UsageError
from tupe_study.declaration import (HALFWAY, MEASURES, UPDATES_TO, Endpoint, check_models,  # noqa: F401
                                    parse_declaration, parse_endpoints, parse_margin, positive_bits,
                                    refuse_repeated_questions)

LEVEL = 0.05  # family-wise error of the declared family (Holm); TOST at the same level


def halfway_target(unigram_bits: float, sweep_final_losses_of_b: Sequence[float]) -> float:
    """The ``halfway`` target in bits: halfway from the unigram baseline to B's mean final validation loss over the
    sweep seeds at B's chosen learning rate, (unigram + mean) / 2."""
    losses = [float(x) for x in sweep_final_losses_of_b]
    if not losses or not all(math.isfinite(x) for x in losses):
        raise UsageError(f"{UPDATES_TO}@{HALFWAY} needs B's finite final sweep losses at its chosen LR (LR_GRID, "
                         f"SWEEP_SEEDS), got {losses}; declare a target in bits instead")
    return (unigram_bits + statistics.fmean(losses)) / 2


def updates_to(curve: Mapping[int, float], target: float, budget: int) -> Tuple[float, bool]:
    """(update, censored): the update at which a validation curve ({update: loss}) first reaches ``target`` (loss
    <= target), linearly interpolated between the last validation above it and the first at or below it. A curve
    whose first validation is already at or below the target gives that validation's update (the curve says nothing
    earlier). One that never reaches it by ``budget`` (validations after it are not read; a NaN loss never reaches
    it) is censored at the budget: (budget, True)."""
    before = None
    for u in sorted(x for x in curve if x <= budget):
        loss = curve[u]
        if loss <= target:
            if before is None or not math.isfinite(before[1]):
                return float(u), False
            u0, l0 = before
            return u0 + (l0 - target) / (l0 - loss) * (u - u0), False
        before = (u, loss)
    return float(budget), True


def curve_auc(curve: Mapping[int, float]) -> Optional[float]:
    """The area under a validation curve ({update: loss}) by the trapezoid rule, divided by the updates from its
    first to its last validation: a mean loss in bits. None with fewer than 2 validations."""
    if len(curve) < 2:
        return None
    u = sorted(curve)
    area = sum((u[i + 1] - u[i]) * (curve[u[i]] + curve[u[i + 1]]) / 2 for i in range(len(u) - 1))
    return area / (u[-1] - u[0])


def logged_resolution(values: Sequence[float]) -> float:
    """The step of the logged values: 10^-d for the most decimals any of them shows (a log that keeps 3 decimals:
    0.001). Python's repr of a float read from such a log is its shortest round-trip form, so it shows at most
    the decimals that were written."""
    decimals = 0
    for x in values:
        text = repr(float(x))
        if "e" in text or "inf" in text or "nan" in text:
            continue
        decimals = max(decimals, len(text.split(".")[1].rstrip("0")) if "." in text else 0)
    return 10.0 ** -decimals


@dataclass
class EndpointResult:
    endpoint: Endpoint
    diffs: Dict[int, float]  # pre-training seed -> value(a) - value(b)
    test: Optional[Union[TTest, SignTest]]  # None when fewer than 2 seeds have both values (yet)
    resolution: float  # the logging step that floors the spread (tupe_study.stats.t_test's sd_floor)
    margin: Optional[float]
    p_holm: float = math.nan
    p_tost: float = math.nan  # the larger of the two one-sided p-values against +-margin
    censored: Dict[int, str] = field(default_factory=dict)  # updates_to: seed -> its censored side(s): a, b or ab
    target_bits: Optional[float] = None  # updates_to: the target (None: halfway, not resolved yet)

    def censored_count(self, side: str) -> int:
        """The seeds on which model ``side`` (a or b) never reached the target."""
        return sum(side in c for c in self.censored.values())

    @property
    def ties(self) -> int:
        """Sign test: the seeds left out of it, the difference 0 or both models censored."""
        t = self.test
        return len(self.diffs) - t.positive - t.negative if isinstance(t, SignTest) else 0

    @property
    def censoring_warning(self) -> str:
        """Set when a model is censored on more than half the seeds: the endpoint then mostly says whether it got
        below the target by the end, that is its final loss again."""
        n = len(self.diffs)
        worst = [(self.censored_count(side), name) for side, name in (("a", self.endpoint.a), ("b", self.endpoint.b))
                 if self.censored_count(side) > n / 2]
        return "; ".join(f"{name} never reached the target on {k} of {n} seeds: this target measures the final "
                         "loss again" for k, name in worst)

    @property
    def verdict(self) -> str:
        """``a lower than b`` / ``a higher than b`` (updates_to: ``a reaches the target sooner / later than b``) when
        the Holm-adjusted p is at most LEVEL; ``equivalent within +-margin`` when TOST rejects both sides at LEVEL
        (never for updates_to); ``not resolved`` otherwise; a censoring warning appended when there is one."""
        e = self.endpoint
        if self.test is None:
            unresolved = e.measure == UPDATES_TO and self.target_bits is None
            return "not tested (target not resolved yet)" if unresolved else "not tested (fewer than 2 seeds)"
        if isinstance(self.test, SignTest):
            sooner = self.test.negative > self.test.positive
            text = (f"{e.a} reaches the target {'sooner' if sooner else 'later'} than {e.b}"
                    if self.p_holm <= LEVEL else "not resolved")
            return f"{text} (warning: {self.censoring_warning})" if self.censoring_warning else text
        if self.p_holm <= LEVEL:
            return f"{e.a} {'lower' if self.test.mean < 0 else 'higher'} than {e.b}"
        if self.p_tost <= LEVEL:
            return f"equivalent within ±{self.margin:g} bits"
        return "not resolved"


def _sign(diff: float, censored: str) -> int:
    """A pair's sign for the sign test: a one-sided censoring fixes it (the censored model is later), a double one
    is a tie."""
    if censored:
        return {"a": 1, "b": -1}.get(censored, 0)
    return (diff > 0) - (diff < 0)


def sign_test(diffs: Mapping[int, float], censored: Mapping[int, str], level: float = 0.95) -> SignTest:
    """The exact sign test of the per-seed differences (0 and both-censored pairs are ties, dropped; a one-sided
    censored pair enters with its known sign), and the median with its order-statistic interval over every pair,
    censored ones ranked last: a censored difference is only a bound (A censored: the true one is larger), so for the
    upper end a pair censored on A's side (or both) is +inf, for the lower end one censored on B's side (or both)
    -inf, and the interval covers the median at its stated coverage whatever the censored updates are. The median
    ranks them so too (+inf / -inf; both-censored pairs left out; NaN when the middle is undetermined)."""
    signs = [_sign(d, censored.get(s, "")) for s, d in diffs.items()]
    side = {s: censored.get(s, "") for s in diffs}
    low, _, coverage = median_interval([-math.inf if "b" in side[s] else d for s, d in diffs.items()], level)
    _, high, _ = median_interval([math.inf if "a" in side[s] else d for s, d in diffs.items()], level)
    ranked = [{"a": math.inf, "b": -math.inf}.get(side[s], d) for s, d in diffs.items() if side[s] != "ab"]
    center = statistics.median(ranked) if ranked else math.nan
    positive, negative = signs.count(1), signs.count(-1)
    return SignTest(len(diffs), center, low, high, coverage, sign_test_p(positive, negative), positive, negative)


def tost_p(values: Sequence[float], margin: float, sd_floor: float = 0.0) -> float:
    """Two one-sided t-tests of "the mean difference is at most -margin" and "at least +margin" (n - 1 degrees of
    freedom, the standard deviation floored as in ``tupe_study.stats.t_test``): the larger of their p-values.
    Equivalence within +-margin is concluded at level alpha when this is <= alpha."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    se = max(sd, sd_floor) / math.sqrt(n)
    if se == 0:
        return 0.0 if abs(mean) < margin else 1.0
    one_sided = [t_two_sided_p(t, n - 1) / 2 if t > 0 else 1 - t_two_sided_p(t, n - 1) / 2
                 for t in ((mean + margin) / se, (margin - mean) / se)]
    return max(one_sided)


def updates_to_values(endpoints: Sequence[Endpoint], curves: Mapping[str, Mapping[int, Mapping[int, float]]],
                      budget: int, halfway: Optional[float] = None) -> Dict[str, Dict[str, Dict[int, Tuple[float, bool]]]]:
    """``curves[model][seed]`` (validation curves) -> ``family_tests``'s values of the updates_to endpoints whose
    target is known: ``values[endpoint.key][model][seed] = updates_to(curve, target, budget)``."""
    out: Dict[str, Dict[str, Dict[int, Tuple[float, bool]]]] = {}
    for e in endpoints:
        target = e.target_bits(halfway) if e.measure == UPDATES_TO else None
        if target is not None:
            out[e.key] = {m: {s: updates_to(c, target, budget) for s, c in by_seed.items()} for m, by_seed in
                          curves.items()}
    return out


def family_tests(endpoints: Sequence[Endpoint], values: Mapping[str, Mapping[str, Mapping[int, object]]],
                   resolution: float, margin: Optional[float] = None,
                   halfway: Optional[float] = None) -> List[EndpointResult]:
    """``values[endpoint.key][model][seed]`` -> each declared endpoint tested over the seeds both models have, then
    Holm's correction over the declared family (and only it). final_loss / loss_auc: a t-test (the per-seed
    differences' standard deviation floored at ``resolution``, the step of the logged losses), and TOST against
    ``margin`` when one was declared. updates_to: the values are (update, censored) pairs (``updates_to_values``),
    tested by ``sign_test``; ``halfway``: the resolved ``updates_to@halfway`` target (None: not resolved, not
    tested)."""
    out = []
    for e in endpoints:
        a, b = values.get(e.key, {}).get(e.a, {}), values.get(e.key, {}).get(e.b, {})
        shared = sorted(set(a) & set(b))
        if e.measure == UPDATES_TO:
            diffs = {s: a[s][0] - b[s][0] for s in shared}
            censored = {s: "a" * a[s][1] + "b" * b[s][1] for s in shared if a[s][1] or b[s][1]}
            test = sign_test(diffs, censored) if len(diffs) >= 2 else None
            out.append(EndpointResult(e, diffs, test, resolution, margin, censored=censored,
                                      target_bits=e.target_bits(halfway)))
            continue
        diffs = {s: a[s] - b[s] for s in shared}
        test = t_test(list(diffs.values()), sd_floor=resolution) if len(diffs) >= 2 else None
        r = EndpointResult(e, diffs, test, resolution, margin)
        if test is not None and margin is not None:
            r.p_tost = tost_p(list(diffs.values()), margin, resolution)
        out.append(r)
    return adjust_family(out)


def adjust_family(results: List[EndpointResult]) -> List[EndpointResult]:
    """Holm's correction over the declared family, whole: an endpoint not tested (too few seeds, an unresolved
    target) counts with p = 1, so the family is never smaller than declared; its own adjusted p stays NaN (the
    report names it "not tested"). The TOST p-values are adjusted across the same family (an endpoint with no
    TOST, e.g. updates_to, counts with p = 1), so "equivalent" is a family-wise claim as "shown" is."""
    tests = [r.test.p if r.test is not None else 1.0 for r in results]
    for r, adjusted in zip(results, holm(tests)):
        r.p_holm = adjusted if r.test is not None else math.nan
    tost = [r.p_tost if not math.isnan(r.p_tost) else 1.0 for r in results]
    for r, adjusted in zip(results, holm(tost) if results else []):
        if not math.isnan(r.p_tost):
            r.p_tost = adjusted
    return results

