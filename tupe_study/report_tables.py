"""The report's numbers (``tupe_study.report`` renders them): a variant's row of ``study.csv`` (means over its
pre-training seeds), the seed noise, the correlations of locality and symmetry with the downstream average (one
Holm family), the checks that a model was fit to compare (the unigram gap, ELECTRA's discriminator) and the CSVs
(``write_tables``)."""
from __future__ import annotations

import math
import os
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from tupe_study.compare import AVERAGE, Interval, OrderDrop
from tupe_study.endpoint_report import write_endpoints_csv
from tupe_study.endpoints import EndpointResult
from tupe_study.longer_inputs import NOT_FOR_ELECTRA, ROPE_SCALED
from tupe_study.runs import ELECTRA_KEYS, Variant, loss_at
from tupe_common.io import write_csv_atomic
from tupe_study.stats import entropy_bits, holm, pearson, spearman, spearman_p

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


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


DIFFERENCE_COLUMNS = ("a", "b", "task", "difference", "low", "high", "runs", "examples", "pretrain_seeds", "method",
                      "p", "dev_se", "interval", "seed_noise", "beyond_seed_noise", "by_pretrain_seed")
ORDER_COLUMNS = ("variant", "task", "perturbation", "mean_drop", "spread", "runs", "changed", "examples")


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
