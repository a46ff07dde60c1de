"""``study.sh --plan PILOT``: before a study runs, how many pre-training seeds each declared comparison needs, and
what the study will cost.

PILOT is an earlier study's folder (its pre-training logs and ``timings.tsv``) or a published ``study.csv``
(``final_valid_loss_by_seed``: the final loss only). For every declared comparison (``ENDPOINTS``) the pilot's
per-seed differences give an effect size d = |mean| / SD; the seeds needed are the fewest n whose paired t-test
(two-sided, n - 1 degrees of freedom) rejects with 80% and 90% power, at the level the declared family's first
Holm step asks (0.05 / the family's size; conservative for the later steps). Power is exact: the noncentral t's
tail, integrated over the chi-square of the sample variance. The pilot's effect is an estimate from a few seeds
too: the seeds needed are a guide, not a guarantee. Run the study on fresh seeds, not the pilot's, so that its
answer is not tuned to them.
"""
from __future__ import annotations

import csv
import math
import os
import statistics
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_study.endpoints import UPDATES_TO, Endpoint, curve_auc
from tupe_study.stats import t_quantile
from tupe_common.errors import UsageError

MAX_SEEDS = 100  # beyond this the plan says "more than 100"
SEED_COUNTS = (3, 6, 10)  # the power shown when the study's seeds are not declared yet


def _normal_sf(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2))


def paired_t_power(effect: float, n: int, alpha: float = 0.05, steps: int = 4000) -> float:
    """Power of the two-sided one-sample t-test at level ``alpha`` over n values whose true mean is ``effect``
    standard deviations from 0 (normal values): P(|T| > t_{1 - alpha/2, n-1}) where T = (Z + d sqrt n) / sqrt(V / df),
    V chi-square with df = n - 1. Integrated over S = sqrt(V) (Simpson's rule out to where its density is nil), whose
    density s^(df-1) e^(-s^2/2) / (2^(df/2-1) Gamma(df/2)) stays finite at 0 even for df = 1."""
    if n < 2:
        raise ValueError(f"a t-test needs 2 or more values, got {n}")
    df, shift = n - 1, abs(effect) * math.sqrt(n)
    c = t_quantile(1 - alpha / 2, df)
    high = math.sqrt(df + 40 * math.sqrt(2 * df) + 40)
    h = high / steps
    log_norm = (df / 2 - 1) * math.log(2) + math.lgamma(df / 2)
    total = 0.0
    for i in range(steps + 1):
        s = i * h
        if s == 0:
            density = math.exp(-log_norm) if df == 1 else 0.0
        else:
            density = math.exp((df - 1) * math.log(s) - s * s / 2 - log_norm)
        bound = c * s / math.sqrt(df)
        reject = _normal_sf(bound - shift) + _normal_sf(bound + shift)  # P(Z + shift > bound) + P(Z + shift < -bound)
        total += (1 if i in (0, steps) else 4 if i % 2 else 2) * density * reject
    return min(1.0, total * h / 3)


def seeds_needed(effect: float, power: float, alpha: float) -> Optional[int]:
    """The fewest seeds (2..MAX_SEEDS) whose paired t-test reaches ``power``; None beyond MAX_SEEDS."""
    if effect == 0 or math.isnan(effect):
        return None
    for n in range(2, MAX_SEEDS + 1):
        if paired_t_power(effect, n, alpha) >= power:
            return n
    return None


LOSSES = "final_valid_loss_by_seed"  # a study.csv's per-seed final losses: "1:8.8430 2:8.7720"
CSV_COLUMNS = ("variant", LOSSES)  # what --plan reads of a study.csv


def needed_text(mean: float, sd: float, family: int) -> str:
    """How many seeds the effect measured so far (d = |mean| / SD) needs for 80% power in the declared family."""
    if sd <= 0:
        return "no spread measured"
    n = seeds_needed(abs(mean) / sd, 0.8, 0.05 / family)
    return f"d = {abs(mean) / sd:.2f}: " + (f"{n} seeds for 80% power" if n else f"more than {MAX_SEEDS} seeds for 80% power")


def seed_losses(cell: str, where: str) -> Dict[int, float]:
    """{seed: loss} of a ``final_valid_loss_by_seed`` cell; anything else a UsageError naming ``where``."""
    try:
        return {int(seed): float(loss) for seed, loss in (p.split(":") for p in cell.split())}
    except ValueError:
        raise UsageError(f"{where}: {LOSSES} is '{cell}', not SEED:LOSS pairs (e.g. '1:8.8430 2:8.7720')") from None


def pilot_values(pilot: str, models: Sequence[str]) -> Tuple[Dict[str, Dict[str, Dict[int, float]]], str]:
    """{measure: {model: {seed: value}}} from a pilot: a study folder (each model's pre-training logs, every seed
    whose log has a validation; final_loss and loss_auc) or a study.csv (final_loss only); and what was read."""
    from tupe_study.runs import parse_valid_curve

    out: Dict[str, Dict[str, Dict[int, float]]] = {"final_loss": {}, "loss_auc": {}}
    if os.path.isfile(pilot):
        with open(pilot, encoding="utf-8", newline="") as f:
            rows = csv.DictReader(f)
            missing = [c for c in CSV_COLUMNS if c not in (rows.fieldnames or [])]
            if missing:
                raise UsageError(f"--plan {pilot}: no column '{missing[0]}' (its columns: "
                                 f"{', '.join(rows.fieldnames or []) or 'none'}); give a study's study.csv (the "
                                 "report's, with per-seed final losses) or the study's folder")
            for line, row in enumerate(rows, 2):
                if row["variant"] in models and row[LOSSES]:
                    out["final_loss"][row["variant"]] = seed_losses(row[LOSSES], f"--plan {pilot}: line {line}")
        return out, f"{pilot} (final losses per seed; no curves, so no loss_auc)"
    curves: Dict[Tuple[str, int], Dict[int, float]] = {}
    for model in models:
        folder = os.path.join(pilot, "pretrain", model)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            log = os.path.join(folder, name, "train.log")
            if name.startswith("seed") and name[4:].isdigit() and os.path.isfile(log):
                curve = parse_valid_curve(log)
                if curve:
                    curves[model, int(name[4:])] = curve
    budget = max((max(c) for c in curves.values()), default=0)  # the pilot's last update: every finished run's
    for (model, seed), curve in curves.items():
        if max(curve) == budget:  # a run that stopped earlier (a kill, still running) has no final loss yet
            out["final_loss"].setdefault(model, {})[seed] = curve[budget]
            auc = curve_auc(curve)
            if auc is not None:
                out["loss_auc"].setdefault(model, {})[seed] = auc
    unfinished = sorted(f"{model} seed {seed}" for (model, seed), c in curves.items() if max(c) < budget)
    return out, f"{pilot}/pretrain/*/seed*/train.log" + (
        f" (left out, unfinished before update {budget}: {', '.join(unfinished)})" if unfinished else "")


def pretrain_seconds(pilot: str) -> List[int]:
    """The pilot's pre-training part times (its ``timings.tsv``), or [] when it has none."""
    from tupe_study.timings import part_times

    return [t.seconds for t in part_times(pilot) if t.stage == "pretrain"]  # a CSV pilot: no such file, []


def plan_text(endpoints: Sequence[Endpoint], values: Mapping[str, Mapping[str, Mapping[int, float]]], source: str,
              seconds: Sequence[int], models: int, seeds: Optional[int], lanes: int = 2) -> str:
    """The plan: per declared comparison the pilot's per-seed differences, d, and the seeds for 80% and 90% power,
    and the power with the study's ``seeds`` (None, no seeds declared: with each of SEED_COUNTS seeds); then the
    pre-training time of ``models`` x ``seeds`` (per seed when None) at the pilot's pace."""
    m = len(endpoints)
    alpha = 0.05 / m
    counts = [seeds] if seeds is not None else list(SEED_COUNTS)
    L = [f"Pilot: {source}.", f"Declared family: {m} comparison(s); power at the first Holm step, alpha = 0.05 / {m} "
         f"= {alpha:.4g} (two-sided paired t-test over pre-training seeds)."]
    if seeds is None:
        L.append(f"No seeds declared (PRETRAIN_SEEDS and VARIANTS unset): the power is given per seed count, with "
                 f"{', '.join(map(str, counts))} seeds.")
    L += ["", "comparison | pilot seeds | per-seed differences | mean | SD | d = |mean|/SD | seeds for 80% | seeds for "
          f"90% | power with {' / '.join(map(str, counts))} seeds"]
    for e in endpoints:
        if e.measure == UPDATES_TO:
            L.append(f"{e.label} | — | — | — | — | — | — | — | — (a sign test over seeds: this t-test plan does not "
                     "apply to it)")
            continue
        a, b = values.get(e.measure, {}).get(e.a, {}), values.get(e.measure, {}).get(e.b, {})
        diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
        if len(diffs) < 2:
            L.append(f"{e.label} | {len(diffs)} | — | — | — | — | — | — | — (the pilot needs 2 or more shared seeds)")
            continue
        mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
        d = abs(mean) / sd if sd > 0 else math.inf
        need = ["—" if math.isinf(d) else str(seeds_needed(d, p, alpha) or f"more than {MAX_SEEDS}") for p in (0.8, 0.9)]
        now = " / ".join("—" if math.isinf(d) or n < 2 else f"{paired_t_power(d, n, alpha):.2f}" for n in counts)
        L.append(f"{e.label} | {len(diffs)} | {', '.join(f'{x:+.4f}' for x in diffs)} | {mean:+.4f} | {sd:.4f} | "
                 f"{d:.2f} | {need[0]} | {need[1]} | {now}")
    L.append("")
    if seconds and seeds is None:
        each = statistics.mean(seconds)
        total = models * each
        L.append(f"Pre-training: {models} model(s) at about {each / 60:.1f} min per run (the pilot's mean over "
                 f"{len(seconds)} part(s)): {total / 3600:.1f} h of part time per seed, about {total / lanes / 3600:.1f} "
                 f"h with --lanes {lanes} (on the pilot's machine, as busy as it was).")
    elif seconds:
        each = statistics.mean(seconds)
        total = models * seeds * each
        L.append(f"Pre-training: {models} model(s) x {seeds} seed(s) = {models * seeds} runs of about {each / 60:.1f} "
                 f"min each (the pilot's mean over {len(seconds)} part(s)): {total / 3600:.1f} h of part time, about "
                 f"{total / lanes / 3600:.1f} h with --lanes {lanes} (on the pilot's machine, as busy as it was).")
    else:
        L.append("Pre-training time: the pilot has no timings.tsv (give a study folder as PILOT to estimate it).")
    return "\n".join(L) + "\n"
