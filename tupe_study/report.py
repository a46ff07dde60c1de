"""The study's report: ``python -m tupe_study.report OUT --variants ...`` (the ``report`` stage runs it).

Writes ``OUT/report.md``, ``OUT/study.csv`` (one row per variant), ``OUT/correlation.csv``,
``OUT/differences.csv`` (every downstream difference with its interval), ``OUT/order.csv`` (the word-order
drops) and ``OUT/overview.png`` (``tupe_study.figure``). Everything missing is listed in the report.

Units: fairseq's ``masked_lm`` criterion logs its loss in bits (``loss / sample_size / log(2)``, in
``fairseq/criterions/masked_lm.py``), so the unigram baseline is the entropy of the training tokens in
bits (docs/study.md explains the baseline and every other measure). An ELECTRA model (``V+electra``) logs
other quantities (``tupe_plugin/criterions/electra.py``: the generator's MLM loss, the discriminator's BCE, both
in bits): they have a table of their own, out of the MLM-loss comparisons and the unigram check; downstream,
every model is compared with every other whatever its objective.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from tupe_study.compare import (AVERAGE, PAIRED_BOOTSTRAP, T_TEST, Interval, OrderDrop, Paired, bootstrap_pairs, order_drops,
                           paired_differences)
from tupe_study import flatness, sweep
from tupe_study.endpoint_report import declared_tests, endpoint_lines, write_endpoints_csv
from tupe_study.endpoints import EndpointResult, logged_resolution, parse_endpoints, parse_margin
from tupe_study.markdown import fmt as _f, fmt_p as _p
from tupe_study.longer_inputs import NOT_FOR_ELECTRA, ROPE_SCALED
from tupe_study.noise import DRAWS, span_tests
from tupe_study.runs import split_label
from tupe_study.runs import (ELECTRA_KEYS, Variant, curve_holes, load_study, loss_at, parse_variants, run_section,
                        token_counts)
from tupe_common.errors import UsageError, exit_main
from tupe_common.io import read_data_path, write_csv_atomic, write_text
from tupe_study.stats import entropy_bits, holm, pearson, spearman, spearman_p
from tupe_study.valid_se import section_lines as valid_se_lines, small_split_problem

FRACTIONS = (0.25, 0.5, 0.75, 1.0)
NOPE_TOLERANCE = 1.0  # points: nope's drop on a shuffle must be within this of 0 (it cannot see word order)
SHOW_ALL_PAIRS = 28  # the report lists every pair up to this many (8 variants); beyond, differences.csv does


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def _spread(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return max(values) - min(values) if len(values) > 1 else None


def seed_noise(variants: Sequence[Variant], columns: Sequence[str]) -> Dict[str, Tuple[float, str]]:
    """The pre-training seed's noise measured in this study, per downstream column and for the average
    (``tupe_study.compare.AVERAGE``): the largest spread (max - min) of one model's per-seed score over its pre-training
    seeds (a task: the median over its fine-tuning runs at the chosen LR; the average: the mean of those), among the
    models with two or more seeds; with the model that shows it. Columns no model measures on 2 seeds are absent.
    A difference between two models that is not larger than this can come from the pre-training seed alone."""
    noise: Dict[str, Tuple[float, str]] = {}
    for v in variants:
        for col in list(columns) + [AVERAGE]:
            values = [s.downstream(columns) if col == AVERAGE else s.tasks[col].median
                      for s in v.seeds if col == AVERAGE or col in s.tasks]
            values = [x for x in values if x is not None]
            if len(values) >= 2 and (col not in noise or max(values) - min(values) > noise[col][0]):
                noise[col] = (max(values) - min(values), f"{v.name}, {len(values)} seeds")
    return noise


def beyond_noise(diff: float, column: str, noise: Dict[str, Tuple[float, str]]) -> Optional[bool]:
    """Whether |diff| exceeds the column's seed noise (None: no model of the study measured it)."""
    return abs(diff) > noise[column][0] if column in noise else None


# A discriminator counts as trained when its loss is at least this share below the entropy of the replace rate
# (the loss of a detector that knows only how often tokens are replaced and flags none): docs/study.md.
ELECTRA_MIN_GAIN = 0.10


def rate_entropy_bits(percent: Optional[float]) -> Optional[float]:
    """Entropy in bits of a yes/no label that is "yes" ``percent`` % of the time."""
    if percent is None or math.isnan(percent):
        return None
    p = percent / 100
    return entropy_bits([p, 1 - p]) if 0 < p < 1 else 0.0


def longer_losses(v: Variant, rope_scaling: Optional[str] = None) -> Dict[str, Optional[float]]:
    """{length: mean over seeds of the loss at that length} from the longer-inputs records (with ``rope_scaling``:
    those of the model measured with that RoPE scaling; empty without one)."""
    records = [s.longer if rope_scaling is None else s.rope_scaled.get(rope_scaling) for s in v.seeds]
    records = [r for r in records if r]
    lengths = sorted({int(L) for r in records for L in r["lengths"]})
    return {str(L): _mean([r["lengths"].get(str(L)) for r in records]) for L in lengths}


def variant_row(v: Variant, columns: Sequence[str], total_updates: int, unigram: Optional[float],
                drops: Sequence[OrderDrop]) -> Dict:
    """The study.csv row of a variant: means over its pre-training seeds; per task the median and spread
    over all its fine-tuning runs (pooled over pre-training seeds)."""
    finals = [s.final for s in v.seeds]
    row: Dict = {"variant": v.name, "objective": v.objective, "pretrain_seeds": " ".join(str(s.seed) for s in v.seeds),
                 "final_valid_loss": _mean(finals), "final_valid_loss_spread": _spread(finals),
                 "final_valid_loss_by_seed": " ".join(f"{s.seed}:{s.final:.4f}" for s in v.seeds if s.final is not None),
                 "best_valid_loss": _mean([s.best for s in v.seeds]), "unigram_bits": unigram,
                 "below_unigram_bits": None if unigram is None or _mean(finals) is None else unigram - _mean(finals)}
    for frac in FRACTIONS:
        row[f"loss_at_{int(frac * 100)}pct"] = _mean([loss_at(s.curve, round(frac * total_updates))[0] for s in v.seeds])
    for col in columns:
        pooled = [x for s in v.seeds if col in s.tasks for x in s.tasks[col].scores.values()]
        row[f"{col}_median"] = statistics.median(pooled) if pooled else None
        row[f"{col}_spread"] = max(pooled) - min(pooled) if pooled else None
    by_seed = {s.seed: s.downstream(columns) for s in v.seeds}
    row["downstream_avg"] = _mean(list(by_seed.values())) if None not in by_seed.values() else None
    # what a comparison on one pre-training seed cannot see: how far the average moves with that seed
    row["downstream_avg_by_seed"] = " ".join(f"{k}:{x:.4f}" for k, x in by_seed.items() if x is not None) or None
    row["downstream_avg_seed_spread"] = _spread(list(by_seed.values()))
    for key in ("loc_pos", "sym_pos", "loc_attn", "sym_attn"):
        row[key] = _mean([s.locality.get(key) for s in v.seeds])
    for length, loss in longer_losses(v).items():
        row[f"loss_len{length}"] = loss
    for scaling in ROPE_SCALED:  # a column only where there is a record: a study without any keeps its columns
        for length, loss in longer_losses(v, scaling).items():
            row[f"rope_{scaling}_loss_len{length}"] = loss
    reasons = {s.longer.get("not_beyond") for s in v.seeds if s.longer} - {None}
    row["longer_not_measured"] = NOT_FOR_ELECTRA if v.objective == "electra" else "; ".join(sorted(reasons)) or None
    if v.objective == "electra":  # its own quantities, in their own columns (ELECTRA_KEYS)
        for key in ELECTRA_KEYS:
            row[f"final_{key}"] = _mean([s.electra_final(key) for s in v.seeds])
        for key in ("gen_loss", "disc_loss"):
            row[f"final_{key}_spread"] = _spread([s.electra_final(key) for s in v.seeds])
        gen = row["final_gen_loss"]
        row["gen_below_unigram_bits"] = None if unigram is None or gen is None else unigram - gen
        base = [rate_entropy_bits(s.electra_final("replace_rate")) for s in v.seeds]
        row["disc_rate_entropy_bits"] = _mean(base)
        row["disc_gain"] = _mean([(b - d) / b for b, d in zip(base, (s.electra_final("disc_loss") for s in v.seeds))
                                  if b and d is not None])  # share of the rate's entropy the discriminator removed
    for d in drops:
        if d.variant == v.name:
            row[f"order_drop_{d.column}_{d.perturbation}"] = d.mean
    row["order_drop_random"] = _mean([d.mean for d in drops if d.variant == v.name and d.perturbation == "random"])
    return row


MEASURES = (("loc_pos", "locality (position-only)"), ("sym_pos", "symmetry (position-only)"),
            ("loc_attn", "locality (attention)"), ("sym_attn", "symmetry (attention)"))


def correlations(rows: Sequence[Dict], without: Sequence[str] = ()) -> List[Dict]:
    """Spearman and Pearson of each locality/symmetry column with the downstream average, across the
    variants that have both values (less those named in ``without``); n is stated. Per objective (MLM first):
    across objectives the downstream average moves with the objective, which would masquerade as a property of
    the encoding. Exploratory: the permutation p is unadjusted (``correlation_family`` adds Holm over them all)."""
    out = []
    objectives = sorted({r["objective"] for r in rows}, key=lambda o: o != "mlm") or ["mlm"]
    for objective in objectives:
        these = [r for r in rows if r["objective"] == objective and r["variant"] not in without]
        group = []
        for key, label in MEASURES:
            pts = [(r[key], r["downstream_avg"]) for r in these
                   if r.get(key) is not None and r.get("downstream_avg") is not None]
            x, y = [p[0] for p in pts], [p[1] for p in pts]
            measure = label if objective == "mlm" else f"{label}, {objective} models"
            group.append({"measure": measure + (f", without {', '.join(without)}" if without else ""), "key": key,
                          "objective": objective, "n": len(pts), "without": " ".join(without),
                          "spearman": spearman(x, y) if len(pts) >= 2 else math.nan,
                          "spearman_p": spearman_p(x, y) if len(pts) >= 3 else math.nan,
                          "pearson": pearson(x, y) if len(pts) >= 2 else math.nan})
        out += group
    return out


def correlation_family(corr: Sequence[Dict]) -> List[Dict]:
    """The correlations with ``p_holm``: Holm over every one the report computes that has a p (one family of
    ``family_size``: the measures of every objective, with and without the unfit variants); nan without a p."""
    looks = [i for i, c in enumerate(corr) if not math.isnan(c["spearman_p"])]
    adjusted = dict(zip(looks, holm([corr[i]["spearman_p"] for i in looks])))
    return [{**c, "p_holm": adjusted.get(i, math.nan), "family_size": len(looks)} for i, c in enumerate(corr)]


CORRELATION_COLUMNS = ("measure", "objective", "without", "n", "spearman", "spearman_p", "pearson", "p_holm",
                       "family_size")


def _correlation_table(corr: Sequence[Dict]) -> List[str]:
    L = ["| measure | n variants | Spearman | p (permutation) | Holm p (all correlations) | Pearson |",
         "|---|---|---|---|---|---|"]
    return L + [f"| {c['measure']} | {c['n']} | {_f(c['spearman'])} | {_f(c['spearman_p'])} | {_f(c['p_holm'])} | "
                f"{_f(c['pearson'])} |" for c in corr]


def _correlation_family_lines(corr: Sequence[Dict]) -> List[str]:
    """Which correlations survive Holm over the report's family of them (none without a p)."""
    if not corr or not corr[0]["family_size"]:
        return []
    survive = [c["measure"] for c in corr if c["p_holm"] <= 0.05]
    return [f"Holm p: adjusted over every correlation this report computes, one family of {corr[0]['family_size']} "
            "(each measure of each objective, with and without the unfit variants); below 0.05 after it: "
            + ("; ".join(survive) if survive else "none") + "."]


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a bare | would split the cell (``|j-i|``)."""
    return text.replace("|", "\\|")


DIFFERENCE_COLUMNS = ("a", "b", "task", "difference", "low", "high", "runs", "examples", "pretrain_seeds", "method",
                      "p", "dev_se", "interval", "seed_noise", "beyond_seed_noise", "by_pretrain_seed")
ORDER_COLUMNS = ("variant", "task", "perturbation", "mean_drop", "spread", "runs", "changed", "examples")




# ---- Markdown ---------------------------------------------------------------------------------------------


def _paired_lines(pairs: List[Paired], n_seeds: int, what: str, resolution: float) -> List[str]:
    if not pairs:
        return ["No pairs.", ""]
    shown, L = pairs, []
    if n_seeds >= 2 and len(pairs) > SHOW_ALL_PAIRS:  # one shared seed measures no spread: listed only in small studies
        shown = [p for p in pairs if len(p.diffs) >= 2]
        L += [f"{len(pairs) - len(shown)} of the {len(pairs)} pairs share one pre-training seed: not listed, since one "
              "seed measures no spread (each variant's loss per seed: `final_valid_loss_by_seed` in `study.csv`).", ""]
    seeds = sorted({s for p in shown for s in p.diffs})
    if shown:
        L += ["| a - b | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | SD over seeds | 95% t-interval | p |",
              "|" + "---|" * (len(seeds) + 5)]
    for p in shown:
        t = p.test  # None with one shared seed: nothing to test
        L.append(f"| {p.a} - {p.b} | " + " | ".join(_f(p.diffs.get(s), 4) for s in seeds) + f" | {_f(p.mean, 4)} | "
                 + ("— | — | — |" if t is None else f"{t.sd:.4f} | [{t.low:+.4f}, {t.high:+.4f}] | {_p(t.p)} |"))
    L.append("")
    if n_seeds < 2:
        L.append(f"One pre-training seed: no spread over seeds is measured ({what}); rerun with PRETRAIN_SEEDS=3 or more "
                 "(a t-test over 2 seeds has 1 degree of freedom).")
    else:
        L.append("Exploratory: a t-test over the per-seed differences (n - 1 degrees of freedom, the 95% t-interval of "
                 f"their mean; the spread floored at the logging step, {resolution:g}), p unadjusted. Only the declared "
                 "comparisons above are tested as a family.")
    return L + [""]


def _noise_cell(iv: Interval, noise: Dict[str, Tuple[float, str]]) -> str:
    if iv.column not in noise:
        return "— | not measured"
    return f"{noise[iv.column][0]:.2f} | {'beyond' if beyond_noise(iv.diff, iv.column, noise) else 'within'}"


def _interval_lines(intervals: List[Interval], noise: Optional[Dict[str, Tuple[float, str]]] = None) -> List[str]:
    noise = noise or {}
    if not intervals:
        return ["No pair of variants with paired dev predictions.", ""]
    counts: Dict[str, int] = {}
    methods: Dict[str, int] = {}
    for iv in intervals:
        counts[iv.verdict] = counts.get(iv.verdict, 0) + 1
        methods[iv.method] = methods.get(iv.method, 0) + 1
    m, pairs = len(intervals), len({(iv.a, iv.b) for iv in intervals})
    excluded = sum(iv.excludes_zero for iv in intervals)
    one_seed = sum(iv.seeds < 2 for iv in intervals)
    shown = intervals if pairs <= SHOW_ALL_PAIRS else [iv for iv in intervals if iv.excludes_zero]
    L = ["Exploratory, every one: an interval and an unadjusted p, no verdict beyond what the interval holds (the "
         "declared comparisons above are the report's only tests). Each difference is score(a) - score(b) (points "
         "of the task's metric), paired by (pre-training seed, fine-tuning seed), each run at its model's chosen LR: "
         "per shared pre-training seed the mean over its fine-tuning runs on the whole dev set, then the mean over "
         "those seeds. The pre-training seed is the larger noise, so a difference is measured at the level of the "
         "pre-training seeds the two models share:", "",
         f"- **1 seed**: {PAIRED_BOOTSTRAP} over the dev examples and the fine-tuning runs (95% percentile interval). "
         "It says at most that the dev set tells these two checkpoints apart (**dev set only**), not that another "
         "pre-training would agree: it cannot see the pre-training seed's noise.",
         f"- **2 seeds or more**: {T_TEST}: the 95% interval of the mean over seeds, two half-widths added in "
         "quadrature: the per-seed differences' (t with n - 1 degrees of freedom x s / sqrt(n)) and the dev set's "
         "(the normal's 1.96 x its standard error from the per-example differences; every seed is scored on the "
         "same dev examples, so their spread cannot show that noise). It covers at least 95% whatever the share "
         "of the two; p is where its edge reaches 0.", "",
         f"**{m} comparisons** ({pairs} pairs of models, each on every column and the average); {excluded} intervals "
         f"exclude 0, where about {m * 0.05:.3g} would by chance alone if no two models differed and every interval "
         f"saw all the noise; {one_seed} of them rest on one pre-training seed and cannot see the seeds' noise, so "
         "they exclude 0 more often than that.", "",
         "Methods: " + "; ".join(f"{k}: {n}" for k, n in sorted(methods.items())) + ". "
         "Intervals: " + "; ".join(f"{k}: {n}" for k, n in sorted(counts.items())) + ".", ""]
    if noise:
        beyond = sum(bool(beyond_noise(iv.diff, iv.column, noise)) for iv in intervals)
        L += ["**Seed noise**, beside every difference: the pre-training seed's noise measured in this study, per "
              "column the largest spread (max - min) of one model's score over its own pre-training seeds ("
              + "; ".join(f"{col} {x:.2f} ({who})" for col, (x, who) in noise.items()) + "). A difference within it "
              "can come from the pre-training seed alone, whatever its interval says (an interval from one shared "
              f"seed cannot see that noise); {beyond} of the {m} differences are beyond it. Read no order of the "
              "models from differences within it.", ""]
    else:
        L += ["**Seed noise**: not measured (no model of this study has two or more pre-training seeds with "
              "fine-tuning results), so no difference here can be set against the pre-training seed's noise.", ""]
    if len(shown) < len(intervals):
        L += [f"Only the differences whose interval excludes 0 are listed; all {m} are in `differences.csv`.", ""]
    L += ["| a - b | task | difference | 95% interval | p (unadjusted) | method | runs | per pre-training seed | "
          "interval | seed noise | difference vs seed noise |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for iv in shown:
        seeds = ", ".join(f"{s}: {d:+.2f}" for s, d in sorted(iv.by_seed.items()))
        L.append(f"| {iv.a} - {iv.b} | {iv.column} | {iv.diff:+.2f} | [{iv.low:+.2f}, {iv.high:+.2f}] | {_p(iv.p)} | "
                 f"{iv.method_label} | {iv.runs} | {seeds} | {iv.verdict} | {_noise_cell(iv, noise)} |")
    return L + [""]


def _order_lines(drops: List[OrderDrop]) -> List[str]:
    if not drops:
        return ["No word-order results (the order stage did not run, or ORDER_WINDOWS=none).", ""]
    perts = list(dict.fromkeys(d.perturbation for d in drops))
    cols = list(dict.fromkeys(d.column for d in drops))
    by = {(d.variant, d.column, d.perturbation): d for d in drops}
    variants = list(dict.fromkeys(d.variant for d in drops))
    L = ["Score drop (points) when the dev set's word order is perturbed: original minus perturbed, the mean over "
         "the runs at the chosen LR ± the spread (max - min) over them. `shuffle_n`: words shuffled within "
         "windows of n; `random`: all words shuffled; `role_swap` (NLI tasks): subject and object of entailed "
         "hypotheses swapped, against the same items unswapped.", ""]
    for col in cols:
        here = [p for p in perts if any(d.column == col and d.perturbation == p for d in drops)]
        first = {p: next(d for d in drops if d.column == col and d.perturbation == p) for p in here}
        L += [f"**{col}**", "", "| variant | " + " | ".join(here) + " |", "|" + "---|" * (len(here) + 1)]
        for v in variants:
            cells = [f"{by[(v, col, p)].mean:+.2f} ± {by[(v, col, p)].spread:.2f}" if (v, col, p) in by else "—"
                     for p in here]
            L.append(f"| {v} | " + " | ".join(cells) + " |")
        L += ["", "Examples whose text the perturbation changed, of those it applies to: "
              + ", ".join(f"{p} {first[p].changed} of {first[p].examples}" for p in here) + ".", ""]
    nope = [d for d in drops if split_label(d.variant)[0] == "nope" and d.perturbation.startswith(("shuffle", "random"))]
    if nope:
        bad = [d for d in nope if abs(d.mean) > NOPE_TOLERANCE]
        L += [("**CHECK FAILED:** nope cannot see word order, yet its score moved by "
               + ", ".join(f"{d.mean:+.2f} ({d.variant} {d.column} {d.perturbation})" for d in bad)
               + f" (more than {NOPE_TOLERANCE:g} point): the perturbation or the evaluation is wrong; do not read "
               "this table.") if bad else
              f"Check: nope (no position information) moves by at most {max(abs(d.mean) for d in nope):.2f} points "
              "on the shuffles, as a model blind to word order must.", ""]
    else:
        L += ["(No `nope` in this study: the check that a model blind to word order shows no drop was not made.)", ""]
    return L


def _longer_lines(study: List[Variant], rows: List[Dict]) -> List[str]:
    lengths = sorted({int(L) for v in study for s in v.seeds if s.longer for L in s.longer["lengths"]})
    if len(lengths) < 2:
        return ["Not measured (LENGTH_FACTORS=1, or the longer stage has not run).", ""]
    T = lengths[0]
    L = [f"Validation MLM loss (bits) of the same text cut into blocks of T = {T} tokens (the pre-training length) "
         "and longer, the same tokens masked at every length. Every model was pre-trained with positions for the "
         "longest length; a variant with learned parameters per position or distance never trained those past T, "
         "and is not measured there; an ELECTRA model is not measured at all.", "",
         "| variant | " + " | ".join(f"{L_ // T}T = {L_}" for L_ in lengths) + " | not measured (beyond T, or at all), because |",
         "|" + "---|" * (len(lengths) + 2)]
    for v, r in zip(study, rows):
        L.append(f"| {v.name} | " + " | ".join(_f(r.get(f"loss_len{L_}")) for L_ in lengths)
                 + f" | {_cell(r.get('longer_not_measured') or '')} |")
        for scaling in ROPE_SCALED:
            if any(scaling in s.rope_scaled for s in v.seeds):
                L.append(f"| {v.name}+{scaling} | "
                         + " | ".join(_f(r.get(f"rope_{scaling}_loss_len{L_}")) for L_ in lengths) + " |  |")
    scaled = [f"`{v.name}+{scaling}`" for v in study for scaling in ROPE_SCALED
              if any(scaling in s.rope_scaled for s in v.seeds)]
    if scaled:
        L[2:2] = [f"{', '.join(scaled)}: the checkpoint of the model named before the `+`, evaluated with that RoPE scaling "
                  "(tupe_core/rope.py: linear is position interpolation, ntk the NTK-aware base, yarn YaRN's ramp "
                  "and temperature) at each length L beyond T, by s = L/T; at T the rotation is the trained one, so "
                  "that column is plain RoPE's. Nothing was trained with a scaling.", ""]
    return L + [""]


def weak_variants(rows: Sequence[Dict], unigram: Optional[float], min_gap: float) -> List[str]:
    """The MLM models that did not end ``min_gap`` bits below the unigram baseline (ELECTRA's losses are
    other quantities: the baseline says nothing about them). A model with no finished pre-training is not one of
    them: it is missing, and the report's problems name it."""
    if unigram is None:
        return []
    return [r["variant"] for r in rows if r["objective"] == "mlm"
            and r["below_unigram_bits"] is not None and r["below_unigram_bits"] < min_gap]


def untrained_discriminators(rows: Sequence[Dict]) -> List[str]:
    """The ELECTRA models whose discriminator removed less than ELECTRA_MIN_GAIN of the replace rate's entropy."""
    return [r["variant"] for r in rows if r["objective"] == "electra"
            and (r.get("disc_gain") is None or r["disc_gain"] < ELECTRA_MIN_GAIN)]


def _electra_lines(variants: List[Variant], rows: List[Dict], gen_pairs: List[Paired], resolution: float = 0.0) -> List[str]:
    here = [r for r in rows if r["objective"] == "electra"]
    if not here:
        return []
    L = ["## Pre-training: ELECTRA (generator MLM loss, discriminator loss)", "",
         "The final validation of each ELECTRA run (`--criterion electra`, docs/electra.md), mean over its "
         "pre-training seeds: the generator's MLM loss in bits over the masked tokens and its accuracy there; the "
         "discriminator's loss (binary cross-entropy in bits per non-pad token), its accuracy and the share of the "
         "tokens the generator replaced. These are other quantities than an MLM model's loss (the generator is "
         "1/N of the width; the discriminator's task gets harder as its generator gets better), so they are not in "
         "the MLM tables, the unigram check or the loss comparisons above; the objectives are compared downstream.",
         "", "Two baselines say whether each network learned its task: the generator's loss below the unigram "
         "baseline (as for an MLM model), and the discriminator's loss against the entropy of the replace rate, "
         "what a detector that knows only how often tokens are replaced (and flags none) scores; \"removed\" is "
         "the share of that entropy the discriminator took away, its recall the share of replaced tokens it flagged.",
         "", "| model | generator loss | below unigram | generator acc. (%) | discriminator loss | rate's entropy | "
         "removed (%) | recall (%) | discriminator acc. (%) | replace rate (%) | spread over seeds (gen / disc) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in here:
        gain = None if r["disc_gain"] is None else 100 * r["disc_gain"]
        L.append(f"| {r['variant']} | {_f(r['final_gen_loss'])} | {_f(r['gen_below_unigram_bits'])} | "
                 f"{_f(r['final_gen_acc'], 2)} | {_f(r['final_disc_loss'], 4)} | {_f(r['disc_rate_entropy_bits'], 4)} | "
                 f"{_f(gain, 1)} | {_f(r['final_disc_recall'], 2)} | {_f(r['final_disc_acc'], 2)} | "
                 f"{_f(r['final_replace_rate'], 2)} | {_f(r['final_gen_loss_spread'])} / {_f(r['final_disc_loss_spread'], 4)} |")
    L += [""]
    if len(here) > 1:
        n_seeds = max(len(v.seeds) for v in variants if v.objective == "electra")
        L += ["### Generator loss paired by pre-training seed (row minus column model)", "",
              "Generators of the same size, each the variant's own encoder: their MLM losses compare as the MLM "
              "models' do. The discriminator losses are not ranked: each faces its own generator's replacements.",
              ""] + _paired_lines(gen_pairs, n_seeds, "generator loss", resolution)
    return L


def _within_noise_lines(variants: Sequence[Variant], columns: Sequence[str],
                        noise: Dict[str, Tuple[float, str]]) -> List[str]:
    """Which columns of the fine-tuning table span more than the seed noise across the models (``tupe_study.noise``: an
    order of the models may be read there) and which do not."""
    if not noise:
        return ["No model has two or more pre-training seeds with fine-tuning results: the seed noise is not measured, "
                "so no order of the models in this table can be told from it."]
    keys = {f"{c}_median": c for c in columns} | {"downstream_avg": AVERAGE}
    cells = [f"{keys[k]}: the models span {t.span:.2f}, models with no difference more than {t.limit:.2f} in 5% of "
             f"simulated studies (seed SD {t.sd:.2f}, {t.df} df; p {t.p:.3f}: "
             + ("**beyond the noise**: an order may be read" if t.beyond else "**within the noise**: read no order "
                "of the models") + ")" for k, t in span_tests(variants, list(keys), columns).items()]
    return ["Ranks only beyond the seed noise. Per column the span (max - min) of the models' scores (the mean over "
            "a model's pre-training seeds of its per-seed score) is set against the spans of simulated studies with "
            "no difference between the models, each model with its own number of seeds and every per-seed score "
            "drawn from one normal whose SD is the pooled within-model SD of the models with two or more seeds "
            f"(re-estimated in each simulated study; {DRAWS:,} studies, fixed seed): beyond it when p <= 0.05, a rule "
            "that fires in at most 5% of studies with no difference: " + "; ".join(cells) + "."] if cells else []


def _finetune_lines(rows: List[Dict], columns: List[str], variants: List[Variant], intervals: List[Interval],
                   noise: Dict[str, Tuple[float, str]]) -> List[str]:
    """The fine-tuning section: the table of medians, how to read it, the seed noise and the differences."""
    L = ["## Fine-tuning: median over seeds at the chosen LR (spread = max - min)", ""]
    if columns:
        several = [r for r in rows if r["downstream_avg_seed_spread"] is not None]
        extra = " | average by pre-training seed" if several else ""
        L += ["| variant | " + " | ".join(columns) + f" | average{extra} |", "|" + "---|" * (len(columns) + 2 + bool(several))]
        for r in rows:
            by_seed = ""
            if several:
                by_seed = " | —" if r["downstream_avg_seed_spread"] is None else " | " + ", ".join(
                    f"{seed}: {float(x):.2f}" for seed, x in (p.split(":") for p in r["downstream_avg_by_seed"].split())
                ) + f" (spread {r['downstream_avg_seed_spread']:.2f})"
            L.append(f"| {r['variant']} | " + " | ".join(
                f"{_f(r[f'{c}_median'], 2)} ± {_f(r[f'{c}_spread'], 2)}" for c in columns)
                + f" | {_f(r['downstream_avg'], 2)}{by_seed} |")
        L += ["", "Per model, per LR the median over the fine-tuning seeds, the LR with the best median (MNLI-mm at "
              "MNLI-m's LR), as `tupe_glue.collect`; `± x`: the spread of those seeds' scores (pooled over pre-training "
              "seeds); the average is the mean of the task medians (per pre-training seed, then the mean over them)."]
        if several:
            L += ["The spread of the average over pre-training seeds is what a comparison on one pre-training seed "
                  "cannot see: " + ", ".join(f"{r['variant']} {r['downstream_avg_seed_spread']:.2f}" for r in several)
                  + " points. A difference from one shared pre-training seed that is not larger than these can "
                  "come from the pre-training seed alone."]
        L += [""] + _within_noise_lines(variants, columns, noise)
        L += ["", "### Downstream differences (exploratory), at the level of the pre-training seeds", ""] + _interval_lines(intervals, noise)
    else:
        L += ["No fine-tuning results.", ""]
    return L


def _locality_lines(rows: List[Dict], corr: List[Dict]) -> List[str]:
    """The locality and symmetry section: the table, the correlations with and without the unfit variants."""
    L = ["## Locality and symmetry (Chen et al. 2023) vs the downstream average", "",
          "| variant | locality (pos) | symmetry (pos) | locality (attn) | symmetry (attn) | downstream avg |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['variant']} | {_f(r['loc_pos'])} | {_f(r['sym_pos'])} | {_f(r['loc_attn'])} | "
                 f"{_f(r['sym_attn'])} | {_f(r['downstream_avg'], 2)} |")
    L += [""] + _correlation_table([c for c in corr if not c["without"]])
    corr_without = [c for c in corr if c["without"]]
    if corr_without:
        L += ["", f"Without the variants that failed their own sanity check ({corr_without[0]['without']}: less than "
              "the preset's gap below the unigram baseline, above), whose downstream averages say little about "
              "their encoding:", ""] + _correlation_table(corr_without)
    L += ["", "`—`: undefined (fewer than 2 variants with both values, or one side constant; p needs 3). p: the "
          "share of the pairings of the downstream averages with the variants whose |rho| reaches the observed "
          "one (exact up to n = 7, else 20,000 random pairings), two-sided; it treats each variant's values as "
          "exact, so the dev-set and seed noise of the averages comes on top. Exploratory, outside the declared "
          "comparisons' family: the unadjusted p beside its Holm-adjusted one. With a handful of variants a "
          "correlation is a description, not evidence: at n = 4 even |rho| = 1 has p = 1/12."]
    return L


def report_markdown(rows: List[Dict], columns: List[str], variants: List[Variant], total_updates: int,
                    unigram: Optional[float], min_gap: float, corr: List[Dict], loss_pairs: List[Paired],
                    intervals: List[Interval], drops: List[OrderDrop], problems: List[str], title: str,
                    run: Sequence[str] = (), gen_pairs: Sequence[Paired] = (),
                    endpoints: Sequence[EndpointResult] = (), declared: str = "none", resolution: float = 0.0,
                    sections: Optional[Dict[str, List[str]]] = None) -> str:
    """The report's text; ``sections``: lines of the sections other modules render, by where they go ("sweep" after
    the variants, "flatness" after the pre-training table, "valid_se" after its
    paired differences)."""
    sections = sections or {}
    mlm = [r for r in rows if r["objective"] == "mlm"]
    n_seeds = max((len(v.seeds) for v in variants if v.objective == "mlm"), default=0)
    noise = seed_noise(variants, columns)
    L = [f"# {title}", "", "![overview](overview.png)", ""]
    weak = weak_variants(rows, unigram, min_gap)
    if weak:
        L += [f"> **WARNING: not fit for purpose.** {', '.join(weak)} did not end at least {min_gap:g} bit(s) below "
              f"the unigram baseline ({unigram:.3f} bits): such a model barely uses context, so differences "
              "between positional encodings say little. Use more updates or a bigger preset.", ""]
    untrained = untrained_discriminators(rows)
    if untrained:
        L += [f"> **WARNING: ELECTRA not trained yet.** The discriminator of {', '.join(untrained)} ended less than "
              f"{100 * ELECTRA_MIN_GAIN:g}% below the entropy of the replace rate (the loss of a detector that flags "
              "no token): it has barely learned replaced-token detection, so its downstream scores are those of an "
              "encoder its own objective hardly trained, and ELECTRA-vs-MLM differences say little. Use more "
              "updates or a bigger preset.", ""]
    L += ["## Variants", "", "| variant | what it is | objective | pre-training seeds |", "|---|---|---|---|"]
    L += [f"| {v.name} | {_cell(v.about) or '—'} | {v.objective} | {', '.join(str(s.seed) for s in v.seeds)} |"
          for v in variants]
    L += [""] + sections.get("sweep", [])
    L += ["## Declared comparisons (confirmatory)", ""] + endpoint_lines(endpoints, declared, total_updates)
    L += ["## Pre-training: validation MLM loss (bits)", "",
          f"Unigram baseline (entropy of the training tokens, what a model ignoring context scores): "
          f"**{_f(unigram)} bits**. Budget: {total_updates} updates; the same data order, masks and seed for "
          "every variant.", "",
          "| variant | final | best | below unigram | " + " | ".join(f"@{int(f * 100)}%" for f in FRACTIONS)
          + " | spread over seeds |", "|" + "---|" * (5 + len(FRACTIONS))]
    for r in mlm:
        L.append(f"| {r['variant']} | {_f(r['final_valid_loss'], 4)} | {_f(r['best_valid_loss'], 4)} | "
                 f"{_f(r['below_unigram_bits'], 4)} | "
                 + " | ".join(_f(r[f'loss_at_{int(f * 100)}pct'], 4) for f in FRACTIONS)
                 + f" | {_f(r['final_valid_loss_spread'], 4)} |")
    seed_sets = {v.name: [s.seed for s in v.seeds] for v in variants if v.objective == "mlm"}
    if len({tuple(x) for x in seed_sets.values()}) > 1:
        L += ["", "A variant's loss is the mean over its own seeds; the paired table below compares the seeds both "
              "variants have.", ""]
    else:
        L += ["", f"Pre-training seeds per variant: {n_seeds}. Losses are means over them.", ""]
    L += sections.get("flatness", [])
    L += ["### Differences paired by pre-training seed (final validation loss, row minus column variant; exploratory)",
          ""]
    L += _paired_lines(loss_pairs, n_seeds, "loss", resolution) + sections.get("valid_se", [])  # none without its data
    L += _electra_lines(variants, rows, list(gen_pairs), resolution)
    L += ["## Longer inputs", ""] + _longer_lines(variants, rows)
    L += _finetune_lines(rows, columns, variants, intervals, noise)
    L += ["## Word-order sensitivity", ""] + _order_lines(drops)
    L += _locality_lines(rows, corr)
    L += _correlation_family_lines(corr) + ["", "## Missing parts and problems", ""]
    L += [f"- {p}" for p in problems] or ["- none"]
    L += [""] + list(run)
    return "\n".join(L).rstrip("\n") + "\n"


# ---- the command ------------------------------------------------------------------------------------------


def unigram_baseline(out: str, data: Optional[str] = None) -> float:
    """The entropy (bits) of the training tokens of ``data`` (a fairseq data path or a folder with data_path.txt;
    default OUT/c4/data-bin): the MLM loss of a model that ignores context."""
    return entropy_bits(token_counts(":".join(read_data_path(data or os.path.join(out, "c4", "data-bin")))))


def leave_out_unfit_curves(study: Sequence[Variant], total_updates: int, valid_interval: int,
                           problems: List[str]) -> None:
    """Name among ``problems``, and leave out, each pre-training whose losses cannot be read as final: a NaN or
    infinite loss (diverged), a last validation before the budget (unfinished); name the holes of a curve."""
    for model in study:
        for run in model.seeds:
            logged = run.curve or run.electra.get(ELECTRA_KEYS[0], {})
            diverged = [u for u, x in sorted(logged.items()) if not math.isfinite(x)]
            if diverged:  # a NaN or infinite loss: named, left out, and the report goes on
                problems.append(f"{model.name} seed {run.seed}: validation loss {logged[diverged[0]]} at update "
                                f"{diverged[0]} (diverged): its losses are left out of every table and test")
                run.curve, run.electra = {}, {}
                continue
            if logged and max(logged) < total_updates:  # still running, or stopped: its last loss is no final
                problems.append(f"{model.name} seed {run.seed}: pre-training unfinished (last validation at update "
                                f"{max(logged)} of {total_updates}): its losses are left out until it finishes")
                run.curve, run.electra = {}, {}
                continue
            holes = curve_holes(logged, valid_interval, total_updates)
            if holes:
                problems.append(f"{model.name} seed {run.seed}: no validation logged at update(s) "
                                f"{', '.join(map(str, holes))}, so its curve points there are read from the nearest "
                                "validation (a resumed run's log lost the lines before its kill, before 24674e3)")


def write_tables(out: str, rows: List[Dict], corr: List[Dict], study: Sequence[Variant], columns: Sequence[str],
                 intervals: Sequence[Interval], endpoints: Sequence[EndpointResult], declared: Sequence,
                 drops: Sequence[OrderDrop]) -> None:
    """study.csv, correlation.csv, differences.csv, endpoints.csv and order.csv into ``out``."""
    write_csv_atomic(os.path.join(out, "study.csv"), rows)
    write_csv_atomic(os.path.join(out, "correlation.csv"),
                     [{k: c[k] for k in CORRELATION_COLUMNS} for c in corr], CORRELATION_COLUMNS)
    noise = seed_noise(study, columns)
    write_csv_atomic(os.path.join(out, "differences.csv"),
                     [{"a": iv.a, "b": iv.b, "task": iv.column, "difference": iv.diff, "low": iv.low, "high": iv.high,
                       "runs": iv.runs, "examples": iv.examples, "pretrain_seeds": iv.seeds, "method": iv.method,
                       "p": iv.p, "dev_se": iv.dev_se, "interval": iv.verdict,
                       "seed_noise": noise[iv.column][0] if iv.column in noise else None,
                       "beyond_seed_noise": beyond_noise(iv.diff, iv.column, noise),
                       "by_pretrain_seed": " ".join(f"{s}:{d:.4f}" for s, d in sorted(iv.by_seed.items()))}
                      for iv in intervals], DIFFERENCE_COLUMNS)
    write_endpoints_csv(os.path.join(out, "endpoints.csv"), endpoints, declared)
    write_csv_atomic(os.path.join(out, "order.csv"),
                     [{"variant": d.variant, "task": d.column, "perturbation": d.perturbation, "mean_drop": d.mean,
                       "spread": d.spread, "runs": len(d.drops), "changed": d.changed, "examples": d.examples}
                      for d in drops], ORDER_COLUMNS)


def parser() -> argparse.ArgumentParser:
    """The command's arguments (tupe_study.stages.report_argv writes them; an archive's report.json keeps them)."""
    p = argparse.ArgumentParser(prog="python -m tupe_study.report", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the study folder (OUT of train_scripts/study.sh)")
    p.add_argument("--variants", required=True, help="model labels in report order, space-separated (a variant, "
                   "or V+electra for its ELECTRA model); NAME:S1,S2 gives a model its own pre-training seeds")
    p.add_argument("--pretrain-seeds", default="1", help="pre-training seeds of the variants without their own (default 1)")
    p.add_argument("--total-updates", type=int, required=True, help="pre-training budget in updates")
    p.add_argument("--data", help="fairseq data path a:b:c or a folder with data_path.txt (unigram baseline; "
                                  "default OUT/c4/data-bin)")
    p.add_argument("--valid-interval", type=int, default=0,
                   help="updates between validations (study.sh: TOTAL_UPDATES / VALID_POINTS): a curve that lacks one "
                        "is named among the report's problems (default 0: not checked)")
    p.add_argument("--unigram-bits", type=float, help="the unigram baseline in bits, instead of computing it from "
                   "--data (an archive of the study keeps it, not the data: tupe_study.archive)")
    p.add_argument("--min-gap-bits", type=float, default=1.0,
                   help="warn unless every variant ends this many bits below the unigram baseline (default 1)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--finetune-grid", metavar="TASKS:LRS:SEEDS",
                   help="the fine-tuning runs every model should have, e.g. SST-2,RTE:1e-5,2e-5:1,2,3; "
                        "the report names each model seed that lacks some (default: only those with none); none: the "
                        "study fine-tunes nothing (TASKS=none), so no run is missing")
    p.add_argument("--endpoints", default="none", help="the declared comparisons, MEASURE:A:B or "
                   "updates_to@TARGET:A:B ... (tupe_study/endpoints.py; default none: everything exploratory)")
    p.add_argument("--updates-to-target", type=float, metavar="BITS",
                   help="the resolved target of updates_to@halfway endpoints, in bits (tupe_study.endpoints.halfway_target); "
                        "without it they are not tested")
    p.add_argument("--equivalence-bits", default="none", help="the declared equivalence margin in bits (default none)")
    p.add_argument("--warmup", type=int, help="pre-training warmup updates (the LR schedule that the flatness check "
                   "weighs the loss changes by; default: WARMUP of OUT/settings.env, else 0)")
    p.add_argument("--title", default="Study report")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    from tupe_common.io import need

    need(args.out, "folder")  # a study folder that is not there, or a file: one line naming it, exit 1
    seeds = [int(s) for s in args.pretrain_seeds.replace(",", " ").split()]
    try:
        variants = parse_variants(args.variants, seeds)
    except ValueError as e:
        p.error(str(e))
    grid = None
    if args.finetune_grid == "none":
        grid = ([], [], [])
    elif args.finetune_grid:
        lists = [x.split(",") for x in args.finetune_grid.split(":")]
        try:
            if len(lists) != 3 or not all(all(items) for items in lists):
                raise ValueError
            for lr in lists[1]:
                float(lr)  # a number, kept as written for the report
            grid = (lists[0], lists[1], [int(k) for k in lists[2]])
        except ValueError:
            p.error(f"--finetune-grid {args.finetune_grid!r}: write TASK,TASK:LR,LR:SEED,SEED")
    problems: List[str] = []
    unigram: Optional[float] = args.unigram_bits
    if unigram is None:
        try:
            unigram = unigram_baseline(args.out, args.data)
        except (OSError, ValueError) as e:
            problems.append(f"unigram baseline not computed: {e}")
    study = load_study(args.out, variants, problems, grid)
    leave_out_unfit_curves(study, args.total_updates, args.valid_interval, problems)
    columns = sorted({c for v in study for s in v.seeds for c in s.tasks})
    drops = order_drops(study, problems)
    rows = [variant_row(v, columns, args.total_updates, unigram, drops) for v in study]
    weak = weak_variants(rows, unigram, args.min_gap_bits)
    corr = correlation_family(correlations(rows) + (correlations(rows, weak) if weak else []))
    mlm = [v for v in study if v.objective == "mlm"]
    resolution = logged_resolution([x for v in study for s in v.seeds
                                    for x in list(s.curve.values()) + list(s.electra.get("gen_loss", {}).values())])
    loss_pairs = paired_differences({v.name: {s.seed: s.final for s in v.seeds if s.final is not None} for v in mlm},
                                    resolution)
    gen_pairs = paired_differences({v.name: {s.seed: s.electra_final("gen_loss") for s in v.seeds
                                             if s.electra_final("gen_loss") is not None}
                                    for v in study if v.objective == "electra"}, resolution)
    intervals = bootstrap_pairs(study, columns, problems, args.resamples)  # every model, whatever its objective
    try:
        declared = parse_endpoints(args.endpoints, {v.name: [s.seed for s in v.seeds] for v in mlm})
        margin = parse_margin(args.equivalence_bits)
    except UsageError as e:
        p.error(str(e))
    halfway = args.updates_to_target
    if halfway is not None and not (halfway > 0 and math.isfinite(halfway)):
        p.error(f"--updates-to-target {halfway:g}: give the resolved target, a positive number of bits")
    finished = {v.name: [s for s in v.seeds if s.curve and max(s.curve) >= args.total_updates] for v in mlm}
    endpoints = declared_tests(declared, finished, args.total_updates, resolution, margin, halfway)
    problems += [x for x in [small_split_problem(args.out)] if x]
    sections = {"valid_se": valid_se_lines(args.out, mlm, declared, margin),
                "sweep": sweep.report_section(args.out, [v.name for v in mlm], args.total_updates, declared, finished),
                "flatness": flatness.report_section(finished, declared, flatness.recorded_warmup(args.out, args.warmup),
                                                    args.total_updates)}
    md = report_markdown(rows, columns, study, args.total_updates, unigram, args.min_gap_bits, corr, loss_pairs,
                         intervals, drops, problems, args.title, run_section(args.out), gen_pairs, endpoints,
                         args.endpoints, resolution, sections)
    write_tables(args.out, rows, corr, study, columns, intervals, endpoints, declared, drops)
    write_text(os.path.join(args.out, "report.md"), md)
    from tupe_study.figure import overview

    overview(os.path.join(args.out, "overview.png"), study, rows, columns, [c for c in corr if not c["without"]],
             unigram, endpoints, weak)
    print(md, end="")
    if weak:
        print(f"\nWARNING: {', '.join(weak)} did not end {args.min_gap_bits:g} bit(s) below the unigram baseline "
              f"({unigram:.3f} bits): this preset is not fit for comparing positional encodings.", file=sys.stderr)
    untrained = untrained_discriminators(rows)
    if untrained:
        print(f"\nWARNING: the discriminator of {', '.join(untrained)} ended less than {100 * ELECTRA_MIN_GAIN:g}% "
              "below the entropy of the replace rate: ELECTRA is not trained yet at this preset.", file=sys.stderr)
    print(f"\nwrote {args.out}/report.md, study.csv, endpoints.csv, correlation.csv, differences.csv, order.csv, overview.png",
          file=sys.stderr)
    return 0


def cli() -> None:
    """The console script ``tupe-study-report``."""
    exit_main(main, "tupe-study-report")


if __name__ == "__main__":
    exit_main(main, "python -m tupe_study.report")
