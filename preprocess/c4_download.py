"""Download chosen shards of C4 ``en`` from the Hugging Face hub (``allenai/c4``) for the C4 steps.

    python -m preprocess.c4_download --out-dir c4/en --shards 0-31 [--valid-shards 0] [--from-dir MIRROR]

Fetches ``en/c4-train.NNNNN-of-01024.json.gz`` for each train shard and
``en/c4-validation.NNNNN-of-00008.json.gz`` for each validation shard into OUT_DIR (the folder
``preprocess/c4/run_all.sh`` reads). Every file is verified against the hub's size and SHA-256; files
already present and verified are skipped, an interrupted download resumes (huggingface_hub keeps the
partial data under ``OUT_DIR/.hub_cache``), and a file is renamed to its final name only once verified.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from preprocess.hub_files import HubError, add_repo_args, download, open_repo
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m preprocess.c4_download", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default="c4/en", help="folder for the .json.gz files (default c4/en)")
    p.add_argument("--shards", default="0-31", help="train shards, e.g. 0-31 or 0-3,8 (default 0-31)")
    p.add_argument("--valid-shards", default="0", help="validation shards (default 0; '' for none)")
    add_repo_args(p, REPO)
    args = p.parse_args(argv)
    try:
        paths = wanted_paths(parse_ranges(args.shards, TRAIN_FILES, "--shards"),
                             parse_ranges(args.valid_shards, VALID_FILES, "--valid-shards"))
    except ValueError as e:
        p.error(str(e))
    try:
        repo = open_repo(args.repo, args.from_dir, args.revision)
        listed = {f.path: f for f in repo.list_files("en")}
        missing = [x for x in paths if x not in listed]
        if missing:
            raise HubError(f"{repo.repo_id} does not list {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        download(repo, [listed[x] for x in paths], Path(args.out_dir), log=log)
    except HubError as e:
        log.error(str(e))
        return 1
    log.info(f"{len(paths)} C4 files verified in {args.out_dir}; next: preprocess/c4/run_all.sh {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
