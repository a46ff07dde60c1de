"""The study's confirmatory comparisons: declared before it runs, tested as one family.

``ENDPOINTS`` (a recorded setting: ``OUT/settings.env`` refuses a rerun that changes it) names them, each as
``MEASURE:A:B``, the per-pre-training-seed paired difference value(A) - value(B) of two MLM models of the study::

    ENDPOINTS="final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a"    # TUPE's claim: lower, and sooner

The report tests exactly these as one Holm family (its size stated), each by a t-test over the shared
pre-training seeds; every other comparison of the report is exploratory. ``EQUIVALENCE_BITS`` (recorded too)
is the margin, stated beforehand, within which a declared difference counts as "no difference": only a
two one-sided tests (TOST) procedure against it says so; otherwise a difference that is not shown is "not
resolved".
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from study.stats import TTest, holm, t_test, t_two_sided_p
from tupe_common.errors import UsageError

LEVEL = 0.05  # family-wise error of the declared family (Holm); TOST at the same level

# measure -> what it is; both are in bits of validation MLM loss, so one margin serves both
MEASURES: Dict[str, str] = {
    "final_loss": "final validation MLM loss (bits)",
    "loss_auc": "area under the validation-loss curve divided by the updates it spans (bits): the mean loss "
                "over training, lower when a model reaches low losses sooner",
}


@dataclass(frozen=True)
class Endpoint:
    measure: str
    a: str
    b: str

    @property
    def text(self) -> str:
        return f"{self.measure}:{self.a}:{self.b}"

    @property
    def label(self) -> str:
        return f"{self.measure}: {self.a} - {self.b}"


def parse_endpoints(text: str, seeds: Mapping[str, Sequence[int]]) -> List[Endpoint]:
    """ENDPOINTS -> its endpoints, in the order given (``none``: no declared comparison). ``seeds``: the study's
    MLM models and their pre-training seeds; A and B must be two of them sharing at least 2 seeds (a t-test
    needs 2), each entry once."""
    if text.strip() in ("", "none"):
        return []
    out: List[Endpoint] = []
    for entry in text.split():
        m = re.fullmatch(r"([a-z_]+):([a-z0-9_-]+):([a-z0-9_-]+)", entry)
        if not m:
            raise UsageError(f"ENDPOINTS entry '{entry}': write MEASURE:A:B (e.g. final_loss:tupe-r:bert-a), "
                             "or none")
        measure, a, b = m.group(1), m.group(2).replace("_", "-"), m.group(3).replace("_", "-")
        if measure not in MEASURES:
            raise UsageError(f"ENDPOINTS entry '{entry}': the measures are {', '.join(MEASURES)}, not '{measure}'")
        for name in (a, b):
            if name not in seeds:
                raise UsageError(f"ENDPOINTS entry '{entry}': '{name}' is not an MLM model of this study "
                                 f"(VARIANTS: {' '.join(seeds)})")
        shared = set(seeds[a]) & set(seeds[b])
        if a == b or len(shared) < 2:
            raise UsageError(f"ENDPOINTS entry '{entry}': a declared comparison needs two different models that "
                             f"share 2 or more pre-training seeds (they share {len(shared)})")
        e = Endpoint(measure, a, b)
        if e in out:
            raise UsageError(f"ENDPOINTS entry '{entry}' is given twice")
        out.append(e)
    refuse_repeated_questions(text.split(), out)
    return out


def refuse_repeated_questions(entries: Sequence[str], endpoints: Sequence[Endpoint]) -> None:
    """One question asked twice in one declaration is a UsageError naming both entries: ``final_loss:tupe-r:bert-a``
    and ``final_loss:bert-a:tupe-r`` are one two-sided test of the same pair on the same measure (its p-value is the
    same), so the family would count it twice and Holm's correction would be wrong. ``entries``: the written
    entries, one per endpoint."""
    asked: Dict[tuple, str] = {}  # (measure, {A, B}) -> the entry that asked it
    for entry, e in zip(entries, endpoints):
        question = (e.measure, frozenset((e.a, e.b)))
        if question in asked:
            raise UsageError(f"ENDPOINTS entries '{asked[question]}' and '{entry}' ask one question ({e.measure} of "
                             f"{e.a} against {e.b}, a two-sided test either way round): declare it once")
        asked[question] = entry


def parse_margin(text: str) -> Optional[float]:
    """EQUIVALENCE_BITS -> the margin in bits (``none``: no equivalence is ever concluded)."""
    if text.strip() in ("", "none"):
        return None
    try:
        margin = float(text)
    except ValueError:
        margin = -1.0
    if not margin > 0 or math.isinf(margin):
        raise UsageError(f"EQUIVALENCE_BITS must be a positive number of bits or none, not '{text}'")
    return margin


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
    test: Optional[TTest]  # None when fewer than 2 seeds have both values (yet)
    resolution: float  # the logging step that floors the spread (study.stats.t_test's sd_floor)
    margin: Optional[float]
    p_holm: float = math.nan
    p_tost: float = math.nan  # the larger of the two one-sided p-values against +-margin

    @property
    def verdict(self) -> str:
        """``a lower than b`` / ``a higher than b`` when the Holm-adjusted p is at most LEVEL; ``equivalent within
        +-margin`` when TOST rejects both sides at LEVEL; ``not resolved`` otherwise."""
        e = self.endpoint
        if self.test is None:
            return "not tested (fewer than 2 seeds)"
        if self.p_holm <= LEVEL:
            return f"{e.a} {'lower' if self.test.mean < 0 else 'higher'} than {e.b}"
        if self.p_tost <= LEVEL:
            return f"equivalent within ±{self.margin:g} bits"
        return "not resolved"


def tost_p(values: Sequence[float], margin: float, sd_floor: float = 0.0) -> float:
    """Two one-sided t-tests of "the mean difference is at most -margin" and "at least +margin" (n - 1 degrees of
    freedom, the standard deviation floored as in ``study.stats.t_test``): the larger of their p-values.
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


def family_tests(endpoints: Sequence[Endpoint], values: Mapping[str, Mapping[str, Mapping[int, float]]],
                   resolution: float, margin: Optional[float] = None) -> List[EndpointResult]:
    """``values[measure][model][seed]`` -> each declared endpoint t-tested over the seeds both models have (the
    per-seed differences' standard deviation floored at ``resolution``, the step of the logged losses), then
    Holm's correction over the declared family (and only it), and TOST against ``margin`` when one was declared."""
    out = []
    for e in endpoints:
        a, b = values.get(e.measure, {}).get(e.a, {}), values.get(e.measure, {}).get(e.b, {})
        diffs = {s: a[s] - b[s] for s in sorted(set(a) & set(b))}
        test = t_test(list(diffs.values()), sd_floor=resolution) if len(diffs) >= 2 else None
        r = EndpointResult(e, diffs, test, resolution, margin)
        if test is not None and margin is not None:
            r.p_tost = tost_p(list(diffs.values()), margin, resolution)
        out.append(r)
    tested = [r for r in out if r.test is not None]
    for r, adjusted in zip(tested, holm([r.test.p for r in tested])):
        r.p_holm = adjusted
    return out


def interval_text(t: TTest) -> str:
    return f"[{t.low:+.4f}, {t.high:+.4f}]"
