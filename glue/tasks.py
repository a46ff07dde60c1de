"""The GLUE task registry: every fact about a task, in one place, read by every GLUE script.

Read by ``preprocess.glue_binarize`` (files, columns, header, labels), ``glue.finetune_helper``
(classes, metric, epochs, valid subsets), ``glue.collect`` (the paper's columns) and ``glue/grid.sh``
(through ``python -m glue.tasks list``). Facts and their sources: ``docs/glue_protocol.md`` §1
(raw file formats, columns are 1-based) and §3 (metric and epochs per task).

A **custom task** is any other folder under the tasks directory whose ``train.tsv`` and ``dev.tsv``
have SST-2's layout (header ``sentence<TAB>label``): it is binarized, fine-tuned and scored (accuracy,
10 epochs) as SST-2 is, with its labels taken from its train file (``docs/glue_protocol.md`` §9).

    python -m glue.tasks list [--tasks-dir DIR] [--paper]   # task names, one a line
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tupe_common.errors import UsageError

SINGLE_SENTENCE_HEADER = ("sentence", "label")  # SST-2's train/dev header: a custom task has it too


@dataclass(frozen=True)
class Split:
    """One raw file of a task and the fairseq split it becomes."""

    out: str  # fairseq split name: train, valid, valid1, test, test1
    file: str  # raw file name in the task folder
    n_fields: int  # tab-separated fields of every line
    header: bool  # the first line is a header
    inputs: Tuple[int, ...]  # 1-based text columns (one or two)
    label: Optional[int]  # 1-based label column; None for test files (no labels)


@dataclass(frozen=True)
class Column:
    """One column of the results table: a valid subset of a task and how its LR is chosen."""

    name: str  # the paper's column name (MNLI-m, SST, ...) or the task name
    subset: str  # fairseq valid subset
    lr_from: Optional[str] = None  # another column whose best LR this one reports (MNLI-mm: MNLI-m)


@dataclass(frozen=True)
class GlueTask:
    name: str  # the GLUE folder name (also the binaries' TASK-bin and the runs' folder)
    splits: Tuple[Split, ...]
    label_kind: str  # "class" or "regression" (STS-B: a score in [0, 5])
    classes: Optional[Tuple[str, ...]]  # allowed labels; None: any label of the train file (custom)
    metric: str  # fairseq metric name of the criterion: accuracy, mcc or pearson
    epochs: int  # the paper's maximum epochs
    columns: Tuple[Column, ...]  # table columns; the first one selects a run's best validation step
    in_paper: bool = True  # one of the paper's 8 tasks (WNLI and custom tasks are not)
    skip_bad_lines: bool = False  # QQP: drop and count lines with the wrong number of fields
    custom: bool = False  # a custom single-sentence task (SST-2's layout)

    @property
    def n_inputs(self) -> int:
        return len(self.splits[0].inputs)

    @property
    def regression(self) -> bool:
        return self.label_kind == "regression"

    @property
    def num_classes(self) -> Optional[int]:
        """Outputs of the head: 1 for regression, the classes, or None (custom: from the label dict)."""
        if self.regression:
            return 1
        return None if self.classes is None else len(self.classes)

    @property
    def valid_subsets(self) -> Tuple[str, ...]:
        return tuple(c.subset for c in self.columns)


def _splits(n_fields: int, inputs: Tuple[int, ...], label: int, n_test_fields: int, test_inputs: Tuple[int, ...],
            header: bool = True) -> Tuple[Split, ...]:
    """train.tsv/dev.tsv with labels and test.tsv without (the layout of every task but MNLI)."""
    return (Split("train", "train.tsv", n_fields, header, inputs, label),
            Split("valid", "dev.tsv", n_fields, header, inputs, label),
            Split("test", "test.tsv", n_test_fields, True, test_inputs, None))


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")
_MNLI_SPLITS = (
    Split("train", "train.tsv", 12, True, (9, 10), 12),
    Split("valid", "dev_matched.tsv", 16, True, (9, 10), 16),
    Split("valid1", "dev_mismatched.tsv", 16, True, (9, 10), 16),
    Split("test", "test_matched.tsv", 10, True, (9, 10), None),
    Split("test1", "test_mismatched.tsv", 10, True, (9, 10), None),
)


def _one(name: str) -> Tuple[Column, ...]:
    return (Column(name, "valid"),)


# In the order of the grid (glue/grid.sh's default TASKS); WNLI last and outside the paper.
TASKS: Dict[str, GlueTask] = {
    t.name: t
    for t in [
        # CoLA train/dev: source, label, original annotation, sentence; no header (test has one).
        GlueTask("CoLA", _splits(4, (4,), 2, 2, (2,), header=False), "class", _BINARY, "mcc", 10, _one("CoLA")),
        GlueTask("SST-2", _splits(2, (1,), 2, 2, (2,)), "class", _BINARY, "accuracy", 10, _one("SST")),
        GlueTask("MRPC", _splits(5, (4, 5), 1, 5, (4, 5)), "class", _BINARY, "accuracy", 10, _one("MRPC")),
        GlueTask("STS-B", _splits(10, (8, 9), 10, 9, (8, 9)), "regression", None, "pearson", 10, _one("STS")),
        GlueTask("QQP", _splits(6, (4, 5), 6, 3, (2, 3)), "class", _BINARY, "accuracy", 5, _one("QQP"),
                 skip_bad_lines=True),
        # MNLI: a seed's best step is chosen on MNLI-m; MNLI-mm is read at that step and reported at
        # MNLI-m's best LR (docs/glue_protocol.md §5, as the official code selects).
        GlueTask("MNLI", _MNLI_SPLITS, "class", ("contradiction", "entailment", "neutral"), "accuracy", 5,
                 (Column("MNLI-m", "valid"), Column("MNLI-mm", "valid1", lr_from="MNLI-m"))),
        GlueTask("QNLI", _splits(4, (2, 3), 4, 3, (2, 3)), "class", _NLI2, "accuracy", 5, _one("QNLI")),
        GlueTask("RTE", _splits(4, (2, 3), 4, 3, (2, 3)), "class", _NLI2, "accuracy", 10, _one("RTE")),
        GlueTask("WNLI", _splits(4, (2, 3), 4, 3, (2, 3)), "class", _BINARY, "accuracy", 10, _one("WNLI"),
                 in_paper=False),
    ]
}
PAPER_TASKS: Tuple[str, ...] = tuple(name for name, t in TASKS.items() if t.in_paper)
METRIC: Dict[str, str] = {name: t.metric for name, t in TASKS.items()}  # custom tasks: accuracy


def custom_task(name: str) -> GlueTask:
    """A single-sentence task in SST-2's layout: train.tsv and dev.tsv only (a test file is not read)."""
    return GlueTask(name, _splits(2, (1,), 2, 2, (2,))[:2], "class", None, "accuracy", 10, _one(name),
                    in_paper=False, custom=True)


def read_header(path: str) -> Optional[Tuple[str, ...]]:
    """The tab-separated fields of a file's first line (byte-order mark and line end removed)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    return tuple(first.lstrip("\ufeff").rstrip("\r\n").split("\t"))


def is_custom_task_dir(path: str) -> bool:
    """True when ``path/train.tsv`` and ``path/dev.tsv`` both start with the header ``sentence<TAB>label``."""
    return all(read_header(os.path.join(path, f)) == SINGLE_SENTENCE_HEADER for f in ("train.tsv", "dev.tsv"))


def custom_task_names(tasks_dir: str) -> List[str]:
    """Folders under ``tasks_dir`` that are not GLUE tasks and have SST-2's layout, sorted."""
    if not os.path.isdir(tasks_dir):
        return []
    return sorted(name for name in os.listdir(tasks_dir)
                  if name not in TASKS and not name.startswith(".")
                  and is_custom_task_dir(os.path.join(tasks_dir, name)))


def get_task(name: str, tasks_dir: Optional[str] = None, custom: bool = False) -> GlueTask:
    """The task called ``name`` (GLUE names are case-insensitive), or a custom task.

    A name that is not GLUE's is a custom task when ``custom`` is set (its binaries say so) or when
    ``tasks_dir/name`` has SST-2's layout; otherwise UsageError (a ValueError) naming the choices.
    """
    by_lower = {k.lower(): v for k, v in TASKS.items()}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    if custom or (tasks_dir and is_custom_task_dir(os.path.join(tasks_dir, name))):
        return custom_task(name)
    where = f" nor a folder of {tasks_dir} with SST-2's layout (header 'sentence<TAB>label')" if tasks_dir else ""
    raise UsageError(f"unknown task {name!r}: not a GLUE task ({', '.join(TASKS)}){where}")


def table_columns(order: Sequence[str]) -> List[Tuple[GlueTask, Column]]:
    """(task, column) for the paper's column names in ``order`` (glue.published.COLUMNS)."""
    by_name = {c.name: (t, c) for t in TASKS.values() for c in t.columns}
    return [by_name[name] for name in order]


CUSTOM_MARK = "custom_task"  # key of glue_binarize.json that marks the binaries of a custom task


def is_custom_bin(bin_dir: str) -> bool:
    """True when ``preprocess.glue_binarize`` marked the binaries ``bin_dir`` as a custom task's."""
    try:
        with open(os.path.join(bin_dir, "glue_binarize.json"), encoding="utf-8") as f:
            return bool(json.load(f).get(CUSTOM_MARK))
    except (OSError, ValueError):
        return False


def custom_bin_names(glue_bin: str) -> List[str]:
    """Custom tasks among the binaries ``glue_bin/TASK-bin/``."""
    if not os.path.isdir(glue_bin):
        return []
    return [entry[: -len("-bin")] for entry in sorted(os.listdir(glue_bin))
            if entry.endswith("-bin") and is_custom_bin(os.path.join(glue_bin, entry))]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m glue.tasks", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["list"], help="list: task names, one a line")
    p.add_argument("--tasks-dir", help="also list the custom tasks (SST-2's layout) of this folder; with "
                   "binaries (GLUE_BIN), the TASK-bin folders marked custom")
    p.add_argument("--paper", action="store_true", help="only the paper's 8 tasks (+ custom tasks with --tasks-dir)")
    args = p.parse_args(argv)
    names = list(PAPER_TASKS if args.paper else TASKS)
    if args.tasks_dir:
        names += custom_task_names(args.tasks_dir) + custom_bin_names(args.tasks_dir)
    print("\n".join(dict.fromkeys(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
