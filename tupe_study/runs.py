"""Reading a study folder (layout written by ``tupe-study``, see ``tupe_study.stages``)::

    OUT/pretrain/V/seedS/train.log                     fairseq log (json or simple) with the validations
    OUT/finetune/V/seedS/TASK/lr{LR}_seed{K}/          result.json (glue/finetune.sh), predictions.json, order.json
    OUT/locality/V/seedS.csv                           tupe-locality --out-csv
    OUT/longer/V/seedS.json                            tupe_study.longer_inputs
    OUT/longer/V/seedS.rope-{linear,ntk,yarn}.json     the same, a RoPE model with a RoPE scaling beyond T
    OUT/c4/data-bin/data_path.txt                      the training shards (for the unigram baseline)

V is a model's label (``tupe_study.plan.Entry``): the variant for MLM, ``V+electra`` for ELECTRA, whose log is read
for its generator and discriminator losses (``ELECTRA_KEYS``) instead of an MLM loss.

Everything missing is appended to ``problems`` (the report lists it) rather than raised.
"""
from __future__ import annotations

import csv
import json
import os
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tupe_study.longer_inputs import ROPE_SCALED, scaled_json
from tupe_study.settings import split_variants
from tupe_study.timings import part_times
from tupe_common import fairseq_log
from tupe_glue.selection import select_columns
from tupe_common.mmap_index import token_dtype

# --------------------------------------------------------------------------------------------
# Pre-training: validation curve and unigram baseline
# --------------------------------------------------------------------------------------------

PRETRAIN_DONE = "pretrain.done"  # written in a pre-training's folder when it finished (tupe_study.stages)
ELECTRA_KEYS = ("gen_loss", "disc_loss", "gen_acc", "disc_acc", "disc_recall", "replace_rate")  # tupe_plugin/criterions/electra.py


def pretrain_finished(folder: str) -> bool:
    """Whether the pre-training (or sweep run) in ``folder`` ended well: its :data:`PRETRAIN_DONE` is there."""
    return os.path.isfile(os.path.join(folder, PRETRAIN_DONE))


def is_validation_line(line: str) -> bool:
    """Whether a line of a fairseq log (json or simple format) is a validation of subset ``valid``."""
    return fairseq_log.kind_of(line) == "valid"


def parse_valid_curves(log_path: str, keys: Sequence[str] = ("loss",)) -> Dict[str, Dict[int, float]]:
    """{key: {num_updates: value}} of subset ``valid`` in a fairseq log (json or simple format), for each of
    ``keys`` (``loss``; ELECTRA's ``gen_loss``, ``disc_loss``, ...); a value that is not finite is kept (the report
    names its run).

    A resumed run repeats a validation in the same log: the last line for an update count wins.
    """
    curves: Dict[str, Dict[int, float]] = {k: {} for k in keys}
    for stats in fairseq_log.statistics(log_path):
        if stats.kind != "valid" or stats.update is None:
            continue
        for k in keys:
            try:
                curves[k][stats.update] = float(stats.values[k])  # type: ignore[arg-type]
            except (KeyError, TypeError, ValueError):
                continue
    return {k: dict(sorted(c.items())) for k, c in curves.items()}


def parse_valid_curve(log_path: str) -> Dict[int, float]:
    """{num_updates: validation loss} of subset ``valid`` (an MLM run's loss in bits)."""
    return parse_valid_curves(log_path)["loss"]


def curve_holes(curve: Dict[int, float], interval: int, total_updates: int) -> List[int]:
    """The updates, every ``interval`` up to the curve's last (at most ``total_updates``), with no validation: a
    resumed run's log lost the lines before its kill (fixed in ``24674e3``), or a run validated on another grid."""
    if not curve or interval <= 0:
        return []
    return [u for u in range(interval, min(max(curve), total_updates) + 1, interval) if u not in curve]


def loss_at(curve: Dict[int, float], update: int) -> Tuple[Optional[float], Optional[int]]:
    """The validation loss at the validation nearest to ``update`` (ties: the earlier), and its update."""
    if not curve:
        return None, None
    nearest = min(curve, key=lambda u: (abs(u - update), u))
    return curve[nearest], nearest


def token_counts(data_path: str) -> np.ndarray:
    """Counts per token id over the ``train`` split of every shard in ``a:b:c`` (fairseq mmap binaries)."""
    counts = np.zeros(0, dtype=np.int64)
    for shard in data_path.split(":"):
        prefix = os.path.join(shard, "train")
        if not os.path.isfile(prefix + ".idx"):
            raise FileNotFoundError(f"{prefix}.idx: no train split in shard {shard}")
        tokens = np.memmap(prefix + ".bin", dtype=token_dtype(prefix + ".idx"), mode="r")
        c = np.bincount(tokens)
        if len(c) > len(counts):
            counts = np.pad(counts, (0, len(c) - len(counts)))
        counts[: len(c)] += c
    return counts


# --------------------------------------------------------------------------------------------
# Fine-tuning: per column, the protocol's LR (tupe_glue.selection) and its runs
# --------------------------------------------------------------------------------------------


@dataclass
class Pick:
    """One column (a task's dev subset) of one pre-trained model at the LR the protocol chose."""

    column: str
    task: str
    subset: str
    metric: str
    lr: float
    scores: Dict[int, float]  # fine-tuning seed -> best dev score (result.json)
    dirs: Dict[int, str]  # fine-tuning seed -> run folder

    @property
    def median(self) -> float:
        return statistics.median(self.scores.values())

    @property
    def spread(self) -> float:
        return max(self.scores.values()) - min(self.scores.values())


Run = Tuple[str, float, int, Dict[str, float], str]  # task, lr, seed, {subset: score}, run folder


def pick_columns(runs: Sequence[Run]) -> Dict[str, Pick]:
    """{column: Pick}: per LR the median over seeds, the best LR; a column with ``lr_from`` (MNLI-mm) at its
    leader's LR (tupe_glue.tasks' columns, the selection tupe_glue.collect makes)."""
    from tupe_glue.tasks import get_task

    by_col: Dict[str, Dict[float, Dict[int, Tuple[float, str]]]] = {}
    info: Dict[str, Tuple[str, str, str, Optional[str]]] = {}
    for task, lr, seed, scores, path in runs:
        t = get_task(task, custom=True)
        for col in t.columns:
            if col.subset in scores:
                by_col.setdefault(col.name, {}).setdefault(lr, {})[seed] = (scores[col.subset], path)
                info[col.name] = (t.name, col.subset, t.metric, col.lr_from)
    chosen = select_columns({c: {lr: [s for s, _ in runs.values()] for lr, runs in by_lr.items()}
                             for c, by_lr in by_col.items()}, {c: i[3] for c, i in info.items()})
    out = {}
    for col in sorted(by_col):
        lr = chosen[col]
        if lr is None:
            continue
        at = by_col[col][lr]
        task, subset, metric, _ = info[col]
        out[col] = Pick(col, task, subset, metric, lr, {k: s for k, (s, _) in at.items()},
                        {k: p for k, (_, p) in at.items()})
    return out


def read_finetune_dir(root: str, problems: List[str]) -> List[Run]:
    """Every finished run under ``root/TASK/lr{LR}_seed{K}/`` (tupe_glue.collect's reader: by value, no run counted
    twice)."""
    from tupe_glue.collect import collect_runs

    if not os.path.isdir(root):
        return []
    tasks = [t for t in sorted(os.listdir(root)) if not t.startswith(".") and os.path.isdir(os.path.join(root, t))]
    runs, found = collect_runs(root, tasks)
    problems += found
    return [(r.task, r.lr, r.seed, r.scores, r.path) for r in runs]


def read_json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------------------------------
# Locality / symmetry from tupe-locality's CSV
# --------------------------------------------------------------------------------------------


def read_locality(path: str) -> Dict[str, float]:
    """{'loc_pos', 'sym_pos', 'loc_attn', 'sym_attn'} from the 'mean' rows of a ``tupe-locality`` CSV."""
    out: Dict[str, float] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("head") != "mean":
                continue
            kind = "pos" if row["source"] == "position" else "attn" if row["source"].startswith("attention") else None
            if kind:
                out[f"loc_{kind}"] = float(row["locality"])
                out[f"sym_{kind}"] = float(row["symmetry"])
    return out


# --------------------------------------------------------------------------------------------
# One variant, several pre-training seeds
# --------------------------------------------------------------------------------------------


@dataclass
class SeedRun:
    seed: int
    curve: Dict[int, float]  # the validation MLM loss; empty for ELECTRA (its ``loss`` is another quantity)
    tasks: Dict[str, Pick]
    locality: Dict[str, float]
    longer: Optional[dict] = None  # tupe_study.longer_inputs' record
    electra: Dict[str, Dict[int, float]] = field(default_factory=dict)  # ELECTRA_KEYS -> validation curve
    rope_scaled: Dict[str, dict] = field(default_factory=dict)  # RoPE scaling -> its longer-inputs record

    def electra_final(self, key: str) -> Optional[float]:
        curve = self.electra.get(key)
        return curve[max(curve)] if curve else None

    @property
    def final(self) -> Optional[float]:
        return self.curve[max(self.curve)] if self.curve else None

    @property
    def best(self) -> Optional[float]:
        return min(self.curve.values()) if self.curve else None

    def downstream(self, columns: Sequence[str]) -> Optional[float]:
        if not columns or any(c not in self.tasks for c in columns):
            return None
        return statistics.mean(self.tasks[c].median for c in columns)


@dataclass
class Variant:
    name: str  # the entry's label: the variant, or V+electra (tupe_study.plan.Entry)
    about: str = ""
    seeds: List[SeedRun] = field(default_factory=list)
    objective: str = "mlm"


def variant_seeds(text: str, default_seeds: Sequence[int]) -> List[Tuple[str, List[int]]]:
    """The report's ``--variants`` (``"bert-a:1,2 tupe-r:1,2 bert-r"``) -> [(label, pre-training seeds)]: a
    variant's own seeds after a colon, else ``default_seeds`` (:func:`tupe_study.settings.split_variants`)."""
    return [(label, list(own or default_seeds)) for label, own in split_variants(text)]


def about_variants() -> Dict[str, str]:
    """Registered variant -> its one-line description (empty when the plugin cannot be imported)."""
    try:
        from tupe_core.registry import about

        return about()
    except ImportError:
        return {}


FineTuneGrid = Tuple[Sequence[str], Sequence[str], Sequence[int]]  # tasks, LRs as written, fine-tuning seeds


def missing_runs(runs: List[Run], grid: FineTuneGrid) -> List[str]:
    """The runs of the grid (every task x LR x seed) that ``runs`` lacks, as ``TASK LR seed K``."""
    have = {(task, lr, seed) for task, lr, seed, _, _ in runs}
    tasks, lrs, seeds = grid
    return [f"{t} LR {lr} seed {k}" for t in tasks for lr in lrs for k in seeds if (t, float(lr), k) not in have]


def load_study(out: str, variants: Sequence[Tuple[str, Sequence[int]]], problems: List[str],
               grid: Optional[FineTuneGrid] = None) -> List[Variant]:
    """Every model's runs under ``out``; what is missing goes to ``problems``: a model seed with no
    fine-tuning run, or, given the fine-tuning ``grid``, with only some of its runs (a grid without tasks: the study
    fine-tunes nothing, and no run is missing)."""
    about = about_variants()
    result = []
    for name, seeds in variants:
        variant, objective = split_label(name)
        v = Variant(name, about.get(variant, ""), objective=objective)
        keys = ELECTRA_KEYS if objective == "electra" else ("loss",)
        for seed in seeds:
            log = os.path.join(out, "pretrain", name, f"seed{seed}", "train.log")
            curves = parse_valid_curves(log, keys) if os.path.isfile(log) else {}
            if not curves.get(keys[0]):
                problems.append(f"{log}: no validation {keys[0]} (pre-training missing or unfinished)")
            elif not pretrain_finished(os.path.dirname(log)):
                problems.append(f"{name} seed {seed}: pre-training not finished (no {PRETRAIN_DONE} beside {log}: it "
                                "is running, was stopped or failed): its losses are left out until it finishes")
                curves = {}
            curve, electra = (curves.get("loss", {}), {}) if objective == "mlm" else ({}, curves)
            runs = read_finetune_dir(os.path.join(out, "finetune", name, f"seed{seed}"), problems)
            lacking = missing_runs(runs, grid) if grid and runs else []
            if not runs and not (grid is not None and not grid[0]):
                problems.append(f"{name} seed {seed}: no finished fine-tuning run")
            elif lacking:
                problems.append(f"{name} seed {seed}: {len(lacking)} fine-tuning run(s) not finished: "
                                + ", ".join(lacking))
            loc_csv = os.path.join(out, "locality", name, f"seed{seed}.csv")
            loc = read_locality(loc_csv) if os.path.isfile(loc_csv) else {}
            if not loc:
                problems.append(f"{loc_csv}: missing (locality/symmetry not measured)")
            longer_path = os.path.join(out, "longer", name, f"seed{seed}.json")
            scaled = {s: read_json(scaled_json(longer_path, s)) for s in ROPE_SCALED}
            v.seeds.append(SeedRun(seed, curve, pick_columns(runs), loc, read_json(longer_path), electra,
                                   {s: record for s, record in scaled.items() if record is not None}))
        result.append(v)
    return result


def run_section(out: str) -> List[str]:
    """The settings (``OUT/settings.env``), the wall time per stage, and the machines and code that ran the parts
    (``OUT/timings.tsv``, tupe_study.timings) as Markdown lines."""
    lines = ["## Run", ""]
    settings = os.path.join(out, "settings.env")
    if os.path.isfile(settings):
        with open(settings, encoding="utf-8") as f:
            lines += ["Settings (`settings.env`):", "", "```", f.read().rstrip("\n"), "```", ""]
    times = part_times(out)
    if not times:
        return lines + ["No timings recorded.", ""]
    per_stage: Dict[str, List[Tuple[int, float]]] = {}  # stage -> (seconds, end as a POSIX time)
    for t in times:
        per_stage.setdefault(t.stage, []).append((t.seconds, t.end))
    machines = Counter(t.machine for t in times)
    codes = Counter(t.code for t in times)

    def span(parts: List[Tuple[int, float]]) -> float:  # first start to last end, minutes
        return (max(e for _, e in parts) - min(e - s for s, e in parts)) / 60

    every = [p for v in per_stage.values() for p in v]
    lines += ["| stage | parts | time in parts (min) | elapsed (min) |", "|---|---|---|---|"]
    lines += [f"| {stage} | {len(v)} | {sum(s for s, _ in v) / 60:.1f} | {span(v):.1f} |" for stage, v in per_stage.items()]
    lines += [f"| **all** | {len(every)} | **{sum(s for s, _ in every) / 60:.1f}** | **{span(every):.1f}** |", "",
              "Machines (parts run there): " + "; ".join(f"{m} ({n})" for m, n in machines.items()) + ". "
              "Time in parts is the sum of the parts' own times (a rerun adds only what it did; a pre-training "
              "resumed from its checkpoint adds its earlier sittings too, from its log); elapsed runs from "
              "the first part's start to the last one's end, so parts run at once (`--lanes`, SLURM) count once, "
              "and any pause between runs counts too.", "",
              "Code (parts run with it): " + "; ".join(f"{f'`{c}`' if c else 'not recorded'} ({n})"
                                                       for c, n in codes.items()) + "."]
    if len([c for c in codes if c]) > 1:
        lines[-1] += (" **The parts ran with more than one version of the code**: a seed can draw another initial "
                      "model under another version (docs/study.md, \"Seeds and commits\").")
    return lines + [""]


def split_label(label: str) -> Tuple[str, str]:
    """An entry's label -> (variant, objective): ``tupe-r+electra`` -> (tupe-r, electra), ``tupe-r`` -> (tupe-r, mlm)."""
    name, _, objective = label.partition("+")
    return name, objective or "mlm"
