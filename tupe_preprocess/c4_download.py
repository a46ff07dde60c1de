"""Download chosen shards of C4 ``en`` from the Hugging Face hub (``allenai/c4``) for the C4 steps.

    python -m tupe_preprocess.c4_download --out-dir c4/en --shards 0-31 [--valid-shards 0] [--from-dir MIRROR]

Fetches ``en/c4-train.NNNNN-of-01024.json.gz`` for each train shard and
``en/c4-validation.NNNNN-of-00008.json.gz`` for each validation shard into OUT_DIR (the folder
``tupe-c4 run`` reads). Every file is verified against the hub's size and SHA-256; files
already present and verified are skipped, an interrupted download resumes (huggingface_hub keeps the
partial data under ``OUT_DIR/.hub_cache``), and a file is renamed to its final name only once verified.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional, Sequence

from tupe_preprocess.download_command import download_parser, run_download
from tupe_preprocess.hub_files import HubError, HubRepo, download
from tupe_common.errors import UsageError, exit_main
from tupe_common.log import get_logger

REPO = "allenai/c4"
TRAIN_FILES, VALID_FILES = 1024, 8
log = get_logger("c4_download")


def parse_ranges(spec: str, limit: int, what: str) -> List[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]``; every number must be below ``limit``."""
    out: List[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or int(hi or lo) < int(lo):
            raise ValueError(f"{what} {spec!r}: expected ranges like 0-31,40 (got {part!r})")
        out.extend(range(int(lo), int(hi or lo) + 1))
    if any(i >= limit for i in out):
        raise ValueError(f"{what} {spec!r}: C4 en has {limit} such files (0-{limit - 1})")
    return sorted(set(out))


def wanted_paths(train: List[int], valid: List[int]) -> List[str]:
    return ([f"en/c4-train.{i:05d}-of-{TRAIN_FILES:05d}.json.gz" for i in train]
            + [f"en/c4-validation.{i:05d}-of-{VALID_FILES:05d}.json.gz" for i in valid])


def plan(args: argparse.Namespace) -> List[str]:
    """The repository paths of the shards asked for."""
    try:
        paths = wanted_paths(parse_ranges(args.shards, TRAIN_FILES, "--shards"),
                             parse_ranges(args.valid_shards, VALID_FILES, "--valid-shards"))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not paths:
        raise UsageError("--shards and --valid-shards name no shard: give at least one, e.g. --shards 0")
    return paths


def fetch(args: argparse.Namespace, repo: HubRepo, paths: Sequence[str]) -> None:
    listed = {f.path: f for f in repo.list_files("en")}
    missing = [x for x in paths if x not in listed]
    if missing:
        raise HubError(f"{repo.repo_id} does not list {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    download(repo, [listed[x] for x in paths], Path(args.out_dir), log=log)
    log.info(f"{len(paths)} C4 files verified in {args.out_dir}; next: tupe-c4 run {args.out_dir}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = download_parser("tupe_preprocess.c4 download", __doc__, REPO, "c4/en", "folder for the .json.gz files", [
        ("--shards", "0-31", "train shards, e.g. 0-31 or 0-3,8 (default 0-31)"),
        ("--valid-shards", "0", "validation shards (default 0; '' for none)"),
    ])
    return run_download(p, argv, log, plan, fetch)


if __name__ == "__main__":
    exit_main(main, "c4_download")
