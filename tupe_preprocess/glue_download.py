"""Download GLUE from the Hugging Face hub (``nyu-mll/glue``, parquet) into the raw GLUE folder layout.

    python -m tupe_preprocess.glue_download --out-dir glue_data [--tasks RTE,CoLA] [--from-dir MIRROR] [--force]

Writes ``OUT/TASK/{train,dev,test}.tsv`` (MNLI: ``train``, ``dev_matched``, ``dev_mismatched``,
``test_matched``, ``test_mismatched``) with the file names, headers, column counts and label spellings of
the files the original GLUE download script makes (docs/downloads.md), so ``tupe_preprocess.glue_binarize``
reads them unchanged: both read them from the task registry ``tupe_glue.tasks``. The hub keeps only the text, label and index of each example: columns it lacks
(CoLA's source code, MRPC's string ids, STS-B's genre/file/year, QQP's question ids, MNLI's parses,
genre and annotator labels 2-5) are written empty; CoLA's annotation column is ``*`` for unacceptable
sentences, MNLI dev's ``label1`` repeats the gold label. Tabs and line breaks inside a text (they would
break the TSV) become spaces and are counted. A label of a train or dev split that is none of the task's (the hub's
-1, its mark of an unlabelled example, above all: test rows have it) stops with one line naming the split and row,
exit 1; test files are written without labels.

Each task is written to ``TASK.partial`` and renamed when complete; an existing ``OUT/TASK`` is kept
(``--force`` rebuilds it). Parquet files are kept, verified against the hub's size and SHA-256, in
``OUT/.parquet/`` so a rerun fetches nothing twice.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tupe_glue.tasks import TASKS, GlueTask, Split, is_unlabelled_mark
from tupe_preprocess.download_command import download_parser, run_download, split_rows
from tupe_preprocess.hub_files import HubError, HubFile, HubRepo
from tupe_common.errors import UsageError, exit_main
from tupe_common.io import atomic_dir
from tupe_common.log import get_logger

REPO = "nyu-mll/glue"
log = get_logger("glue_download")
Row = Dict[str, object]


def label_text(task: GlueTask, value: object) -> str:
    """A hub label as the raw files write it: the registry's spelling of the class id, STS-B's score with
    three decimals (0.000 .. 5.000). ValueError for anything else, first the hub's -1 (an unlabelled example):
    as an index into the classes it would quietly be the last class."""
    if value is None or is_unlabelled_mark(value):
        raise ValueError(f"label {value!r}: the hub's mark of an unlabelled example (as every test row has), "
                         "which a labelled file cannot hold")
    if task.regression:
        score = float(value)
        if not 0.0 <= score <= 5.0:  # also false for NaN
            raise ValueError(f"STS-B score {value!r} is not in [0, 5]")
        return f"{score:.3f}"
    class_id = int(value)
    if not 0 <= class_id < len(task.classes):
        raise ValueError(f"label {value!r} is no class id of {task.name} (0..{len(task.classes) - 1})")
    return task.classes[class_id]


def raw_fields(task: GlueTask, split: Split, row: Row) -> List[object]:
    """The fields of one line of ``split``'s raw file, from a hub row: the index, the texts, the label (and its
    copies); the columns the hub lacks stay empty."""
    fields: List[object] = [""] * split.n_fields
    if split.index:
        fields[split.index - 1] = str(int(row["idx"]))
    for column, key in zip(split.inputs, task.hub_texts):
        fields[column - 1] = row[key]
    if split.label is not None:
        for column in (split.label, *split.label_copies):
            fields[column - 1] = label_text(task, row["label"])
        if split.unacceptable_mark:
            fields[split.unacceptable_mark - 1] = "" if int(row["label"]) else "*"
    return fields


_TEXT_BREAKS = re.compile(r"[\t\r\n]")


def clean(field: object, counter: List[int]) -> str:
    if isinstance(field, float) and math.isnan(field):
        return ""
    text = "" if field is None else str(field)
    if _TEXT_BREAKS.search(text):
        counter[0] += 1
        text = _TEXT_BREAKS.sub(" ", text)
    return text


def write_task(task: GlueTask, repo: HubRepo, listing: List[HubFile], out: Path) -> None:
    """``OUT/TASK`` written under ``OUT/TASK.partial``; it replaces an existing one (``--force``) when complete.
    The parquet files stay in ``OUT/.parquet/CONFIG``."""
    with atomic_dir(out / task.name) as tmp:
        for split in task.splits:
            rows = split_rows(repo, listing, split.hub_split, out / ".parquet" / task.hub_config, log, task.hub_config)
            broken = [0]
            with open(os.path.join(tmp, split.file), "w", encoding="utf-8", newline="\n") as f:
                if split.header:
                    f.write("\t".join(split.columns) + "\n")
                for n, r in enumerate(rows, 1):
                    try:
                        fields = raw_fields(task, split, r)
                    except ValueError as e:  # a label that is none of the task's, e.g. -1 in a labelled split
                        raise HubError(f"{task.hub_config}/{split.hub_split}, row {n} (idx {r.get('idx')}): {e}; "
                                       f"nothing of {task.name} written. Is this nyu-mll/glue (--repo, --from-dir)?"
                                       ) from None
                    f.write("\t".join(clean(v, broken) for v in fields) + "\n")
            note = f", {broken[0]} fields with tabs/line breaks replaced by spaces" if broken[0] else ""
            log.info(f"[{task.name}] {split.file}: {len(rows)} lines{note}")


def resolve_tasks(names: str) -> List[GlueTask]:
    """``RTE,CoLA`` or ``ALL`` -> the tasks; :class:`UsageError` naming an unknown one."""
    if names.upper() == "ALL":
        return list(TASKS.values())
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in TASKS]
    if unknown or not wanted:
        what = f"unknown task(s) {', '.join(unknown)}" if unknown else "no task named"
        raise UsageError(f"--tasks {names!r}: {what}; choose from {', '.join(TASKS)} or ALL")
    return [TASKS[n] for n in wanted]


def plan(args: argparse.Namespace) -> List[GlueTask]:
    """The tasks to write: those asked for whose folder is missing (all of them with ``--force``)."""
    out, todo = Path(args.out_dir), []
    for t in resolve_tasks(args.tasks):
        if (out / t.name).exists() and not args.force:
            log.info(f"[{t.name}] {out / t.name} exists, kept (--force rebuilds it)")
        else:
            todo.append(t)
    return todo


def fetch(args: argparse.Namespace, repo: HubRepo, todo: Sequence[GlueTask]) -> None:
    out, listing = Path(args.out_dir), repo.list_files()
    for t in todo:
        write_task(t, repo, listing, out)
    log.info(f"GLUE written to {out}; next: python -m tupe_preprocess.glue_binarize --glue-dir {out} ...")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = download_parser("tupe_preprocess.glue_download", __doc__, REPO, "glue_data", "raw GLUE folder to write",
                        [("--tasks", "ALL", "comma-separated task names or ALL (default)")],
                        force_help="rebuild tasks whose folder exists")
    return run_download(p, argv, log, plan, fetch)


def cli() -> None:
    """The console script ``tupe-glue-download``."""
    exit_main(main, "tupe-glue-download")


if __name__ == "__main__":
    exit_main(main, "glue_download")
