"""Has the drop ended? Each model's validation loss change over the last 20% of the budget, beside the gap the
study compares, so that a difference is read "by N updates" when a model is still falling.

A linear decay of the LR to 0 flattens every curve's end by itself: the last 20% of the budget holds about 4% of
the schedule's LR area (the sum of its step sizes), the 20% before it about 12%. So the check also divides each
window's loss change by the window's LR area: a model whose change per unit of LR area in the last window is at
least half that of the window before still learns per unit of LR as it did, and its curve is flat because the
steps shrank ("flattened by the LR decay": more budget could still lower it); below half it has levelled off.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_study.runs import loss_at

STILL_FALLING = 0.10  # of the gap: a last-window change above this share of the gap is "still falling"
SLOWED = 0.5  # the last window's change per LR area below this share of the previous window's: levelled off
LAST = 0.2  # the window: the last 20% of the budget, and the 20% before it


def lr_area(start: int, end: int, warmup: int, total: int) -> float:
    """The sum of the LR (peak 1) that updates start+1..end take under fairseq's polynomial decay at power 1 to 0: a
    linear warmup over ``warmup`` updates, then a linear decay reaching 0 at ``total``. fairseq sets the LR after
    each update, so update u takes the LR of u - 1 (the first update: 1 / warmup, or the peak without warmup)."""
    def lr(u: int) -> float:
        return u / warmup if u <= warmup and warmup > 0 else max(0.0, (total - u) / (total - warmup))

    return sum(lr(max(u - 1, 1 if warmup > 0 else 0)) for u in range(start + 1, end + 1))


@dataclass
class Flatness:
    model: str
    seeds: int
    last: float  # mean over seeds of loss(0.8 N) - loss(N): > 0 while falling
    before: float  # the same over 0.6 N .. 0.8 N
    rate_ratio: Optional[float]  # (last / its LR area) / (before / its LR area); +inf when only the last fell; None
    # when the last window did not fall
    gap: Optional[float]  # the gap it is read against (bits)

    @property
    def verdict(self) -> str:
        if self.gap is not None and self.last > STILL_FALLING * self.gap:
            return "still falling"
        if self.rate_ratio is not None and self.rate_ratio >= SLOWED:
            return "flattened by the LR decay"
        return "levelled off"


def window_changes(curve: Mapping[int, float], total: int) -> Optional[Tuple[float, float]]:
    """(loss(0.6 N) - loss(0.8 N), loss(0.8 N) - loss(N)) from the validations nearest those updates; None for a
    curve without its final validation."""
    if total not in curve:
        return None
    at = [loss_at(dict(curve), round(f * total))[0] for f in (1 - 2 * LAST, 1 - LAST)]
    return at[0] - at[1], at[1] - curve[total]


def rate_ratio(last: float, before: float, a_last: float, a_before: float) -> Optional[float]:
    """The last window's loss change per unit of LR area over the window before's; +inf when the loss falls in the
    last window only (it learns faster than before, not slower); None when it does not fall in the last window."""
    if last <= 0 or a_last <= 0:
        return None
    return (last / a_last) / (before / a_before) if before > 0 else float("inf")


def flatness(curves: Mapping[str, Sequence[Mapping[int, float]]], gaps: Mapping[str, float], warmup: int,
             total: int) -> List[Flatness]:
    """Per model (its finished seeds' curves), the change over the last window and the window before, and the
    verdict against ``gaps[model]``."""
    a_before = lr_area(round((1 - 2 * LAST) * total), round((1 - LAST) * total), warmup, total)
    a_last = lr_area(round((1 - LAST) * total), total, warmup, total)
    out = []
    for model, runs in curves.items():
        changes = [c for c in (window_changes(curve, total) for curve in runs) if c is not None]
        if not changes:
            continue
        before = statistics.fmean(c[0] for c in changes)
        last = statistics.fmean(c[1] for c in changes)
        ratio = rate_ratio(last, before, a_last, a_before)
        out.append(Flatness(model, len(changes), last, before, ratio, gaps.get(model)))
    return out


def gaps_of(finals: Mapping[str, Sequence[float]], pairs: Sequence[Tuple[str, str]]) -> Dict[str, float]:
    """The gap each model is read against: the largest |difference of mean final losses| of a declared pair it is in;
    without declared pairs, the span of all the models' mean final losses."""
    means = {m: statistics.fmean(v) for m, v in finals.items() if v}
    gaps: Dict[str, float] = {}
    for a, b in pairs or []:
        if a in means and b in means:
            for m in (a, b):
                gaps[m] = max(gaps.get(m, 0.0), abs(means[a] - means[b]))
    if not pairs and len(means) > 1:
        span = max(means.values()) - min(means.values())
        gaps = {m: span for m in means}
    return gaps


def flatness_lines(rows: Sequence[Flatness], warmup: int, total: int) -> List[str]:
    """The report's section "Has the drop ended?"."""
    if not rows:
        return []
    a_before = lr_area(round((1 - 2 * LAST) * total), round((1 - LAST) * total), warmup, total)
    a_last = lr_area(round((1 - LAST) * total), total, warmup, total)
    whole = lr_area(0, total, warmup, total)
    lo, hi = round((1 - LAST) * total), total
    L = ["### Has the drop ended? (the last 20% of the budget)", "",
         f"Each model's validation loss change over updates {lo}..{hi} (the last 20%; positive: still falling), mean "
         f"over its finished seeds, beside the gap it is compared across (a declared pair's difference of mean final "
         f"losses; without a declared pair, the span of all models). **still falling**: the change exceeds "
         f"{STILL_FALLING:.0%} of the gap, so a difference here holds **by {total} updates**, not at convergence. The "
         f"linear decay to 0 flattens every curve's end: the last 20% holds {a_last / whole:.1%} of the schedule's LR "
         f"area, the 20% before it {a_before / whole:.1%}; so each window's change is divided by its LR area, and a "
         f"model whose last-window change per unit of LR area is at least {SLOWED:g} of the window before's is "
         "**flattened by the LR decay** (it learns per unit of LR as before: more budget could lower it), below that "
         "**levelled off**.", "",
         "| model | seeds | change, last 20% | change, 20% before | per-LR-area ratio | gap | reading |",
         "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "—" if r.rate_ratio is None else "+∞" if math.isinf(r.rate_ratio) else f"{r.rate_ratio:.2f}"
        gap = "—" if r.gap is None else f"{r.gap:.4f}"
        L.append(f"| {r.model} | {r.seeds} | {r.last:+.4f} | {r.before:+.4f} | {ratio} | {gap} | **{r.verdict}** |")
    falling = [r.model for r in rows if r.verdict == "still falling"]
    L += ["", (f"Still falling at the end: {', '.join(falling)}. Every loss difference of this report is a difference "
               f"by {total} updates; where a model is still falling it says nothing of where the models would end."
               if falling else f"No model is still falling by the rule above; the differences are still differences "
               f"by {total} updates, under this schedule."), ""]
    return L


def recorded_warmup(out: str, given: Optional[int]) -> int:
    """``--warmup``, else the study's recorded WARMUP (an archive written before the report took --warmup), else 0."""
    from tupe_study.settings import read_recorded

    if given is not None:
        return given
    warmup = read_recorded(out).get("WARMUP", "")
    return int(warmup) if warmup.strip().isdigit() else 0


def report_section(finished: Mapping[str, Sequence], declared: Sequence, warmup: int, total_updates: int) -> List[str]:
    """The report's section: each MLM model's finished seeds (runs with ``curve`` and ``final``), read against the
    declared final-loss pairs' gaps."""
    curves = {m: [s.curve for s in ss] for m, ss in finished.items() if ss}
    finals = {m: [s.final for s in ss if s.final is not None] for m, ss in finished.items()}
    pairs = [(e.a, e.b) for e in declared if e.measure == "final_loss"]
    return flatness_lines(flatness(curves, gaps_of(finals, pairs), warmup, total_updates), warmup, total_updates)
