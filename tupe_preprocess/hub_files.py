"""Files of a Hugging Face hub dataset repository: list, download (resumable), verify size and hash.

The download commands (``tupe_preprocess.c4_download``, ``glue_download``, ``snli_download``) talk to the hub
only through a :class:`HubRepo`: :class:`RemoteRepo` uses ``huggingface_hub``; :class:`LocalRepo` reads a
local copy of the repository's files (``--from-dir``: a mirror on a cluster without internet, and the
tests' fixtures). Every file is checked against the listing's size and SHA-256 (LFS files) or git blob
id (small files) before it is used; a file already present and verified is not fetched again.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional

from tupe_common.io import atomic_path, file_hash
from tupe_common.log import get_logger


@dataclass(frozen=True)
class HubFile:
    path: str  # path in the repository, e.g. "en/c4-train.00000-of-01024.json.gz"
    size: int
    sha256: Optional[str] = None  # LFS files
    blob_id: Optional[str] = None  # git blob sha1 (files not in LFS)


class HubError(Exception):
    """The hub could not be reached or a file failed verification (one line for the user)."""


class HubRepo:
    """The two operations the download commands need."""

    repo_id: str

    def list_files(self, folder: Optional[str] = None) -> List[HubFile]:
        """Files of the repository (under ``folder`` only, when given)."""
        raise NotImplementedError

    def fetch(self, f: HubFile, dest: Path) -> None:
        """Write the file's bytes to ``dest`` (a temporary name chosen by the caller)."""
        raise NotImplementedError


class RemoteRepo(HubRepo):
    def __init__(self, repo_id: str, revision: Optional[str] = None):
        self.repo_id, self.revision = repo_id, revision

    def _call(self, what: str, fn, *args, **kwargs):
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()  # no retry chatter: one line if it fails
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # connection, DNS, offline mode, 404, gated repo, ...
            msg = (str(e).strip().splitlines() or [""])[0][:200]
            raise HubError(f"cannot {what} {self.repo_id} on the Hugging Face hub ({type(e).__name__}: {msg}); "
                           "check the network (and HF_HUB_OFFLINE), or pass --from-dir with a local copy") from None

    def list_files(self, folder: Optional[str] = None) -> List[HubFile]:
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        def listing():
            tree = HfApi().list_repo_tree(self.repo_id, path_in_repo=folder, repo_type="dataset", recursive=True,
                                          revision=self.revision)
            return [e for e in tree if isinstance(e, RepoFile)]

        entries = self._call("list", listing)
        return [HubFile(e.path, int(e.size), e.lfs.sha256 if e.lfs else None, None if e.lfs else e.blob_id)
                for e in entries]

    def fetch(self, f: HubFile, dest: Path) -> None:
        from huggingface_hub import hf_hub_download

        cache = dest.parent / ".hub_cache"  # hf_hub_download resumes its .incomplete files from here
        got = self._call("download from", hf_hub_download, self.repo_id, f.path, repo_type="dataset",
                         revision=self.revision, cache_dir=str(cache))
        os.replace(os.path.realpath(got), dest)  # the cached blob, on the same file system


class LocalRepo(HubRepo):
    """A folder holding the repository's files at their repository paths."""

    def __init__(self, root: str, repo_id: str):
        self.root, self.repo_id = Path(root), repo_id
        if not self.root.is_dir():
            raise HubError(f"--from-dir {root} is not a folder")

    def list_files(self, folder: Optional[str] = None) -> List[HubFile]:
        out = []
        for p in sorted((self.root / folder if folder else self.root).rglob("*")):
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.root).parts):
                out.append(HubFile(p.relative_to(self.root).as_posix(), p.stat().st_size, file_hash(p)))
        return out

    def fetch(self, f: HubFile, dest: Path) -> None:
        shutil.copyfile(self.root / f.path, dest)


def git_blob_id(path: Path) -> str:
    """git's id of a file (SHA-1 of ``blob SIZE\0`` and the bytes): what the hub lists for non-LFS files."""
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(f: HubFile, path: Path) -> Optional[str]:
    """None if ``path`` has the listed size and hash, else what differs."""
    size = path.stat().st_size
    if size != f.size:
        return f"size {size} != {f.size} listed on the hub"
    if f.sha256 and file_hash(path) != f.sha256:
        return "SHA-256 differs from the hub's"
    if f.blob_id and not f.sha256 and git_blob_id(path) != f.blob_id:
        return "git blob id differs from the hub's"
    return None


def download(repo: HubRepo, files: Iterable[HubFile], out_dir: Path, name=lambda f: Path(f.path).name,
             log: Optional[logging.Logger] = None) -> List[Path]:
    """Fetch ``files`` into ``out_dir`` (as ``name(f)``), verified; present and verified files are kept.

    A file is written under ``NAME.partial`` and renamed when verified (:func:`tupe_common.io.atomic_path`),
    so a killed run never leaves a file that looks complete. A local file that fails verification is
    reported and fetched again. Progress goes to ``log`` (the calling command's logger).
    """
    log = log or get_logger("hub_files")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in files:
        dest = out_dir / name(f)
        if dest.exists():
            problem = verify(f, dest)
            if problem is None:
                log.info(f"ok (already verified): {dest}")
                paths.append(dest)
                continue
            log.warning(f"{dest}: {problem}; fetching it again")
        with atomic_path(dest) as tmp:
            repo.fetch(f, Path(tmp))
            problem = verify(f, Path(tmp))
            if problem is not None:
                raise HubError(f"{repo.repo_id}/{f.path}: downloaded file failed verification ({problem}); run again")
        log.info(f"downloaded and verified: {dest} ({f.size} bytes)")
        paths.append(dest)
    return paths


def open_repo(repo_id: str, from_dir: Optional[str], revision: Optional[str] = None) -> HubRepo:
    return LocalRepo(from_dir, repo_id) if from_dir else RemoteRepo(repo_id, revision)
