"""A folder of GLUE fine-tuning runs -> the TUPE paper's results table (Markdown, CSV, PNG).

Run layout (one folder per task, one sub-folder per learning rate and seed)::

    RUNS_DIR/TASK/lr{LR}_seed{SEED}/result.json          # preferred, written by the fine-tuning script
    RUNS_DIR/TASK/lr{LR}_seed{SEED}/train.log            # or a fairseq log (train.log / hydra_train.log)

``TASK`` is the GLUE folder name (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI); ``LR`` is
any float spelling (``2e-5``, ``2e-05``, ``0.00002``), read by value: two folders of one LR and seed
(``lr1e-3_seed1``, ``lr0.001_seed1``) are one run twice, a problem, and neither is counted. ``result.json``::

    {"task": "MNLI", "lr": 2e-05, "seed": 1, "metric": "accuracy",
     "best_valid": {"valid": 84.9, "valid1": 85.1}, "checkpoint_variant": "tupe_r"}

``best_valid`` maps a fairseq valid subset to the best score of the run on the 0-100 scale fairseq logs
(a value may also be ``{"accuracy": 84.9}``); add ``"scale": "fraction"`` if values are in [0, 1].
From a fairseq log, the score is read as result.json's is made: the best validation of the first subset.

Protocol (``docs/glue_protocol.md`` §3 and §5; the task facts come from ``tupe_glue.tasks``): metric MCC
for CoLA, Pearson for STS-B, accuracy otherwise (custom single-sentence tasks too); MNLI-m is subset
``valid`` and MNLI-mm ``valid1``. A seed's score is its best dev score during training; for MNLI the best
validation is chosen on MNLI-m and MNLI-mm is read at that same validation (as the official code keeps
one best checkpoint). Per column, the median over seeds is taken for each LR and the best LR's median
reported (each column picks its own LR, except MNLI-mm, reported at MNLI-m's best LR). Only the expected grid
counts (``--expected-lrs``, ``--expected-seeds``): a run at another LR or seed is listed, never counted, and more
seeds than ``--seeds`` at an LR leave the column incomplete. One table is one checkpoint, and one task's runs share
every recorded setting (result.json's ``inputs``): runs of another checkpoint or settings are refused. Avg is the plain
mean of the 9 columns, printed only when every column has its full grid of runs; anything missing,
and every run that cannot be read, is listed, never averaged over. Scores are kept unrounded; the table
prints 2 decimals, as the paper.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_glue.published import COLUMNS, COMPARE, SOURCE, TABLE1
from tupe_glue.tasks import (METRIC, PAPER_LRS, PAPER_SEEDS, TASKS, GlueTask, custom_task, get_task,  # noqa: F401 (METRIC)
                        table_columns)
from tupe_common import fairseq_log
from tupe_common.errors import command_name, UsageError, exit_main
from tupe_glue.selection import column_lr
from tupe_common.io import atomic_open, atomic_path, need
from tupe_common.log import get_logger
from tupe_common.numbers import by_value, check_once, same_number, short, spelling

log = get_logger("collect")

RUN_FOLDER = "lr{}_seed{}"  # a run's folder under RUNS/TASK/ (tupe_common.numbers.named: one per LR and seed value)


@dataclass(frozen=True)
class Column:
    name: str  # the paper's column name (or the task's name)
    task: str  # GLUE folder name
    subset: str  # fairseq valid subset
    metric: str  # fairseq metric name
    lr_from: Optional[str] = None  # report at the best LR of this column (MNLI-mm: MNLI-m)


def task_columns(task: GlueTask) -> Tuple[Column, ...]:
    return tuple(Column(c.name, task.name, c.subset, task.metric, c.lr_from) for c in task.columns)


TABLE_COLUMNS: Tuple[Column, ...] = tuple(Column(c.name, t.name, c.subset, t.metric, c.lr_from)
                                          for t, c in table_columns(COLUMNS))
EXTRA_COLUMNS: Tuple[Column, ...] = task_columns(TASKS["WNLI"])  # shown per LR when present, never averaged
LOG_NAMES = ("train.log", "hydra_train.log")


@dataclass
class Run:
    task: str
    lr: float
    seed: int
    path: str
    scores: Dict[str, float]  # subset -> best score (0-100)


# --------------------------------------------------------------------------------------------
# Reading runs
# --------------------------------------------------------------------------------------------

def _as_float(value) -> Optional[float]:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Validation:
    subset: str
    step: Optional[int]  # num_updates of the validation (None when the log line does not say)
    value: float


def parse_validations(path: str, metric: str) -> List[Validation]:
    """Every finite ``metric`` of a validation in a fairseq log (simple, tqdm or json format), in order."""
    found: List[Validation] = []

    def seen(subset: str, value, step) -> None:
        x, n = _as_float(value), _as_float(step)
        if x is not None:
            found.append(Validation(subset, None if n is None else int(n), x))

    for stats in fairseq_log.statistics(path):
        if not stats.kind.startswith("train") and metric in stats.values:
            seen(stats.kind, stats.values[metric], stats.values.get("num_updates"))
    return found


def select_best(validations: Sequence[Validation], subsets: Sequence[str]) -> Tuple[Dict[str, float], Optional[int]]:
    """The best validation of ``subsets[0]`` and every subset's score at that same validation.

    Ties go to the later validation (fairseq replaces ``checkpoint_best.pt`` when a score is >= the best).
    The other subsets are matched by ``num_updates``, or by position when the log has no steps.
    Returns ({subset: score}, step); a subset not validated at that step is left out.
    """
    primary = [v for v in validations if v.subset == subsets[0]]
    if not primary:
        return {}, None
    k = max(range(len(primary)), key=lambda i: (primary[i].value, i))
    best = primary[k]
    scores = {best.subset: best.value}
    for subset in subsets[1:]:
        others = [v for v in validations if v.subset == subset]
        if best.step is not None:
            same = [v for v in others if v.step == best.step]
        else:
            same = others[k:k + 1]
        if same:
            scores[subset] = same[-1].value
    return scores, best.step


# The range of each metric on the 0-100 scale: a score outside it is a broken result.json, never a table entry.
METRIC_RANGE = {"accuracy": (0.0, 100.0), "f1": (0.0, 100.0), "mcc": (-100.0, 100.0), "pearson": (-100.0, 100.0),
                "spearman": (-100.0, 100.0)}


def read_result_json(path: str, task: str, metric: str) -> Dict[str, float]:
    """Scores per subset from a ``result.json``; raises ValueError saying what is wrong."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON (line {e.lineno}): {e.msg}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("task", task) != task:
        raise ValueError(f"says task {data['task']!r} but lies under {task}/")
    if data.get("metric", metric) != metric:
        raise ValueError(f"reports {data['metric']!r}; the paper's metric for {task} is {metric!r}")
    scale = {"fraction": 100.0, "percent": 1.0}.get(data.get("scale", "percent"))
    if scale is None:
        raise ValueError(f"unknown scale {data['scale']!r} (use 'percent' or 'fraction')")
    best_valid = data.get("best_valid")
    if not isinstance(best_valid, dict) or not best_valid:
        raise ValueError('has no "best_valid" object')
    scores = {}
    for subset, value in best_valid.items():
        x = _as_float(value.get(metric) if isinstance(value, dict) else value)
        if x is None:
            raise ValueError(f"best_valid[{subset!r}] is not a number: {value!r}")
        low, high = METRIC_RANGE.get(metric, (-math.inf, math.inf))
        if not low <= x * scale <= high:
            raise ValueError(f"best_valid[{subset!r}] = {value!r} is outside {metric}'s range [{low:g}, {high:g}] on "
                             f"the {data.get('scale', 'percent')} scale")
        scores[subset] = x * scale
    return scores


def read_run(task: str, run_dir: str, metric: str) -> Dict[str, float]:
    """Scores per valid subset of one run, from its ``result.json`` or else its fairseq log."""
    result = os.path.join(run_dir, "result.json")
    if os.path.isfile(result):
        try:
            return read_result_json(result, task, metric)
        except (OSError, ValueError) as e:
            raise ValueError(f"{result}: unreadable run ({e}); tupe-grid redoes it") from None
    subsets = get_task(task, custom=True).valid_subsets
    for name in LOG_NAMES:
        log = os.path.join(run_dir, name)
        if os.path.isfile(log):
            scores, _ = select_best(parse_validations(log, metric), subsets)
            if not scores:
                raise ValueError(f"{log}: no validation line with {metric!r} for subset {subsets[0]!r} (unfinished "
                                 f"run, or a criterion that does not report it: use --criterion "
                                 f"glue_sentence_prediction, or fairseq's with --report-mcc / "
                                 f"--report-pearson-and-spearman)")
            return scores
    raise ValueError(f"{run_dir}: no result.json, {' or '.join(LOG_NAMES)}")


def custom_task_dirs(runs_dir: str) -> List[str]:
    """Folders of ``runs_dir`` that are not GLUE tasks but hold run folders: custom tasks' runs."""
    names = []
    for name in sorted(os.listdir(runs_dir)):
        path = os.path.join(runs_dir, name)
        if name in TASKS or name.startswith(".") or not os.path.isdir(path):
            continue
        if by_value(RUN_FOLDER, os.listdir(path)):
            names.append(name)
    return names


# inputs that may differ between the runs of one table: the run's own, and the task's binaries, whose fingerprint
# changes when they are made again the same (their manifest's time)
PER_RUN = frozenset({"task", "lr", "seed", "checkpoint", "data"})


def recorded(run_dir: str) -> Dict[str, object]:
    """The run's result.json as a dict, or {} (a log-only run, an unreadable file)."""
    from tupe_common.io import read_json

    try:
        data = read_json(os.path.join(run_dir, "result.json"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def mixed_runs(runs: Sequence["Run"]) -> List[str]:
    """Why ``runs`` cannot make one table, one line each: more than one checkpoint (by fingerprint where runs
    recorded their inputs; a run from before has only its path, the same checkpoint as a newer run's of that path),
    or one task's runs made with other settings (result.json's ``inputs`` but ``PER_RUN``, numbers by value)."""
    checkpoints: Dict[str, List[str]] = {}  # fingerprint, or an older run's path -> its runs
    new_paths, old_paths = set(), {}
    settings: Dict[str, List[Tuple[Dict[str, str], List[str]]]] = {}
    for run in runs:
        data = recorded(run.path)
        inputs = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
        path = data.get("checkpoint")
        if inputs.get("checkpoint") is not None:
            checkpoints.setdefault(str(inputs["checkpoint"]), []).append(run.path)
            new_paths.add(path)
        elif path is not None:
            old_paths.setdefault(str(path), []).append(run.path)
        if inputs:
            mine = {k: str(v) for k, v in inputs.items() if k not in PER_RUN}
            groups = settings.setdefault(run.task, [])
            same = next((found for values, found in groups if _same_settings(values, mine)), None)
            if same is None:
                groups.append((mine, [run.path]))
            else:
                same.append(run.path)
    checkpoints.update({path: group for path, group in old_paths.items() if path not in new_paths})
    found = []
    if len(checkpoints) > 1:
        examples = "; ".join(f"{ckpt}: {len(group)} run(s), e.g. {group[0]}" for ckpt, group in checkpoints.items())
        found.append(f"the runs come from {len(checkpoints)} different checkpoints ({examples}): one row of the "
                     "table is one model; collect each checkpoint's runs from their own RUNS folder")
    for task, groups in settings.items():
        if len(groups) > 1:
            (a, first), (b, second) = groups[:2]
            differ = "; ".join(f"{k} {a.get(k, 'unrecorded')} vs {b.get(k, 'unrecorded')}"
                               for k in sorted(set(a) | set(b))
                               if not _same_value(a.get(k, "unrecorded"), b.get(k, "unrecorded")))
            found.append(f"{task}: its runs were made with {len(groups)} different settings ({differ}; e.g. "
                         f"{first[0]} and {second[0]}): one column is one protocol; move the others away")
    return found


def _same_value(a: str, b: str) -> bool:
    """One setting's value: numbers by value; ``auto`` matches any value, which it may have resolved to."""
    return same_number(a, b) or "auto" in (a, b)


def _same_settings(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return set(a) == set(b) and all(_same_value(a[k], b[k]) for k in a)


def run_folders(task_dir: str, problems: List[str]) -> List[Tuple[float, int, str]]:
    """(LR, seed, folder) of each run folder in ``task_dir``, by value (``RUN_FOLDER``); a folder of
    another name, and two folders of one run (``lr1e-3_seed1`` and ``lr0.001_seed1``: neither counted, so that no
    seed counts twice), are ``problems``."""
    folders = [name for name in os.listdir(task_dir) if os.path.isdir(os.path.join(task_dir, name))]
    runs = {values: names for values, names in by_value(RUN_FOLDER, folders).items() if values[1].is_integer()}
    named = {name for names in runs.values() for name in names}
    problems += [f"{os.path.join(task_dir, name)}: not a run folder name (expected lr{{LR}}_seed{{SEED}}), ignored"
                 for name in sorted(set(folders) - named)]
    found = []
    for (lr, seed), names in runs.items():
        paths = [os.path.join(task_dir, name) for name in names]
        if len(paths) > 1:
            problems.append(f"{' and '.join(paths)} are one run (LR {short(lr)}, seed {int(seed)}) spelt twice: "
                            "neither counted; move all but one away")
        else:
            found.append((lr, int(seed), paths[0]))
    return found


def collect_runs(runs_dir: str, tasks: Sequence[str]) -> Tuple[List[Run], List[str]]:
    """All readable runs of ``tasks`` under ``runs_dir``, and a list of problems found."""
    runs, problems = [], []
    for task in tasks:
        task_dir = os.path.join(runs_dir, task)
        if not os.path.isdir(task_dir):
            continue
        metric = get_task(task, custom=True).metric
        for lr, seed, path in run_folders(task_dir, problems):
            try:
                scores = read_run(task, path, metric)
            except ValueError as e:
                problems.append(str(e))
                continue
            runs.append(Run(task, lr, seed, path, scores))
    return runs, problems


# --------------------------------------------------------------------------------------------
# The protocol: median over seeds per LR, best LR per column
# --------------------------------------------------------------------------------------------


@dataclass
class ColumnResult:
    column: Column
    by_lr: Dict[float, List[Tuple[int, float]]] = field(default_factory=dict)  # lr -> [(seed, score)]
    missing: List[str] = field(default_factory=list)
    lr_chosen_by: Optional["ColumnResult"] = None  # MNLI-mm: the LR is MNLI-m's best

    def median(self, lr: float) -> float:
        return statistics.median(score for _, score in self.by_lr[lr])

    def scores_by_lr(self) -> Dict[float, List[float]]:
        return {lr: [score for _, score in runs] for lr, runs in self.by_lr.items()}

    @property
    def best_lr(self) -> Optional[float]:
        """The protocol's LR (tupe_glue.selection, shared with the study)."""
        leader = None if self.lr_chosen_by is None else self.lr_chosen_by.scores_by_lr()
        return column_lr(self.scores_by_lr(), leader)

    @property
    def best(self) -> Optional[float]:
        return None if self.best_lr is None else self.median(self.best_lr)

    @property
    def complete(self) -> bool:
        return not self.missing


def summarize(runs: Sequence[Run], columns: Sequence[Column], expected_lrs: Sequence[float],
              expected_seeds: Sequence[int], n_seeds: int, problems: List[str]) -> List[ColumnResult]:
    """Each column's runs of the expected grid by LR; a run at another LR or seed is a problem, not counted."""
    results = []
    for col in columns:
        res = ColumnResult(col)
        for run in runs:
            if run.task != col.task:
                continue
            if col.subset not in run.scores:
                problems.append(f"{run.path}: no score for subset {col.subset!r} ({col.name})")
            elif run.lr not in expected_lrs:
                problems.append(f"{col.name}: {run.path}: LR {spelling(run.lr)} is not in the expected grid "
                                f"(--expected-lrs {','.join(map(spelling, expected_lrs))}): not counted")
            elif expected_seeds and run.seed not in expected_seeds:
                problems.append(f"{col.name}: {run.path}: seed {run.seed} is not an expected seed (--expected-seeds "
                                f"{','.join(map(str, expected_seeds))}): not counted")
            else:
                res.by_lr.setdefault(run.lr, []).append((run.seed, run.scores[col.subset]))
        for lr in res.by_lr:
            res.by_lr[lr].sort()
        if not res.by_lr:
            res.missing.append(f"{col.name}: no runs")
        for lr in expected_lrs:
            have = sorted(seed for seed, _ in res.by_lr.get(lr, []))
            if res.by_lr and not have:
                res.missing.append(f"{col.name} lr {spelling(lr)}: no runs")
            elif have and expected_seeds and not set(expected_seeds) <= set(have):
                lack = ", ".join(str(s) for s in expected_seeds if s not in have)
                res.missing.append(f"{col.name} lr {spelling(lr)}: {len(have)} seeds, missing seed(s) {lack}")
            elif have and len(have) < n_seeds:
                res.missing.append(f"{col.name} lr {spelling(lr)}: {len(have)}/{n_seeds} seeds")
            elif len(have) > n_seeds:
                res.missing.append(f"{col.name} lr {spelling(lr)}: {len(have)} seeds, more than the {n_seeds} "
                                   "expected (--seeds): pass --expected-seeds to say which count")
        results.append(res)
    by_name = {r.column.name: r for r in results}
    for res in results:
        if res.column.lr_from in by_name:
            res.lr_chosen_by = by_name[res.column.lr_from]
            if res.by_lr and res.best_lr is None and res.lr_chosen_by.best_lr is not None:
                res.missing.append(f"{res.column.name}: no runs at {res.column.lr_from}'s best lr "
                                   f"{spelling(res.lr_chosen_by.best_lr)}")
    return results


def average(results: Sequence[ColumnResult]) -> Optional[float]:
    """Plain mean of the columns, or None unless every column is complete."""
    if not results or not all(r.complete for r in results):
        return None
    return sum(r.best for r in results) / len(results)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _fmt(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.2f}"


def _lr(res: ColumnResult) -> str:
    if res.best_lr is None:
        return "—"
    return spelling(res.best_lr) + (f" ({res.lr_chosen_by.column.name}'s)" if res.lr_chosen_by else "")


def _cell(res: ColumnResult) -> str:
    return _fmt(res.best) + ("" if res.complete or res.best is None else "*")


def markdown(name: str, results: Sequence[ColumnResult], extra: Sequence[ColumnResult],
             compare: Sequence[str], problems: Sequence[str]) -> str:
    avg = average(results)
    head = ["Model"] + [r.column.name for r in results] + ["Avg"]
    lines = [f"## GLUE dev: {name}", "",
             "Median over seeds at the best learning rate (per column; MNLI-mm at MNLI-m's); "
             "Avg = mean of the 9 columns; — = no result.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines.append("| " + " | ".join([name] + [_cell(r) for r in results] + [_fmt(avg) if avg is not None
                                                                              else "incomplete"]) + " |")
    for model in compare:
        row = TABLE1[model]
        lines.append("| " + " | ".join([f"{model} (published)"] + [_fmt(x) for x in row.scores]
                                       + [_fmt(row.avg)]) + " |")
    lines += ["", f"Published rows: {SOURCE}. `*` = incomplete grid (see below).", ""]

    detail = [r for r in list(results) + list(extra) if r.by_lr]
    lrs = sorted({lr for r in detail for lr in r.by_lr})
    if detail:
        lines += ["### Per learning rate: median over seeds (number of seeds)", "",
                  "| Column | metric | " + " | ".join(f"lr {spelling(lr)}" for lr in lrs) + " | best LR | best |",
                  "|" + "---|" * (len(lrs) + 4)]
        for r in detail:
            cells = [f"{r.median(lr):.2f} ({len(r.by_lr[lr])})" if lr in r.by_lr else "—" for lr in lrs]
            lines.append(f"| {r.column.name} | {r.column.metric} | " + " | ".join(cells)
                         + f" | {_lr(r)} | {_fmt(r.best)} |")
        lines.append("")
    missing = [m for r in results for m in r.missing] + [m for r in extra if r.by_lr for m in r.missing]
    lines.append("### Missing runs and problems")
    lines.append("")
    lines += [f"- {m}" for m in missing + list(problems)] or ["- none: every column has its full grid"]
    return "\n".join(lines) + "\n"


def write_csv(path: str, name: str, results: Sequence[ColumnResult], compare: Sequence[str]) -> str:
    """Summary CSV at ``path``; per-LR detail beside it (``*_per_lr.csv``). Returns the detail path."""
    avg = average(results)
    with atomic_open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "source", "complete"] + list(COLUMNS) + ["Avg"])
        w.writerow([name, "this run", "yes" if avg is not None else "no"]
                   + ["" if r.best is None else f"{r.best:.4f}" for r in results]
                   + ["" if avg is None else f"{avg:.4f}"])
        for model in compare:
            row = TABLE1[model]
            w.writerow([model, SOURCE, "yes"] + [f"{x:.2f}" for x in row.scores] + [f"{row.avg:.2f}"])
    detail = os.path.splitext(path)[0] + "_per_lr.csv"
    with atomic_open(detail, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["column", "task", "subset", "metric", "lr", "n_seeds", "median", "best_lr", "seeds", "scores"])
        for r in results:
            for lr in sorted(r.by_lr):
                seeds, scores = zip(*r.by_lr[lr])
                w.writerow([r.column.name, r.column.task, r.column.subset, r.column.metric, spelling(lr),
                            len(seeds), f"{r.median(lr):.4f}", "yes" if lr == r.best_lr else "no",
                            " ".join(map(str, seeds)), " ".join(f"{s!r}" for s in scores)])
    return detail


def bar_chart(name: str, results: Sequence[ColumnResult], compare: Sequence[str]):
    """Grouped bars per column, the y-axis from 0 (or from the lowest negative MCC), each bar labelled
    with its value and each missing result marked "missing" (so a 0.0 MCC and no run look different); the
    legend below the axes, the y-axis as tall as the labels need. Returns (the figure, what was drawn: x labels,
    y limits, the bar labels and the "missing" marks per series)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.column.name}\n{r.column.metric}" for r in results] + ["Avg\nmean of 9"]
    avg = average(results)
    series = [(name, [r.best for r in results] + [avg])]
    series += [(f"{m} (published)", list(TABLE1[m].scores) + [TABLE1[m].avg]) for m in compare]
    width = 0.8 / len(series)
    lowest = min([0.0] + [v for _, values in series for v in values if v is not None])
    fig, ax = plt.subplots(figsize=(14, 5), layout="constrained")
    drawn: Dict[str, object] = {"bar_labels": {}, "missing": {}}
    for i, (label, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(values))]
        bars = ax.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None],
                      width, label=label)
        texts = ax.bar_label(bars, fmt="%.1f", fontsize=6, rotation=90, padding=2)
        drawn["bar_labels"][label] = [t.get_text() for t in texts]
        drawn["missing"][label] = [labels[j].split("\n")[0] for j, v in enumerate(values) if v is None]
        for x, v in zip(xs, values):
            if v is None:
                ax.text(x, 1, "missing", rotation=90, ha="center", va="bottom", fontsize=7, color="red")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(-0.5, len(labels) - 0.5)  # every column, with or without bars (a last "missing" mark fell outside)
    ax.set_xlabel("GLUE dev column and its metric (MCC for CoLA, Pearson for STS-B, accuracy otherwise)")
    ax.set_ylabel("dev score x 100 (y-axis from 0)" if lowest >= 0 else "dev score x 100 (y-axis from its lowest)")
    ax.set_ylim(0.0 if lowest >= 0 else lowest - 5, 110)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(f"GLUE dev, paper protocol: {name}" + ("" if avg is not None else " (incomplete: Avg missing)"))
    # below the axes: inside, at the top, it covered the labels of bars near 100
    fig.legend(fontsize=8, ncol=len(series), loc="outside lower center")
    fit_texts(fig, ax)
    drawn.update(x_labels=labels, ylim=ax.get_ylim(), ylabel=ax.get_ylabel())
    return fig, drawn


def fit_texts(fig, ax, rounds: int = 8) -> None:
    """Widen the y-axis until every text of ``ax`` (the bar labels, the "missing" marks) lies inside it. A
    label's height is fixed in pixels, so a wider range shortens the bar under it and the label needs a little
    more range again: each round adds what the last draw showed missing, plus 2%, and a few rounds settle it."""
    for _ in range(rounds):
        fig.canvas.draw()  # the layout places the axes and sizes the texts
        low, high = ax.get_ylim()
        to_data = ax.transData.inverted()
        boxes = [t.get_window_extent() for t in ax.texts]
        top = max(to_data.transform((0, b.y1))[1] for b in boxes) if boxes else high
        bottom = min(to_data.transform((0, b.y0))[1] for b in boxes) if boxes else low
        if top <= high and bottom >= low:
            return
        margin = 0.02 * (high - low)
        ax.set_ylim(min(low, bottom - margin), max(high, top + margin))


def plot_png(path: str, name: str, results: Sequence[ColumnResult], compare: Sequence[str]) -> Dict[str, object]:
    """``bar_chart``'s figure as a PNG at ``path``; returns what was drawn."""
    import matplotlib.pyplot as plt

    fig, drawn = bar_chart(name, results, compare)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return drawn


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=command_name("python -m tupe_glue.collect"), description=__doc__.split("\n")[0])
    p.add_argument("runs_dir", help="RUNS_DIR/TASK/lr{LR}_seed{SEED}/ (result.json or train.log)")
    p.add_argument("--out-csv", help="summary CSV (default RUNS_DIR/glue_results.csv, rewritten on every collect; "
                   "+ *_per_lr.csv); a file named here is a new file unless --force")
    p.add_argument("--out-png", help="bar chart (default RUNS_DIR/glue_results.png); a new file unless --force")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out-csv or --out-png")
    p.add_argument("--row-name", "--variant-name", dest="row_name",  # --variant-name: its former name, still read
                   help="the table's row name for these runs, e.g. TUPE-R (default: RUNS_DIR's name)")
    p.add_argument("--expected-lrs", default=",".join(PAPER_LRS), help=f"LR grid (default the paper's {','.join(PAPER_LRS)})")
    p.add_argument("--seeds", type=int, default=len(PAPER_SEEDS),
                   help=f"seeds expected per task and LR (default the paper's {len(PAPER_SEEDS)})")
    p.add_argument("--expected-seeds", help="exact seed ids expected, e.g. 1,2,3,4,5 (overrides --seeds)")
    p.add_argument("--compare", default=",".join(COMPARE),
                   help=f"published rows to show, from {', '.join(TABLE1)} (default {','.join(COMPARE)})")
    p.add_argument("--strict", action="store_true", help="exit 1 when anything is missing")
    args = p.parse_args(argv)
    need(args.runs_dir, "folder")  # missing, or a file: one line naming it, exit 1 (tupe_common.errors.exit_main)
    for option, path in (("--out-csv", args.out_csv), ("--out-png", args.out_png)):
        if path and os.path.exists(path) and not args.force:  # a file the user named: never replaced silently
            p.error(f"{option} {path} exists; pass --force to overwrite it, or choose another file")
    for option, listed, noun, kind in (("--expected-lrs", args.expected_lrs, "LR", float),
                                       ("--expected-seeds", args.expected_seeds or "", "seed", int)):
        items = [x.strip() for x in listed.split(",") if x.strip()]
        try:  # by value: 1e-3 and 0.001 are one LR
            check_once(f"{option} {listed}", items, noun)
        except UsageError as e:
            p.error(str(e))
        try:
            values = [kind(x) for x in items]
        except ValueError:
            p.error(f"{option} {listed}: not a comma-separated list of {'numbers' if kind is float else 'integers'}"
                    f", e.g. {'2e-5,3e-5' if kind is float else '1,2,3'}")
        setattr(args, option[2:].replace("-", "_"), values)
    if not args.expected_lrs:
        p.error("--expected-lrs: no LR given")
    for model in filter(None, args.compare.split(",")):
        if model not in TABLE1:
            p.error(f"--compare: unknown row {model!r}; choose from {', '.join(TABLE1)}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    name = args.row_name or os.path.basename(os.path.normpath(args.runs_dir))
    expected_seeds = args.expected_seeds
    n_seeds = len(expected_seeds) or args.seeds
    compare = [m for m in args.compare.split(",") if m]
    custom = [c for name in custom_task_dirs(args.runs_dir) for c in task_columns(custom_task(name))]
    tasks = sorted({c.task for c in TABLE_COLUMNS + EXTRA_COLUMNS}) + [c.task for c in custom]
    runs, problems = collect_runs(args.runs_dir, tasks)
    mixed = mixed_runs(runs)
    for line in mixed:
        log.error(f"{args.runs_dir}: {line}")
    if mixed:
        return 1
    lrs = args.expected_lrs
    results = summarize(runs, TABLE_COLUMNS, lrs, expected_seeds, n_seeds, problems)
    extra = summarize(runs, EXTRA_COLUMNS + tuple(custom), lrs, expected_seeds, n_seeds, problems)
    print(markdown(name, results, extra, compare, problems), end="")
    out_csv = args.out_csv or os.path.join(args.runs_dir, "glue_results.csv")
    out_png = args.out_png or os.path.join(args.runs_dir, "glue_results.png")
    detail = write_csv(out_csv, name, results, compare)
    plot_png(out_png, name, results, compare)
    log.info(f"wrote {out_csv}, {detail}, {out_png}")
    complete = average(results) is not None and not problems
    return 1 if args.strict and not complete else 0


def cli() -> None:
    """The console script ``tupe-collect``."""
    exit_main(main, "tupe-collect")


if __name__ == "__main__":
    exit_main(main, "python -m tupe_glue.collect")
