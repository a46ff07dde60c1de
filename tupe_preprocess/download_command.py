"""The part every download command (``c4_download``, ``glue_download``, ``snli_download``) shares: its
parser, the parquet shards of a split, and one run that ends in the project's exit codes.

A command supplies two functions: ``plan(args)`` checks the options and returns what to fetch (an empty
list: nothing left to do), ``fetch(args, repo, todo)`` fetches and writes it. Exit codes: 0 done or
nothing to do; 2 a usage error (an unknown option, a bad value: :class:`UsageError` from ``plan``), nothing
fetched; 1 the hub cannot be reached, a file fails verification (:class:`~tupe_preprocess.hub_files.HubError`), or a
``--from-dir`` is missing or a file (an ``--out-dir`` a file), before any work.
"""
from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tupe_preprocess.hub_files import HubError, HubFile, HubRepo, download, open_repo
from tupe_common.errors import command_name, UsageError
from tupe_common.io import need

Plan = Callable[[argparse.Namespace], Sequence[Any]]
Fetch = Callable[[argparse.Namespace, HubRepo, Sequence[Any]], None]


def download_parser(module: str, doc: str, repo_id: str, out_dir: str, out_help: str,
                    options: Sequence[Tuple[str, str, str]], force_help: Optional[str] = None
                    ) -> argparse.ArgumentParser:
    """The parser of ``python -m MODULE``: description and epilog from the module docstring (its first
    paragraph; its third onward), ``--out-dir`` (default ``out_dir``), the command's ``options`` saying
    what to fetch ((flag, default, help), string values), ``--repo``, ``--revision``, ``--from-dir``, and
    ``--force`` when ``force_help`` says what it redoes."""
    parts = doc.split("\n\n", 2)
    p = argparse.ArgumentParser(prog=command_name(f"python -m {module}"), description=parts[0], epilog=parts[-1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=out_dir, help=f"{out_help} (default {out_dir})")
    for flag, default, help_text in options:
        p.add_argument(flag, default=default, help=help_text)
    p.add_argument("--repo", default=repo_id, help=f"hub dataset repository (default {repo_id})")
    p.add_argument("--revision", help="hub revision (branch, tag or commit) to pin")
    p.add_argument("--from-dir", help="a local copy of the repository's files instead of the hub")
    if force_help:
        p.add_argument("--force", action="store_true", help=force_help)
    return p


def run_download(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]], log: logging.Logger,
                 plan: Plan, fetch: Fetch) -> int:
    """Parse ``argv``, plan, open the repository and fetch; returns the exit code (module docstring)."""
    args = parser.parse_args(argv)
    try:
        if args.from_dir:
            need(args.from_dir, "folder")  # missing, or a file: one line naming it, exit 1
        need(args.out_dir, "out")
        todo = plan(args)
    except UsageError as e:
        parser.error(str(e))  # exits 2
    if not todo:
        return 0
    try:
        fetch(args, open_repo(args.repo, args.from_dir, args.revision), todo)
    except HubError as e:
        log.error(str(e))
        return 1
    return 0


def parquet_shards(repo: HubRepo, listing: List[HubFile], split: str, folder: Optional[str] = None) -> List[HubFile]:
    """The parquet files of one split, ``[FOLDER/]SPLIT-00000-of-0000N.parquet`` in order (any one folder
    or none when ``folder`` is None); :class:`HubError` when there are none."""
    where = rf"{re.escape(folder)}/" if folder is not None else r"(?:[^/]+/)?"
    pattern = re.compile(rf"^{where}{re.escape(split)}-\d{{5}}-of-\d{{5}}\.parquet$")
    shards = sorted((f for f in listing if pattern.match(f.path)), key=lambda f: f.path)
    if not shards:
        named = f"{folder}/{split}" if folder is not None else f"split {split}"
        raise HubError(f"{repo.repo_id} has no parquet files for {named} "
                       f"(expected {folder + '/' if folder else ''}{split}-00000-of-0000N.parquet)")
    return shards


def parquet_rows(paths: Sequence[Path]) -> List[Dict[str, Any]]:
    """The rows of the parquet files ``paths``, in order, as dicts."""
    import pyarrow.parquet as pq  # only here: the hf extra; the rest of the command needs no pyarrow

    return [row for p in paths for row in pq.read_table(p).to_pylist()]


def split_rows(repo: HubRepo, listing: List[HubFile], split: str, cache: Path, log: logging.Logger,
               folder: Optional[str] = None) -> List[Dict[str, Any]]:
    """The rows of one split: its parquet shards (``parquet_shards``) downloaded into ``cache`` and verified
    (kept there: a rerun fetches nothing twice), then read in order."""
    return parquet_rows(download(repo, parquet_shards(repo, listing, split, folder=folder), cache, log=log))
