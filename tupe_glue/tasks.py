"""The GLUE task registry: every fact about a task, in one place, read by every GLUE script.

Read by ``tupe_preprocess.glue_download`` (each raw file's columns and header, the hub's config, split and text
columns it is made from, the labels' spellings), ``tupe_preprocess.glue_binarize`` (files, columns, header, labels),
``tupe_glue.finetune_helper`` (classes, metric, epochs, valid subsets), ``tupe_glue.collect`` (the paper's columns; the
published rows are ``tupe_glue.published``) and ``tupe_glue.grid`` (the tasks and the paper's grid). Facts and their
sources: ``docs/glue_protocol.md`` §1 (raw file formats, columns are 1-based), §3 (metric, epochs and the grid)
and ``docs/downloads.md`` (the hub's layout).

A **custom task** is any other folder under the tasks directory whose ``train.tsv`` and ``dev.tsv``
have SST-2's layout (header ``sentence<TAB>label``): it is binarized, fine-tuned and scored (accuracy,
10 epochs) as SST-2 is, with its labels taken from its train file (``docs/glue_protocol.md`` §9).

    python -m tupe_glue.tasks list [--tasks-dir DIR] [--paper]   # task names, one a line
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tupe_common.errors import command_name, UsageError, exit_main
from tupe_common.io import PARTIAL



@dataclass(frozen=True)
class Split:
    """One raw file of a task: its layout, the fairseq split it becomes and the hub split it is made from."""

    out: str  # fairseq split name: train, valid, valid1, test, test1
    file: str  # raw file name in the task folder
    columns: Tuple[str, ...]  # every tab-separated field's name, as the header line writes it
    header: bool  # the first line is a header (CoLA train/dev have none: their names are the GLUE paper's)
    inputs: Tuple[int, ...]  # 1-based text columns (one or two)
    label: Optional[int]  # 1-based label column; None for test files (no labels)
    hub_split: str = ""  # the split of the hub's parquet files it is made from ("": not on the hub)
    label_copies: Tuple[int, ...] = ()  # 1-based columns that repeat the label (MNLI's label1)
    unacceptable_mark: Optional[int] = None  # CoLA: the column that holds '*' when the label is 0 (unacceptable)

    @property
    def n_fields(self) -> int:
        return len(self.columns)

    @property
    def index(self) -> Optional[int]:
        """The 1-based column of the example's index (the hub's ``idx``): a first column named index or id."""
        return 1 if self.columns[0] in ("index", "id") else None


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
    classes: Optional[Tuple[str, ...]]  # the labels as the raw files spell them, by the hub's class id; None: any
    # label of the train file (custom)
    metric: str  # fairseq metric name of the criterion: accuracy, mcc or pearson
    epochs: int  # the paper's maximum epochs
    columns: Tuple[Column, ...]  # table columns; the first one selects a run's best validation step
    in_paper: bool = True  # one of the paper's 8 tasks (WNLI and custom tasks are not)
    skip_bad_lines: bool = False  # QQP: drop and count lines with the wrong number of fields
    custom: bool = False  # a custom single-sentence task (SST-2's layout)
    hub_config: str = ""  # the task's config of the hub's GLUE (nyu-mll/glue); "": not on the hub (custom)
    hub_texts: Tuple[str, ...] = ()  # the hub's text columns, in the order of each split's ``inputs``

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


# The hub's (Hugging Face datasets') label of an example that has none: every row of a GLUE test split, SNLI's
# pairs without a gold label. In a train or dev file it is never a class: a classifier would get one class more
# and the dev score would count the unlabelled rows (docs/glue_protocol.md §1).
UNLABELLED = -1


def is_unlabelled_mark(label: object) -> bool:
    """True for the hub's -1 as a file may spell it: ``-1``, ``"-1"``, ``" -1.0 "``."""
    try:
        return float(str(label).strip()) == UNLABELLED
    except ValueError:
        return False


def _splits(columns: Tuple[str, ...], inputs: Tuple[int, ...], label: int, test_columns: Tuple[str, ...],
            test_inputs: Tuple[int, ...]) -> Tuple[Split, ...]:
    """train.tsv/dev.tsv with labels and test.tsv without (the layout of every task but CoLA and MNLI)."""
    return (Split("train", "train.tsv", columns, True, inputs, label, "train"),
            Split("valid", "dev.tsv", columns, True, inputs, label, "validation"),
            Split("test", "test.tsv", test_columns, True, test_inputs, None, "test"))


def _pair(a: str, b: str) -> Tuple[Split, ...]:
    """QNLI, RTE, WNLI: ``index A B label``; test ``index A B``."""
    return _splits(("index", a, b, "label"), (2, 3), 4, ("index", a, b), (2, 3))


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")
_COLA = ("source", "label", "annotation", "sentence")  # no header line in train/dev
_COLA_SPLITS = (
    Split("train", "train.tsv", _COLA, False, (4,), 2, "train", unacceptable_mark=3),
    Split("valid", "dev.tsv", _COLA, False, (4,), 2, "validation", unacceptable_mark=3),
    Split("test", "test.tsv", ("index", "sentence"), True, (2,), None, "test"),
)
_MRPC = ("#1 ID", "#2 ID", "#1 String", "#2 String")
_STSB = ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2")
_MNLI = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
         "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
_MNLI_DEV = _MNLI + ("label1", "label2", "label3", "label4", "label5", "gold_label")
_MNLI_SPLITS = (
    Split("train", "train.tsv", _MNLI + ("label1", "gold_label"), True, (9, 10), 12, "train", label_copies=(11,)),
    Split("valid", "dev_matched.tsv", _MNLI_DEV, True, (9, 10), 16, "validation_matched", label_copies=(11,)),
    Split("valid1", "dev_mismatched.tsv", _MNLI_DEV, True, (9, 10), 16, "validation_mismatched", label_copies=(11,)),
    Split("test", "test_matched.tsv", _MNLI, True, (9, 10), None, "test_matched"),
    Split("test1", "test_mismatched.tsv", _MNLI, True, (9, 10), None, "test_mismatched"),
)


def _one(name: str) -> Tuple[Column, ...]:
    return (Column(name, "valid"),)


# In the order of the grid (glue/grid.sh's default TASKS); WNLI last and outside the paper.
TASKS: Dict[str, GlueTask] = {
    t.name: t
    for t in [
        GlueTask("CoLA", _COLA_SPLITS, "class", _BINARY, "mcc", 10, _one("CoLA"),
                 hub_config="cola", hub_texts=("sentence",)),
        GlueTask("SST-2", _splits(("sentence", "label"), (1,), 2, ("index", "sentence"), (2,)), "class", _BINARY,
                 "accuracy", 10, _one("SST"), hub_config="sst2", hub_texts=("sentence",)),
        # the real train/dev files start with a byte-order mark (read_header and glue_binarize drop it)
        GlueTask("MRPC", _splits(("\ufeffQuality",) + _MRPC, (4, 5), 1, ("index",) + _MRPC, (4, 5)), "class", _BINARY,
                 "accuracy", 10, _one("MRPC"), hub_config="mrpc", hub_texts=("sentence1", "sentence2")),
        GlueTask("STS-B", _splits(_STSB + ("score",), (8, 9), 10, _STSB, (8, 9)), "regression", None, "pearson", 10,
                 _one("STS"), hub_config="stsb", hub_texts=("sentence1", "sentence2")),
        GlueTask("QQP", _splits(("id", "qid1", "qid2", "question1", "question2", "is_duplicate"), (4, 5), 6,
                                ("id", "question1", "question2"), (2, 3)), "class", _BINARY, "accuracy", 5, _one("QQP"),
                 skip_bad_lines=True, hub_config="qqp", hub_texts=("question1", "question2")),
        # MNLI: a seed's best step is chosen on MNLI-m; MNLI-mm is read at that step and reported at
        # MNLI-m's best LR (docs/glue_protocol.md §5, as the official code selects).
        GlueTask("MNLI", _MNLI_SPLITS, "class", ("entailment", "neutral", "contradiction"), "accuracy", 5,
                 (Column("MNLI-m", "valid"), Column("MNLI-mm", "valid1", lr_from="MNLI-m")),
                 hub_config="mnli", hub_texts=("premise", "hypothesis")),
        GlueTask("QNLI", _pair("question", "sentence"), "class", _NLI2, "accuracy", 5, _one("QNLI"),
                 hub_config="qnli", hub_texts=("question", "sentence")),
        GlueTask("RTE", _pair("sentence1", "sentence2"), "class", _NLI2, "accuracy", 10, _one("RTE"),
                 hub_config="rte", hub_texts=("sentence1", "sentence2")),
        GlueTask("WNLI", _pair("sentence1", "sentence2"), "class", _BINARY, "accuracy", 10, _one("WNLI"),
                 in_paper=False, hub_config="wnli", hub_texts=("sentence1", "sentence2")),
    ]
}
PAPER_TASKS: Tuple[str, ...] = tuple(name for name, t in TASKS.items() if t.in_paper)
# The paper's fine-tuning grid (docs/glue_protocol.md §3): every task at each LR with each seed. The one
# copy: tupe_glue.grid (and so glue/grid.sh) and tupe_glue.collect read it; the study's base
# preset writes it out and tests/test_single_sources.py checks that it agrees.
PAPER_LRS: Tuple[str, ...] = ("2e-5", "3e-5", "4e-5", "5e-5")
PAPER_SEEDS: Tuple[str, ...] = ("1", "2", "3", "4", "5")
METRIC: Dict[str, str] = {name: t.metric for name, t in TASKS.items()}  # custom tasks: accuracy


def custom_task(name: str) -> GlueTask:
    """A single-sentence task in SST-2's layout: train.tsv and dev.tsv only (a test file is not read)."""
    train, dev = (Split(s.out, s.file, s.columns, s.header, s.inputs, s.label) for s in TASKS["SST-2"].splits[:2])
    return GlueTask(name, (train, dev), "class", None, "accuracy", 10, _one(name), in_paper=False, custom=True)


def read_header(path: str) -> Optional[Tuple[str, ...]]:
    """The tab-separated fields of a file's first line (byte-order mark and line end removed)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    return tuple(first.lstrip("\ufeff").rstrip("\r\n").split("\t"))


SINGLE_SENTENCE_HEADER = TASKS["SST-2"].splits[0].columns  # sentence<TAB>label: a custom task has it too


def is_custom_task_dir(path: str) -> bool:
    """True when ``path/train.tsv`` and ``path/dev.tsv`` both start with the header ``sentence<TAB>label``."""
    return all(read_header(os.path.join(path, f)) == SINGLE_SENTENCE_HEADER for f in ("train.tsv", "dev.tsv"))


def custom_task_names(tasks_dir: str) -> List[str]:
    """Folders under ``tasks_dir`` that are not GLUE tasks and have SST-2's layout, sorted; a download's unfinished
    ``TASK.partial`` (tupe_common.io.PARTIAL) is not a task."""
    if not os.path.isdir(tasks_dir):
        return []
    return sorted(name for name in os.listdir(tasks_dir)
                  if name not in TASKS and not name.startswith(".") and not name.endswith(PARTIAL)
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
    """(task, column) for the paper's column names in ``order`` (tupe_glue.published.COLUMNS)."""
    by_name = {c.name: (t, c) for t in TASKS.values() for c in t.columns}
    return [by_name[name] for name in order]


CUSTOM_MARK = "custom_task"  # key of glue_binarize.json that marks the binaries of a custom task


def is_custom_bin(bin_dir: str) -> bool:
    """True when ``tupe_preprocess.glue_binarize`` marked the binaries ``bin_dir`` as a custom task's."""
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
    p = argparse.ArgumentParser(prog=command_name("python -m tupe_glue.tasks"), description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["list"], help="list: task names, one a line")
    p.add_argument("--tasks-dir", help="also list the custom tasks (SST-2's layout) of this folder; with "
                   "binaries (GLUE_BIN), the TASK-bin folders marked custom")
    p.add_argument("--paper", action="store_true", help="only the paper's 8 tasks (+ custom tasks with --tasks-dir)")
    args = p.parse_args(argv)
    names = list(PAPER_TASKS if args.paper else TASKS)
    if args.tasks_dir:
        from tupe_common.io import need

        need(args.tasks_dir, "folder")  # missing, or a file: one line naming it, exit 1
        names += custom_task_names(args.tasks_dir) + custom_bin_names(args.tasks_dir)
    print("\n".join(dict.fromkeys(names)))
    return 0


def cli() -> None:
    """The console script ``tupe-glue-tasks``."""
    exit_main(main, "tupe-glue-tasks")


if __name__ == "__main__":
    exit_main(main, "python -m tupe_glue.tasks")
