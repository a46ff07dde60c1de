"""The study's report: ``python -m tupe_plugin.analysis.study_report OUT`` (run by ``train_scripts/study.sh``).

Reads the runs under OUT (layout written by ``train_scripts/study.sh``)::

    OUT/pretrain/VARIANT/seedS/train.log          fairseq log (json or simple format) with the validations
    OUT/finetune/VARIANT/seedS/TASK/lr{LR}_seed{K}/result.json      glue/finetune.sh
    OUT/locality/VARIANT/seedS.csv                tupe-locality --out-csv
    OUT/c4/data-bin/data_path.txt                 the training shards (for the unigram baseline)

and writes ``OUT/study.csv`` (one row per variant), ``OUT/report.md``, ``OUT/valid_loss.png`` (validation
MLM loss of every variant, the TUPE paper's Fig. 4 analogue) and ``OUT/correlation.png`` (locality and
symmetry against the downstream average, the L&S claim). Everything missing is listed in the report.

Units: fairseq's ``masked_lm`` criterion logs its loss in bits (``loss / sample_size / log(2)``, in
``fairseq/criterions/masked_lm.py``), so the unigram baseline is the entropy of the training tokens in
bits (docs/results/README.md explains the baseline).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
import struct
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tupe_common.io import atomic_path, write_csv, write_text

FRACTIONS = (0.25, 0.5, 0.75, 1.0)
SUBSET_COLUMN = {("MNLI", "valid"): "MNLI-m", ("MNLI", "valid1"): "MNLI-mm"}

# --------------------------------------------------------------------------------------------
# Statistics (numpy, float64)
# --------------------------------------------------------------------------------------------


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r; nan when fewer than 2 points or either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"pearson needs two 1-d sequences of equal length, got {x.shape} and {y.shape}")
    if len(x) < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / denom if denom > 0 else math.nan


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they occupy ([10, 20, 20] -> [1, 2.5, 2.5])."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks (the tie-corrected definition)."""
    return pearson(average_ranks(x), average_ranks(y))


# --------------------------------------------------------------------------------------------
# Pre-training: validation curve and unigram baseline
# --------------------------------------------------------------------------------------------

_JSON_VALID = re.compile(r"\| valid \| (\{.*\})\s*$")
_SIMPLE_VALID = re.compile(r"valid on 'valid' subset \| (.*)$")


def parse_valid_curve(log_path: str) -> Dict[int, float]:
    """{num_updates: validation loss} of subset ``valid`` in a fairseq log (json or simple format).

    A resumed run repeats a validation in the same log: the last line for an update count wins.
    """
    curve: Dict[int, float] = {}
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _JSON_VALID.search(line)
            if m:
                try:
                    stats = json.loads(m.group(1))
                    curve[int(float(stats["valid_num_updates"]))] = float(stats["valid_loss"])
                except (json.JSONDecodeError, KeyError, ValueError):
                    continue
                continue
            m = _SIMPLE_VALID.search(line)
            if m:
                pairs = (kv.strip().split(" ", 1) for kv in m.group(1).split(" | "))
                stats = {kv[0]: kv[1] for kv in pairs if len(kv) == 2}
                try:
                    curve[int(float(stats["num_updates"]))] = float(stats["loss"])
                except (KeyError, ValueError):
                    continue
    return dict(sorted(curve.items()))


def loss_at(curve: Dict[int, float], update: int) -> Tuple[Optional[float], Optional[int]]:
    """The validation loss at the validation nearest to ``update`` (ties: the earlier), and its update."""
    if not curve:
        return None, None
    nearest = min(curve, key=lambda u: (abs(u - update), u))
    return curve[nearest], nearest


# fairseq's mmap index header (fairseq/data/indexed_dataset.py, MMapIndexedDataset.Index): 9 magic bytes,
# version <Q, then one <B dtype code; read here so that the report needs no fairseq import.
_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_MMAP_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16, 9: np.uint32,
                10: np.uint64}


def mmap_dtype(idx_path: str) -> type:
    """The token dtype of a fairseq mmap binary, from its ``.idx`` header."""
    with open(idx_path, "rb") as f:
        header = f.read(18)
    if len(header) < 18 or header[:9] != _MMAP_MAGIC or struct.unpack("<Q", header[9:17])[0] != 1:
        raise ValueError(f"{idx_path}: not a fairseq mmap index (version 1); binarize with --dataset-impl mmap")
    code = header[17]
    if code not in _MMAP_DTYPES:
        raise ValueError(f"{idx_path}: dtype code {code} is not an integer token type")
    return _MMAP_DTYPES[code]


def token_counts(data_path: str) -> np.ndarray:
    """Counts per token id over the ``train`` split of every shard in ``a:b:c`` (fairseq mmap binaries)."""
    counts = np.zeros(0, dtype=np.int64)
    for shard in data_path.split(":"):
        prefix = os.path.join(shard, "train")
        if not os.path.isfile(prefix + ".idx"):
            raise FileNotFoundError(f"{prefix}.idx: no train split in shard {shard}")
        tokens = np.memmap(prefix + ".bin", dtype=mmap_dtype(prefix + ".idx"), mode="r")
        c = np.bincount(tokens)
        if len(c) > len(counts):
            counts = np.pad(counts, (0, len(c) - len(counts)))
        counts[: len(c)] += c
    return counts


def entropy_bits(counts: np.ndarray) -> float:
    """Entropy in bits of the distribution given by ``counts``."""
    p = np.asarray(counts, dtype=np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log2(p)).sum())


# --------------------------------------------------------------------------------------------
# Fine-tuning: per task, median over seeds at the best LR
# --------------------------------------------------------------------------------------------


@dataclass
class TaskResult:
    column: str
    metric: str
    lr: float  # the LR whose median is best
    scores: List[float]  # every seed's score at that LR

    @property
    def median(self) -> float:
        return statistics.median(self.scores)

    @property
    def spread(self) -> float:
        return max(self.scores) - min(self.scores)


def finetune_results(runs: Sequence[Tuple[str, float, int, Dict[str, float]]], metrics: Dict[str, str]
                     ) -> Dict[str, TaskResult]:
    """(task, lr, seed, {subset: score}) runs -> {column: TaskResult}: per LR the median over the runs,
    then the LR with the best median (ties: the smaller LR), as the paper's protocol."""
    by_col: Dict[str, Dict[float, List[float]]] = {}
    metric_of: Dict[str, str] = {}
    for task, lr, _seed, scores in runs:
        for subset, score in scores.items():
            if subset != "valid" and (task, subset) not in SUBSET_COLUMN:
                continue
            col = SUBSET_COLUMN.get((task, subset), task)
            by_col.setdefault(col, {}).setdefault(lr, []).append(score)
            metric_of[col] = metrics.get(task, "accuracy")
    out = {}
    for col in sorted(by_col):
        lrs = by_col[col]
        best = max(sorted(lrs), key=lambda lr: statistics.median(lrs[lr]))
        out[col] = TaskResult(col, metric_of[col], best, lrs[best])
    return out


def read_finetune_dir(root: str, problems: List[str]) -> List[Tuple[str, float, int, Dict[str, float]]]:
    """Every finished run under ``root/TASK/lr{LR}_seed{K}/`` (glue.collect's reader)."""
    from glue.collect import METRIC, RUN_DIR_RE, read_run

    runs = []
    if not os.path.isdir(root):
        return runs
    for task in sorted(os.listdir(root)):
        task_dir = os.path.join(root, task)
        if task.startswith(".") or not os.path.isdir(task_dir):
            continue
        for name in sorted(os.listdir(task_dir)):
            m = RUN_DIR_RE.match(name)
            if not m:
                continue
            try:
                scores = read_run(task, os.path.join(task_dir, name), METRIC.get(task, "accuracy"))
            except ValueError as e:
                problems.append(str(e))
                continue
            runs.append((task, float(m.group("lr")), int(m.group("seed")), scores))
    return runs


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
    curve: Dict[int, float]
    tasks: Dict[str, TaskResult]
    locality: Dict[str, float]

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
    name: str
    seeds: List[SeedRun] = field(default_factory=list)


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def _spread(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return max(values) - min(values) if len(values) > 1 else None


def variant_row(v: Variant, columns: Sequence[str], total_updates: int, unigram: Optional[float]) -> Dict:
    """The study.csv row of a variant: means over its pre-training seeds; per task the median and spread
    over all its fine-tuning runs (pooled over pre-training seeds)."""
    finals = [s.final for s in v.seeds]
    row: Dict = {"variant": v.name, "pretrain_seeds": " ".join(str(s.seed) for s in v.seeds),
                 "final_valid_loss": _mean(finals), "final_valid_loss_spread": _spread(finals),
                 "final_valid_loss_by_seed": " ".join(f"{s.seed}:{s.final:.4f}" for s in v.seeds if s.final is not None),
                 "best_valid_loss": _mean([s.best for s in v.seeds]), "unigram_bits": unigram,
                 "below_unigram_bits": None if unigram is None or _mean(finals) is None else unigram - _mean(finals)}
    for frac in FRACTIONS:
        row[f"loss_at_{int(frac * 100)}pct"] = _mean([loss_at(s.curve, round(frac * total_updates))[0] for s in v.seeds])
    for col in columns:
        pooled = [x for s in v.seeds if col in s.tasks for x in s.tasks[col].scores]
        row[f"{col}_median"] = statistics.median(pooled) if pooled else None
        row[f"{col}_spread"] = max(pooled) - min(pooled) if pooled else None
    row["downstream_avg"] = _mean([s.downstream(columns) for s in v.seeds]) if all(
        s.downstream(columns) is not None for s in v.seeds) else None
    for key in ("loc_pos", "sym_pos", "loc_attn", "sym_attn"):
        row[key] = _mean([s.locality.get(key) for s in v.seeds])
    return row


@dataclass
class Paired:
    a: str
    b: str
    diffs: Dict[int, float]  # pre-training seed -> value(a) - value(b)
    spread: float  # the larger of the two variants' spreads across seeds (0 with one seed)

    @property
    def signs_agree(self) -> bool:
        return len({math.copysign(1, d) for d in self.diffs.values() if d != 0}) == 1 and 0 not in self.diffs.values()

    @property
    def settled(self) -> bool:
        """Two or more seeds, every seed's difference of the same sign, and the smallest difference larger
        than either variant's own spread across seeds."""
        return (len(self.diffs) >= 2 and self.signs_agree
                and min(abs(d) for d in self.diffs.values()) > self.spread)


def paired_differences(values: Dict[str, Dict[int, float]]) -> List[Paired]:
    """values[variant][seed] -> every pair (a, b) in the given order, over the seeds both have."""
    names = list(values)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            seeds = sorted(set(values[a]) & set(values[b]))
            if not seeds:
                continue
            spreads = [_spread([values[n][s] for s in seeds]) or 0.0 for n in (a, b)]
            out.append(Paired(a, b, {s: values[a][s] - values[b][s] for s in seeds}, max(spreads)))
    return out


def correlations(rows: Sequence[Dict]) -> List[Dict]:
    """Spearman and Pearson of each locality/symmetry column with the downstream average, across the
    variants that have both values; n is stated."""
    out = []
    for key, label in (("loc_pos", "locality (position-only)"), ("sym_pos", "symmetry (position-only)"),
                       ("loc_attn", "locality (attention)"), ("sym_attn", "symmetry (attention)")):
        pts = [(r[key], r["downstream_avg"]) for r in rows if r.get(key) is not None and r.get("downstream_avg") is not None]
        x, y = [p[0] for p in pts], [p[1] for p in pts]
        out.append({"measure": label, "key": key, "n": len(pts),
                    "spearman": spearman(x, y) if len(pts) >= 2 else math.nan,
                    "pearson": pearson(x, y) if len(pts) >= 2 else math.nan})
    return out


# --------------------------------------------------------------------------------------------
# Reading a study folder and writing the outputs
# --------------------------------------------------------------------------------------------


def parse_variants(text: str, default_seeds: Sequence[int]) -> List[Tuple[str, List[int]]]:
    """``"bert-a:1,2 tupe-r:1,2 bert-r"`` -> [(name, pre-training seeds)]: a variant's own seeds after a
    colon, else ``default_seeds`` (study.sh's PRETRAIN_SEEDS). Names without seeds may also be separated
    by commas."""
    out = []
    entries = [e for token in text.split() for e in ([token] if ":" in token else token.split(","))]
    for entry in entries:
        name, _, own = entry.partition(":")
        seeds = [int(s) for s in own.split(",") if s] if own else list(default_seeds)
        if not name or not seeds:
            raise ValueError(f"variant entry {entry!r}: write NAME or NAME:SEED,SEED,...")
        out.append((name, seeds))
    return out


def load_study(out: str, variants: Sequence[Tuple[str, Sequence[int]]], problems: List[str]) -> List[Variant]:
    from glue.collect import METRIC

    result = []
    for name, seeds in variants:
        v = Variant(name)
        for seed in seeds:
            log = os.path.join(out, "pretrain", name, f"seed{seed}", "train.log")
            curve = parse_valid_curve(log) if os.path.isfile(log) else {}
            if not curve:
                problems.append(f"{log}: no validation loss (pre-training missing or unfinished)")
            runs = read_finetune_dir(os.path.join(out, "finetune", name, f"seed{seed}"), problems)
            if not runs:
                problems.append(f"{name} seed {seed}: no finished fine-tuning run")
            loc_csv = os.path.join(out, "locality", name, f"seed{seed}.csv")
            loc = read_locality(loc_csv) if os.path.isfile(loc_csv) else {}
            if not loc:
                problems.append(f"{loc_csv}: missing (locality/symmetry not measured)")
            v.seeds.append(SeedRun(seed, curve, finetune_results(runs, METRIC), loc))
        result.append(v)
    return result


def run_section(out: str) -> List[str]:
    """The settings (``OUT/settings.env``) and the wall time per stage and machine (``OUT/timings.tsv``,
    one line per finished part: stage, part, seconds, date, machine) as Markdown lines."""
    lines = ["## Run", ""]
    settings = os.path.join(out, "settings.env")
    if os.path.isfile(settings):
        with open(settings, encoding="utf-8") as f:
            lines += ["Settings (`settings.env`):", "", "```", f.read().rstrip("\n"), "```", ""]
    timings = os.path.join(out, "timings.tsv")
    if not os.path.isfile(timings):
        return lines + ["No timings recorded.", ""]
    per_stage: Dict[str, List[int]] = {}
    machines: Dict[str, int] = {}
    with open(timings, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5 or not fields[2].isdigit():
                continue
            per_stage.setdefault(fields[0], []).append(int(fields[2]))
            machines[fields[4]] = machines.get(fields[4], 0) + 1
    total = sum(sum(v) for v in per_stage.values())
    lines += ["| stage | parts | wall time (min) |", "|---|---|---|"]
    lines += [f"| {stage} | {len(v)} | {sum(v) / 60:.1f} |" for stage, v in per_stage.items()]
    lines += [f"| **all** | {sum(len(v) for v in per_stage.values())} | **{total / 60:.1f}** |", "",
              "Machines (parts run there): " + "; ".join(f"{m} ({n})" for m, n in machines.items()) + ". "
              "The wall time is the sum over parts as they ran (a rerun adds only what it did).", ""]
    return lines


def _f(x: Optional[float], nd: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def write_csv_atomic(path: str, rows: List[Dict]) -> None:
    """Every key of every row as a column; floats to 6 significant digits, None as an empty cell."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cells = [{k: ("" if r.get(k) is None else f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in keys}
             for r in rows]
    write_csv(path, cells, fieldnames=keys)


def report_markdown(rows: List[Dict], columns: List[str], variants: List[Variant], total_updates: int,
                    unigram: Optional[float], min_gap: float, corr: List[Dict], loss_pairs: List[Paired],
                    down_pairs: List[Paired], problems: List[str], title: str, run: Sequence[str] = ()) -> str:
    n_seeds = max((len(v.seeds) for v in variants), default=0)
    L = [f"# {title}", ""]
    weak = [r["variant"] for r in rows if r["below_unigram_bits"] is None or r["below_unigram_bits"] < min_gap]
    if unigram is not None and weak:
        L += [f"> **WARNING: not fit for purpose.** {', '.join(weak)} did not end at least {min_gap:g} bit(s) below "
              f"the unigram baseline ({unigram:.3f} bits): such a model barely uses context, so differences "
              "between positional encodings say little. Use more updates or a bigger preset.", ""]
    L += ["## Pre-training: validation MLM loss (bits)", "",
          f"Unigram baseline (entropy of the training tokens, what a model ignoring context scores): "
          f"**{_f(unigram)} bits**. Budget: {total_updates} updates; the same data order, masks and seed for "
          "every variant.", "",
          "| variant | final | best | below unigram | " + " | ".join(f"@{int(f * 100)}%" for f in FRACTIONS)
          + " | spread over seeds |", "|" + "---|" * (5 + len(FRACTIONS))]
    for r in rows:
        L.append(f"| {r['variant']} | {_f(r['final_valid_loss'])} | {_f(r['best_valid_loss'])} | "
                 f"{_f(r['below_unigram_bits'])} | "
                 + " | ".join(_f(r[f'loss_at_{int(f * 100)}pct']) for f in FRACTIONS)
                 + f" | {_f(r['final_valid_loss_spread'])} |")
    seed_sets = {v.name: [s.seed for s in v.seeds] for v in variants}
    if len({tuple(x) for x in seed_sets.values()}) > 1:
        L += ["", "Pre-training seeds: " + "; ".join(f"{n} {','.join(map(str, x))}" for n, x in seed_sets.items())
              + ". A variant's loss is the mean over its own seeds; the paired table below compares the seeds "
              "both variants have. The curves are in `valid_loss.png`.", ""]
    else:
        L += ["", f"Pre-training seeds per variant: {n_seeds}. Losses are means over them; the curves are in "
              "`valid_loss.png`.", ""]
    L += ["### Differences paired by pre-training seed (final validation loss, row minus column variant)", ""]
    L += _paired_lines(loss_pairs, n_seeds, "loss")
    L += ["## Fine-tuning: median over seeds (spread = max - min)", ""]
    if columns:
        L += ["| variant | " + " | ".join(columns) + " | average |", "|" + "---|" * (len(columns) + 2)]
        for r in rows:
            L.append(f"| {r['variant']} | " + " | ".join(
                f"{_f(r[f'{c}_median'], 2)} ± {_f(r[f'{c}_spread'], 2)}" for c in columns)
                + f" | {_f(r['downstream_avg'], 2)} |")
        L += ["", "`± x`: the spread (max - min) of the seeds' scores; the average is the mean of the task medians.", ""]
        if n_seeds > 1:
            L += ["### Downstream average paired by pre-training seed", ""] + _paired_lines(down_pairs, n_seeds, "avg")
    else:
        L += ["No fine-tuning results.", ""]
    L += ["## Locality and symmetry (Chen et al. 2023) vs the downstream average", "",
          "| variant | locality (pos) | symmetry (pos) | locality (attn) | symmetry (attn) | downstream avg |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['variant']} | {_f(r['loc_pos'])} | {_f(r['sym_pos'])} | {_f(r['loc_attn'])} | "
                 f"{_f(r['sym_attn'])} | {_f(r['downstream_avg'], 2)} |")
    L += ["", "| measure | n variants | Spearman | Pearson |", "|---|---|---|---|"]
    for c in corr:
        L.append(f"| {c['measure']} | {c['n']} | {_f(c['spearman'])} | {_f(c['pearson'])} |")
    L += ["", "`—`: undefined (fewer than 2 variants with both values, or one side constant). "
          "With a handful of variants a correlation is a description, not evidence: at n = 4 even "
          "|rho| = 1 happens by chance with probability 1/12.", "", "## Missing parts and problems", ""]
    L += [f"- {p}" for p in problems] or ["- none"]
    L += [""] + list(run)
    return "\n".join(L).rstrip("\n") + "\n"


def _paired_lines(pairs: List[Paired], n_seeds: int, what: str) -> List[str]:
    if not pairs:
        return ["No pairs.", ""]
    seeds = sorted({s for p in pairs for s in p.diffs})
    L = ["| a - b | " + " | ".join(f"seed {s}" for s in seeds) + " | signs agree | larger spread | settled |",
         "|" + "---|" * (len(seeds) + 4)]
    for p in pairs:
        one = len(p.diffs) < 2  # one shared seed: no sign to agree with, no spread across seeds
        L.append(f"| {p.a} - {p.b} | " + " | ".join(_f(p.diffs.get(s)) for s in seeds)
                 + f" | {'—' if one else 'yes' if p.signs_agree else 'no'} | {'—' if one else _f(p.spread)}"
                 f" | {'no (1 seed)' if one else '**yes**' if p.settled else 'no'} |")
    # in words, so that nobody reads "a > b" as "a is better": the sign is that of a - b in the table's unit
    settled = [f"{p.a} {'lower' if list(p.diffs.values())[0] < 0 else 'higher'} than {p.b}" for p in pairs if p.settled]
    L.append("")
    if n_seeds < 2:
        L.append(f"One pre-training seed: the seeds settle no difference ({what}); rerun with PRETRAIN_SEEDS=2 or more.")
    else:
        L.append("Settled by the seeds (same sign on every seed, and on every seed larger than both variants' spreads): "
                 + (f"{', '.join(settled)} ({what})" if settled else "none") + f". {'The other differences' if settled else 'The differences'} "
                 f"({what}) are not settled: their sign changes between seeds, or they are no larger than a "
                 "variant's own spread across seeds.")
    return L + [""]


def _pyplot():
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # importing fairseq sets the root logger to DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_valid_loss(path: str, variants: List[Variant], unigram: Optional[float]) -> None:
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = ["-", "--", ":", "-."]
    for i, v in enumerate(variants):
        color = f"C{i % 10}"
        for j, s in enumerate(v.seeds):
            if s.curve:
                ax.plot(list(s.curve), list(s.curve.values()), styles[j % len(styles)], color=color,
                        label=v.name if j == 0 else None)
    if unigram is not None:
        ax.axhline(unigram, color="gray", linestyle="--", linewidth=1, label=f"unigram {unigram:.2f}")
    ax.set_xlabel("updates")
    ax.set_ylabel("validation MLM loss (bits)")
    ax.set_title("Validation MLM loss (line style: pre-training seed)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def label_offsets(points: Sequence[Tuple[float, float]], near: float = 0.03) -> List[int]:
    """How many earlier points lie within ``near`` of each point's axis ranges in both coordinates: that
    label is drawn that many lines higher, so the names of (near-)coincident points do not overlap."""
    if not points:
        return []
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    rx, ry = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    return [sum(abs(x - px) < near * rx and abs(y - py) < near * ry for px, py in points[:i])
            for i, (x, y) in enumerate(points)]


def plot_correlation(path: str, rows: List[Dict], corr: List[Dict]) -> None:
    plt = _pyplot()

    fig, axes = plt.subplots(2, 2, figsize=(9, 7))
    for ax, c in zip(axes.flat, corr):
        pts = [(r[c["key"]], r["downstream_avg"], r["variant"]) for r in rows
               if r.get(c["key"]) is not None and r.get("downstream_avg") is not None]
        for (x, y, name), up in zip(pts, label_offsets([(x, y) for x, y, _ in pts])):
            ax.scatter([x], [y])
            ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3 + 9 * up), textcoords="offset points")
        ax.set_xlabel(c["measure"])
        ax.set_ylabel("downstream average")
        ax.set_title(f"n={c['n']}  Spearman {_f(c['spearman'], 2)}  Pearson {_f(c['pearson'], 2)}", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tupe_plugin.analysis.study_report", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the study folder (OUT of train_scripts/study.sh)")
    p.add_argument("--variants", required=True, help="variant names in report order, space-separated; "
                   "NAME:S1,S2 gives a variant its own pre-training seeds")
    p.add_argument("--pretrain-seeds", default="1", help="pre-training seeds of the variants without their own (default 1)")
    p.add_argument("--total-updates", type=int, required=True, help="pre-training budget in updates")
    p.add_argument("--data", help="fairseq data path a:b:c or a folder with data_path.txt (unigram baseline; "
                                  "default OUT/c4/data-bin)")
    p.add_argument("--min-gap-bits", type=float, default=1.0,
                   help="warn unless every variant ends this many bits below the unigram baseline (default 1)")
    p.add_argument("--title", default="Study report")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.pretrain_seeds.replace(",", " ").split()]
    try:
        variants = parse_variants(args.variants, seeds)
    except ValueError as e:
        p.error(str(e))
    problems: List[str] = []
    data = args.data or os.path.join(args.out, "c4", "data-bin")
    if os.path.isfile(os.path.join(data, "data_path.txt")):  # shard folders, absolute or relative to data
        with open(os.path.join(data, "data_path.txt"), encoding="utf-8") as f:
            data = ":".join(os.path.join(data, shard) for shard in f.readline().strip().split(":"))
    try:
        unigram: Optional[float] = entropy_bits(token_counts(data))
    except (OSError, ValueError) as e:
        unigram = None
        problems.append(f"unigram baseline not computed: {e}")
    study = load_study(args.out, variants, problems)
    columns = sorted({c for v in study for s in v.seeds for c in s.tasks})
    rows = [variant_row(v, columns, args.total_updates, unigram) for v in study]
    corr = correlations(rows)
    loss_pairs = paired_differences({v.name: {s.seed: s.final for s in v.seeds if s.final is not None} for v in study})
    down_pairs = paired_differences({v.name: {s.seed: s.downstream(columns) for s in v.seeds
                                              if s.downstream(columns) is not None} for v in study})
    md = report_markdown(rows, columns, study, args.total_updates, unigram, args.min_gap_bits, corr, loss_pairs,
                         down_pairs, problems, args.title, run_section(args.out))
    write_csv_atomic(os.path.join(args.out, "study.csv"), rows)
    write_csv_atomic(os.path.join(args.out, "correlation.csv"),
                     [{k: c[k] for k in ("measure", "n", "spearman", "pearson")} for c in corr])
    write_text(os.path.join(args.out, "report.md"), md)
    plot_valid_loss(os.path.join(args.out, "valid_loss.png"), study, unigram)
    plot_correlation(os.path.join(args.out, "correlation.png"), rows, corr)
    print(md, end="")
    weak = [r["variant"] for r in rows if r["below_unigram_bits"] is None or r["below_unigram_bits"] < args.min_gap_bits]
    if unigram is not None and weak:
        print(f"\nWARNING: {', '.join(weak)} did not end {args.min_gap_bits:g} bit(s) below the unigram baseline "
              f"({unigram:.3f} bits): this preset is not fit for comparing positional encodings.", file=sys.stderr)
    print(f"\nwrote {args.out}/report.md, study.csv, correlation.csv, valid_loss.png, correlation.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
