"""Atomic outputs and file hashes: the one way this project writes a file a rerun may trust.

Every writer puts the data under ``PATH.partial`` in the same folder, flushes and fsyncs it, then
renames it onto ``PATH`` (``os.replace`` is atomic on POSIX), so a reader never sees half a file and a
killed writer leaves only a ``.partial`` that the next run overwrites. On an exception the temporary
file is removed and ``PATH`` is untouched. Standard library only (cheap to import).
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence

PARTIAL = ".partial"


def remove_if_exists(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a folder so that renames in it survive a crash (best effort: some file systems refuse)."""
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = PARTIAL, fsync: bool = True) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, on error delete it.

    For writers that want a file name (``torch.save``, ``plt.savefig``, a subprocess)::

        with atomic_path("maps.png") as tmp:
            fig.savefig(tmp, format="png")
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + suffix
    remove_if_exists(tmp)
    try:
        yield tmp
        if fsync:
            fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        remove_if_exists(tmp)
        raise
    if fsync:
        fsync_dir(folder)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: Optional[str] = "utf-8", newline: Optional[str] = None,
                fsync: bool = True) -> Iterator[IO[Any]]:
    """``open(path, mode)`` that writes to ``path.partial`` and renames it when the block ends."""
    if "b" in mode:
        encoding = None
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, mode, encoding=encoding, newline=newline) as f:
            yield f


def write_text(path: str, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def write_bytes(path: str, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_json(path: str, obj: Any, indent: Optional[int] = 1) -> None:
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def write_csv(path: str, rows: List[Dict[str, Any]], fieldnames: Optional[Sequence[str]] = None,
              delimiter: str = ",") -> None:
    """Rows (dicts) as CSV with a header; ``fieldnames`` default to the first row's keys."""
    if fieldnames is None:
        if not rows:
            raise ValueError(f"{path}: no rows and no fieldnames: nothing to write a header from")
        fieldnames = list(rows[0])
    with atomic_open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fieldnames), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)


def file_hash(path: str, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (streamed: constant memory)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def read_json(path: str) -> Optional[Any]:
    """The JSON in ``path``; None if the file is missing, empty or not valid JSON (the caller decides)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


DATA_PATH_FILE = "data_path.txt"


def write_data_path(folder: str, shard_dirs: Sequence[str]) -> str:
    """Write ``folder/data_path.txt``: the shard folders, colon-joined, *relative to* ``folder``.

    Relative entries keep a copied or moved data folder self-contained (an absolute path would make
    the copy silently read the original). Returns the line written.
    """
    line = ":".join(os.path.relpath(os.path.abspath(d), os.path.abspath(folder)) for d in shard_dirs)
    write_text(os.path.join(folder, DATA_PATH_FILE), line + "\n")
    return line


def read_data_path(data: str) -> List[str]:
    """Absolute shard folders of ``data``: a folder with ``data_path.txt`` (entries relative to that
    folder, or absolute as older versions wrote them), or a colon-joined list of data folders."""
    record = os.path.join(data, DATA_PATH_FILE)
    if os.path.isfile(record) and not os.path.isfile(os.path.join(data, "dict.txt")):
        with open(record, encoding="utf-8") as f:
            line = f.readline().strip()
        if not line:
            raise ValueError(f"{record} is empty: rerun preprocess/c4/4_layout.sh")
        return [os.path.normpath(os.path.join(os.path.abspath(data), p)) for p in line.split(":")]
    return [os.path.abspath(p) for p in data.split(":") if p]
