"""Download SNLI from the Hugging Face hub (``stanfordnlp/snli``, parquet) as the jsonl that
``preprocess.probing_sets`` reads.

    python -m preprocess.snli_download --out-dir snli [--splits test] [--from-dir MIRROR] [--force]

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
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from preprocess.hub_files import HubError, add_repo_args, download, open_repo
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m preprocess.snli_download", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default="snli", help="folder for the jsonl files (default snli)")
    p.add_argument("--splits", default="train,dev,test", help="comma-separated: train, dev, test (default all)")
    add_repo_args(p, REPO)
    p.add_argument("--force", action="store_true", help="rewrite existing jsonl files")
    args = p.parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    bad = [s for s in splits if s not in SPLITS]
    if bad:
        p.error(f"unknown split(s) {bad}; choose from {', '.join(SPLITS)}")
    out = Path(args.out_dir)
    todo = [s for s in splits if args.force or not (out / f"snli_1.0_{s}.jsonl").exists()]
    for s in sorted(set(splits) - set(todo)):
        log.info(f"{out / f'snli_1.0_{s}.jsonl'} exists, kept (--force rewrites it)")
    if not todo:
        return 0
    try:
        import pyarrow.parquet as pq

        repo = open_repo(args.repo, args.from_dir, args.revision)
        listing = repo.list_files()
        for s in todo:
            pattern = re.compile(rf"^(?:[^/]+/)?{SPLITS[s]}-\d{{5}}-of-\d{{5}}\.parquet$")
            shards = sorted((f for f in listing if pattern.match(f.path)), key=lambda f: f.path)
            if not shards:
                raise HubError(f"{repo.repo_id} has no parquet files for split {SPLITS[s]}")
            rows = [r for path in download(repo, shards, out / ".parquet", log=log)
                    for r in pq.read_table(path).to_pylist()]
            n = write_split(rows, out / f"snli_1.0_{s}.jsonl")
            log.info(f"{out / f'snli_1.0_{s}.jsonl'}: {n} lines ({sum(int(r['label']) < 0 for r in rows)} "
                     "without gold label)")
    except HubError as e:
        log.error(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
