"""The report's declared comparisons: their section (``endpoint_lines``: the t-tested losses in one table,
``updates_to`` in its own), their tests over the finished seeds (``declared_tests``) and ``endpoints.csv``."""
from __future__ import annotations

import csv
import math
import os
from typing import Dict, List, Mapping, Optional, Sequence

from tupe_study.endpoints import (LEVEL as FAMILY_LEVEL, MEASURES as ENDPOINT_MEASURES, UPDATES_TO, Endpoint, EndpointResult,
                             curve_auc, family_tests, updates_to_values)
from tupe_study.markdown import fmt_p
from tupe_study.power import needed_text

ENDPOINT_COLUMNS = ("measure", "a", "b", "seeds", "mean", "sd", "low", "high", "p", "p_holm", "family_size",
                    "resolution", "margin", "p_tost", "verdict", "by_pretrain_seed")
# after those, only in a study that declares an updates_to endpoint (a published endpoints.csv keeps its columns)
UPDATES_TO_COLUMNS = ("target", "target_bits", "method", "median", "coverage", "a_first", "b_first", "ties", "censored_a", "censored_b",
                      "censored_by_pretrain_seed")

def endpoint_lines(results: Sequence[EndpointResult], declared: str, total_updates: int) -> List[str]:
    """The declared comparisons: one Holm family, its size stated, each with its per-seed differences; the t-tested
    measures in one table, updates_to (``_updates_to_lines``) in its own."""
    if not results:
        return ["No comparison was declared before the study ran (`ENDPOINTS=none`): every difference below is "
                "exploratory.", ""]
    t_rows = [r for r in results if r.endpoint.measure != UPDATES_TO]
    u_rows = [r for r in results if r.endpoint.measure == UPDATES_TO]
    seeds = sorted({s for r in t_rows for s in r.diffs})
    margin = results[0].margin
    t_text = (f"t-tested over those seeds (n - 1 degrees of freedom, 95% t-interval of the mean); the spread is the "
              f"standard deviation of the per-seed differences, floored at the logging step "
              f"({results[0].resolution:g} bits) in the test, since a spread below it is not measured.")
    if u_rows:
        t_text = ("those of a loss (" + ", ".join(sorted({r.endpoint.measure for r in t_rows})) + ") " + t_text
                  + " Those of updates_to by a sign test, below." if t_rows else "each by a sign test, below.")
    measures = {k: v for k, v in ENDPOINT_MEASURES.items() if k != UPDATES_TO or u_rows}
    L = [f"Declared before the study ran (`ENDPOINTS={declared}`, recorded in `settings.env`; "
         f"`EQUIVALENCE_BITS={'none' if margin is None else f'{margin:g}'}`). These {len(results)} comparison(s) are "
         f"**one Holm family of {len(results)}**, and the only confirmatory tests of this report; every other "
         "difference in it is exploratory, whatever its interval. Each is the per-pre-training-seed paired "
         "difference a - b (the same data order and masks per seed), over the seeds whose pre-training finished "
         f"all {total_updates} updates, {t_text}", "",
         "Measures: " + "; ".join(f"`{k}`: {v}" for k, v in measures.items()) + ".", ""]
    if t_rows:
        L += ["| declared comparison | " + "".join(f"seed {s} | " for s in seeds)
              + "mean | SD over seeds | 95% t-interval | p | Holm p (family) | TOST p (Holm) | verdict |",
              "|" + "---|" * (len(seeds) + 8)]
    for r in t_rows:
        t = r.test
        cells = "".join("— | " if s not in r.diffs else f"{r.diffs[s]:+.4f} | " for s in seeds)
        if t is None:
            L.append(f"| {r.endpoint.label} | {cells}— | — | — | — | — | — | {r.verdict} |")
            continue
        L.append(f"| {r.endpoint.label} | {cells}{t.mean:+.4f} | {t.sd:.4f} | [{t.low:+.4f}, {t.high:+.4f}] | "
                 f"{fmt_p(t.p)} | {fmt_p(r.p_holm)} | {fmt_p(r.p_tost)} | **{r.verdict}** |")
    if t_rows:
        L += ["", f"A difference is shown when its Holm-adjusted p is at most {FAMILY_LEVEL:g}; it is called equivalent "
              "only when the two one-sided tests against the declared margin both reject (TOST), their p adjusted by "
              f"Holm across the same family, at {FAMILY_LEVEL:g}; otherwise it is **not resolved**: neither shown nor "
              "excluded. The family is the declared one, whole: a comparison not tested counts in it with p = 1.", ""]
    return L + (updates_to_lines(u_rows, total_updates) if u_rows else [])


def updates_text(x: float) -> str:
    """A number of updates (or a difference of them) for a table; an open interval end as ±∞; none (the median of
    no measured pair: every pair tied or censored on both sides) as —."""
    if math.isnan(x):
        return "—"
    return ("+∞" if x > 0 else "−∞") if math.isinf(x) else f"{x:+.1f}"


def target_text(r: EndpointResult) -> str:
    bits = r.target_bits
    if r.endpoint.target == "halfway":
        return "halfway (not resolved yet)" if bits is None else f"halfway = {bits:.4f}"
    return r.endpoint.target


def updates_to_lines(results: Sequence[EndpointResult], total_updates: int) -> List[str]:
    """The updates_to comparisons: per-seed differences in updates (``c``: censored), the median with its
    order-statistic interval, the sign test's counts and p, the Holm p of the whole family."""
    seeds = sorted({s for r in results for s in r.diffs})
    L = [f"`updates_to@TARGET`: per seed, the update at which each model's validation loss first reaches TARGET bits, "
         "interpolated linearly between the two validations around its first crossing (a curve already at or below "
         "it at its first validation counts from that validation's update). A model that never reaches it within "
         f"the {total_updates} updates is **censored at the budget**: its value is {total_updates}, its true update "
         "later, so a difference with a censored side (`c`) is a bound, not a measurement. Each comparison is tested "
         "by the exact two-sided **sign test** over the seeds (binomial, 1/2): a difference of 0 and a seed where "
         "both models are censored are ties, dropped and counted; a seed with one side censored counts with its "
         "known sign (the censored model is later). Its interval is the sign test's own, the distribution-free "
         "**order-statistic interval** of the median difference: the order statistics (k, n + 1 - k) of the n "
         "seeds' differences for the largest k with 2 P(X < k) <= 0.05, at its exact coverage (at least 95%; below 6 "
         "seeds none exists: (−∞, +∞)), censored pairs ranked last: a censored difference is only a bound, so for "
         "the upper end a seed censored on a's side (or both) counts as +∞ and for the lower end one censored on "
         "b's side (or both) as −∞, and the interval holds whatever the censored updates are; the median ranks them "
         "so too (—: undetermined). No TOST: the declared margin is in bits. Its Holm p is that of the whole "
         "family above; a difference is shown when it is at most "
         f"{FAMILY_LEVEL:g}.", "",
         "| declared comparison | target (bits) | " + "".join(f"seed {s} | " for s in seeds)
         + "median | order-statistic interval (coverage) | a first / b first / ties | censored a / b | sign test p | "
           "Holm p (family) | verdict |", "|" + "---|" * (len(seeds) + 9)]
    for r in results:
        cells = "".join("— | " if s not in r.diffs else f"{updates_text(r.diffs[s])}{' c' if s in r.censored else ''} | "
                        for s in seeds)
        t = r.test
        if t is None:
            L.append(f"| {r.endpoint.label} | {target_text(r)} | {cells}— | — | — | — | — | — | {r.verdict} |")
            continue
        L.append(f"| {r.endpoint.label} | {target_text(r)} | {cells}{updates_text(t.center)} | "
                 f"[{updates_text(t.low)}, {updates_text(t.high)}] ({100 * t.coverage:.1f}%) | "
                 f"{t.negative} / {t.positive} / {r.ties} | {r.censored_count('a')} / {r.censored_count('b')} | "
                 f"{fmt_p(t.p)} | {fmt_p(r.p_holm)} | **{r.verdict}** |")
    L.append("")
    warned = [r for r in results if r.censoring_warning]
    L += [f"> **WARNING: {r.endpoint.label}.** {r.censoring_warning}. A model censored on most seeds turns the "
          "comparison into whether it got below the target by the end at all: declare a target both models reach."
          for r in warned] + ([""] if warned else [])
    return L


def endpoint_row(r: EndpointResult, family_size: int, counting: bool) -> Dict:
    """One row of endpoints.csv. ``counting`` (a study with an updates_to endpoint): UPDATES_TO_COLUMNS too; an
    updates_to row leaves mean, sd, resolution and margin empty (low, high and p: its order-statistic interval and
    sign test)."""
    t, sign = r.test, r.endpoint.measure == UPDATES_TO
    row = {"measure": r.endpoint.measure, "a": r.endpoint.a, "b": r.endpoint.b, "seeds": len(r.diffs),
           "mean": t.mean if t and not sign else None, "sd": t.sd if t and not sign else None,
           "low": t.low if t else None, "high": t.high if t else None, "p": t.p if t else None, "p_holm": r.p_holm,
           "family_size": family_size, "resolution": None if sign else r.resolution,
           "margin": None if sign else r.margin, "p_tost": r.p_tost, "verdict": r.verdict,
           "by_pretrain_seed": " ".join(f"{s}:{d:.6f}" for s, d in r.diffs.items())}
    if counting:
        row.update(target=r.endpoint.target or None, target_bits=r.target_bits, method=t.method if t else None)
        if sign and t:
            row.update(median=t.center, coverage=t.coverage, a_first=t.negative, b_first=t.positive, ties=r.ties,
                       censored_a=r.censored_count("a"), censored_b=r.censored_count("b"),
                       censored_by_pretrain_seed=" ".join(f"{s}:{c}" for s, c in sorted(r.censored.items())))
    return row


def declared_tests(declared: Sequence[Endpoint], finished: Mapping[str, Sequence], total_updates: int,
                   resolution: float, margin: Optional[float], halfway: Optional[float]) -> List[EndpointResult]:
    """The declared family tested over each model's finished seeds (``finished[model]``: runs with ``seed``,
    ``final`` and ``curve``): final_loss, loss_auc and updates_to measured, then ``family_tests``. A curve of one
    validation has no area: that seed has no loss_auc (with fewer than 2 such seeds it is not tested)."""
    areas = {n: {s.seed: curve_auc(s.curve) for s in ss} for n, ss in finished.items()}
    measured = {"final_loss": {n: {s.seed: s.final for s in ss} for n, ss in finished.items()},
                "loss_auc": {n: {seed: a for seed, a in by_seed.items() if a is not None} for n, by_seed in areas.items()},
                **updates_to_values(declared, {n: {s.seed: s.curve for s in ss} for n, ss in finished.items()},
                                    total_updates, halfway)}
    return family_tests(declared, measured, resolution, margin, halfway)


def write_endpoints_csv(path: str, results: Sequence[EndpointResult], declared: Sequence[Endpoint]) -> None:
    """endpoints.csv: one row per declared comparison; the updates_to columns only in a study that declares one."""
    from tupe_common.io import write_csv_atomic

    counting = any(e.measure == UPDATES_TO for e in declared)
    write_csv_atomic(path, [endpoint_row(r, len(results), counting) for r in results],
                     ENDPOINT_COLUMNS + (UPDATES_TO_COLUMNS if counting else ()))


def endpoints_so_far(path: str) -> List[str]:
    """The declared comparisons over every seed so far, as the report tested them (its ``endpoints.csv`` at
    ``path``), each with the seeds its effect so far needs for 80% power: for a study run in several calls
    (tupe_study.gpu_schedule's)."""
    rows = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    if not rows:
        return ["No comparison declared (ENDPOINTS=none), or no report yet.", ""]
    L = [f"One Holm family of {rows[0]['family_size']}, over every seed whose pre-training finished so far (the "
         "report's \"Declared comparisons\"):", ""]
    for r in rows:
        if not r["mean"]:
            L.append(f"- `{r['measure']}: {r['a']} - {r['b']}`: {r['seeds']} seed(s), {r['verdict']}")
            continue
        seeds = " ".join(s.split(":")[0] for s in r["by_pretrain_seed"].split())
        L.append(f"- `{r['measure']}: {r['a']} - {r['b']}` over {r['seeds']} seeds ({seeds}): mean "
                 f"{float(r['mean']):+.4f} bits, 95% t-interval [{float(r['low']):+.4f}, {float(r['high']):+.4f}], "
                 f"p {float(r['p']):.3g}, Holm p {float(r['p_holm']):.3g}: **{r['verdict']}**; "
                 + needed_text(float(r["mean"]), float(r["sd"]), int(r["family_size"])))
    return L + ["", "Seeds for 80% power: of the two-sided paired t-test at Holm's first step (0.05 / the family's "
                "size), at the effect measured so far (`tupe_study/power.py`, as `study.sh --plan`); an effect measured on "
                "few seeds is itself uncertain, so this guides the next loan, it does not promise an answer.", ""]
