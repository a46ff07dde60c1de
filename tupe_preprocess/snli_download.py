"""Download SNLI from the Hugging Face hub (``stanfordnlp/snli``, parquet) as the jsonl that
``tupe_preprocess.probing_sets`` reads.

    python -m tupe_preprocess.snli_download --out-dir snli [--splits test] [--from-dir MIRROR] [--force]

Writes ``OUT/snli_1.0_{train,dev,test}.jsonl`` (the original release's file names), one object per line
with ``sentence1``, ``sentence2`` and ``gold_label`` (``entailment``/``neutral``/``contradiction``, or
``-`` where the annotators had no majority: the hub's label -1), the fields probing_sets uses. The hub
keeps no pair ids, parses or annotator labels, so those fields are absent. Each file is written under
``NAME.partial`` and renamed when complete; an existing file is kept unless ``--force``. Parquet files are
verified against the hub's size and SHA-256 and kept in ``OUT/.parquet/``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import List, Optional, Sequence

from tupe_preprocess.download_command import download_parser, run_download, split_rows
from tupe_preprocess.hub_files import HubRepo
from tupe_common.errors import UsageError, exit_main
from tupe_common.io import atomic_open
from tupe_common.log import get_logger

REPO = "stanfordnlp/snli"
LABELS = ("entailment", "neutral", "contradiction")  # the hub's class ids 0, 1, 2; -1: no gold label
SPLITS = {"train": "train", "dev": "validation", "test": "test"}  # file name part -> hub split
log = get_logger("snli_download")


def write_split(rows, dest: Path) -> int:
    """The hub's rows as SNLI jsonl at ``dest`` (atomically); returns the number of lines."""
    with atomic_open(dest) as f:
        for r in rows:
            label = int(r["label"])
            gold = "-" if label < 0 else LABELS[label]
            f.write(json.dumps({"sentence1": r["premise"], "sentence2": r["hypothesis"], "gold_label": gold},
                               ensure_ascii=False) + "\n")
    return len(rows)


def plan(args: argparse.Namespace) -> List[str]:
    """The splits to write: those asked for whose file is missing (all of them with ``--force``)."""
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    bad = [s for s in splits if s not in SPLITS]
    if bad or not splits:
        what = f"unknown split(s) {', '.join(bad)}" if bad else "no split named"
        raise UsageError(f"--splits {args.splits!r}: {what}; choose from {', '.join(SPLITS)}")
    out = Path(args.out_dir)
    todo = [s for s in splits if args.force or not (out / f"snli_1.0_{s}.jsonl").exists()]
    for s in sorted(set(splits) - set(todo)):
        log.info(f"{out / f'snli_1.0_{s}.jsonl'} exists, kept (--force rewrites it)")
    return todo


def fetch(args: argparse.Namespace, repo: HubRepo, todo: Sequence[str]) -> None:
    out = Path(args.out_dir)
    listing = repo.list_files()
    for s in todo:
        rows = split_rows(repo, listing, SPLITS[s], out / ".parquet", log)
        n = write_split(rows, out / f"snli_1.0_{s}.jsonl")
        log.info(f"{out / f'snli_1.0_{s}.jsonl'}: {n} lines ({sum(int(r['label']) < 0 for r in rows)} "
                 "without gold label)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = download_parser("tupe_preprocess.snli_download", __doc__, REPO, "snli", "folder for the jsonl files",
                        [("--splits", "train,dev,test", "comma-separated: train, dev, test (default all)")],
                        force_help="rewrite existing jsonl files")
    return run_download(p, argv, log, plan, fetch)


def cli() -> None:
    """The console script ``tupe-snli-download``."""
    exit_main(main, "tupe-snli-download")


if __name__ == "__main__":
    exit_main(main, "snli_download")
