"""Download GLUE from the Hugging Face hub (``nyu-mll/glue``, parquet) into the raw GLUE folder layout.

    python -m preprocess.glue_download --out-dir glue_data [--tasks RTE,CoLA] [--from-dir MIRROR] [--force]

Writes ``OUT/TASK/{train,dev,test}.tsv`` (MNLI: ``train``, ``dev_matched``, ``dev_mismatched``,
``test_matched``, ``test_mismatched``) with the file names, headers, column counts and label spellings of
the files the original GLUE download script makes (docs/downloads.md), so ``preprocess.glue_binarize``
reads them unchanged. The hub keeps only the text, label and index of each example: columns it lacks
(CoLA's source code, MRPC's string ids, STS-B's genre/file/year, QQP's question ids, MNLI's parses,
genre and annotator labels 2-5) are written empty; CoLA's annotation column is ``*`` for unacceptable
sentences, MNLI dev's ``label1`` repeats the gold label. Tabs and line breaks inside a text (they would
break the TSV) become spaces and are counted.

Each task is written to ``TASK.partial`` and renamed when complete; an existing ``OUT/TASK`` is kept
(``--force`` rebuilds it). Parquet files are kept, verified against the hub's size and SHA-256, in
``OUT/.parquet/`` so a rerun fetches nothing twice.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from preprocess.download_command import download_parser, parquet_rows, parquet_shards, run_download
from preprocess.hub_files import HubFile, HubRepo, download
from tupe_common.errors import UsageError
from tupe_common.io import atomic_dir
from tupe_common.log import get_logger

REPO = "nyu-mll/glue"
log = get_logger("glue_download")
Row = Dict[str, object]


@dataclass(frozen=True)
class RawFile:
    name: str  # file in OUT/TASK/
    split: str  # hub split
    header: Optional[str]  # None: no header line (CoLA train/dev)
    row: Callable[[Row], List[str]]  # hub row -> the file's fields


@dataclass(frozen=True)
class GlueTask:
    name: str  # folder name of the raw layout
    config: str  # hub config
    files: Tuple[RawFile, ...]


def _digit(r: Row) -> str:
    return str(int(r["label"]))


def _named(names: Sequence[str]) -> Callable[[Row], str]:
    return lambda r: names[int(r["label"])]


def _score(r: Row) -> str:
    return f"{float(r['label']):.3f}"  # STS-B scores as the raw files write them (0.000 .. 5.000)


def _standard(name: str, config: str, label: Callable[[Row], str], head: str, test_head: str,
              train_dev: Callable, test: Callable) -> GlueTask:
    """A task with train.tsv, dev.tsv, test.tsv."""
    return GlueTask(name, config, (
        RawFile("train.tsv", "train", head, lambda r: train_dev(r, label)),
        RawFile("dev.tsv", "validation", head, lambda r: train_dev(r, label)),
        RawFile("test.tsv", "test", test_head, test),
    ))


def _idx(r: Row) -> str:
    return str(int(r["idx"]))


NLI2 = ("entailment", "not_entailment")
MNLI_LABELS = ("entailment", "neutral", "contradiction")  # the hub's class ids 0, 1, 2
MNLI_HEAD = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2")


def _mnli_fields(r: Row) -> List[str]:
    return [_idx(r), "", "", "", "", "", "", "", r["premise"], r["hypothesis"]]


def _pair_task(name: str, config: str, a: str, b: str, label: Callable[[Row], str]) -> GlueTask:
    """QNLI, RTE, WNLI: ``index A B label``; test ``index A B``."""
    head_a, head_b = ("question", "sentence") if config == "qnli" else ("sentence1", "sentence2")
    return _standard(
        name, config, label, f"index\t{head_a}\t{head_b}\tlabel", f"index\t{head_a}\t{head_b}",
        lambda r, lab: [_idx(r), r[a], r[b], lab(r)], lambda r: [_idx(r), r[a], r[b]],
    )


TASKS: Dict[str, GlueTask] = {t.name: t for t in [
    GlueTask("CoLA", "cola", (
        # source, label, annotation ('*' = judged unacceptable), sentence; no header
        RawFile("train.tsv", "train", None, lambda r: ["", _digit(r), "" if int(r["label"]) else "*", r["sentence"]]),
        RawFile("dev.tsv", "validation", None, lambda r: ["", _digit(r), "" if int(r["label"]) else "*", r["sentence"]]),
        RawFile("test.tsv", "test", "index\tsentence", lambda r: [_idx(r), r["sentence"]]),
    )),
    _standard("SST-2", "sst2", _digit, "sentence\tlabel", "index\tsentence",
              lambda r, lab: [r["sentence"], lab(r)], lambda r: [_idx(r), r["sentence"]]),
    GlueTask("MRPC", "mrpc", tuple(
        RawFile(f, split, "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",  # the real files start with a BOM
                lambda r: [_digit(r), "", "", r["sentence1"], r["sentence2"]])
        for f, split in (("train.tsv", "train"), ("dev.tsv", "validation"))
    ) + (RawFile("test.tsv", "test", "index\t#1 ID\t#2 ID\t#1 String\t#2 String",
                 lambda r: [_idx(r), "", "", r["sentence1"], r["sentence2"]]),)),
    _standard("STS-B", "stsb", _score,
              "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
              "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2",
              lambda r, lab: [_idx(r), "", "", "", "", "", "", r["sentence1"], r["sentence2"], lab(r)],
              lambda r: [_idx(r), "", "", "", "", "", "", r["sentence1"], r["sentence2"]]),
    _standard("QQP", "qqp", _digit,
              "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "id\tquestion1\tquestion2",
              lambda r, lab: [_idx(r), "", "", r["question1"], r["question2"], lab(r)],
              lambda r: [_idx(r), r["question1"], r["question2"]]),
    GlueTask("MNLI", "mnli", (
        RawFile("train.tsv", "train", MNLI_HEAD + "\tlabel1\tgold_label",
                lambda r: _mnli_fields(r) + [MNLI_LABELS[int(r["label"])]] * 2),
        *(RawFile(f"dev_{m}.tsv", f"validation_{m}", MNLI_HEAD + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
                  lambda r: _mnli_fields(r) + [MNLI_LABELS[int(r["label"])], "", "", "", "", MNLI_LABELS[int(r["label"])]])
          for m in ("matched", "mismatched")),
        *(RawFile(f"test_{m}.tsv", f"test_{m}", MNLI_HEAD, _mnli_fields) for m in ("matched", "mismatched")),
    )),
    _pair_task("QNLI", "qnli", "question", "sentence", _named(NLI2)),
    _pair_task("RTE", "rte", "sentence1", "sentence2", _named(NLI2)),
    _pair_task("WNLI", "wnli", "sentence1", "sentence2", _digit),
]}

_TEXT_BREAKS = re.compile(r"[\t\r\n]")


def clean(field: object, counter: List[int]) -> str:
    if isinstance(field, float) and math.isnan(field):
        return ""
    text = "" if field is None else str(field)
    if _TEXT_BREAKS.search(text):
        counter[0] += 1
        text = _TEXT_BREAKS.sub(" ", text)
    return text


def write_task(task: GlueTask, repo: HubRepo, listing: List[HubFile], out: Path, cache: Path) -> None:
    """``OUT/TASK`` written under ``OUT/TASK.partial``; it replaces an existing one (``--force``) when complete."""
    with atomic_dir(out / task.name) as tmp:
        for raw in task.files:
            shards = parquet_shards(repo, listing, raw.split, folder=task.config)
            rows = parquet_rows(download(repo, shards, cache / task.config, log=log))
            broken = [0]
            with open(os.path.join(tmp, raw.name), "w", encoding="utf-8", newline="\n") as f:
                if raw.header is not None:
                    f.write(raw.header + "\n")
                for r in rows:
                    f.write("\t".join(clean(v, broken) for v in raw.row(r)) + "\n")
            note = f", {broken[0]} fields with tabs/line breaks replaced by spaces" if broken[0] else ""
            log.info(f"[{task.name}] {raw.name}: {len(rows)} lines{note}")


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
    out = Path(args.out_dir)
    listing = repo.list_files()
    for t in todo:
        write_task(t, repo, listing, out, out / ".parquet")
    log.info(f"GLUE written to {out}; next: python -m preprocess.glue_binarize --glue-dir {out} ...")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = download_parser("preprocess.glue_download", __doc__, REPO, "glue_data", "raw GLUE folder to write",
                        [("--tasks", "ALL", "comma-separated task names or ALL (default)")],
                        force_help="rebuild tasks whose folder exists")
    return run_download(p, argv, log, plan, fetch)


if __name__ == "__main__":
    sys.exit(main())
