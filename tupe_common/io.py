"""Atomic outputs and file hashes: the one way this project writes a file a rerun may trust.

Every writer puts the data under ``PATH.partial`` in the same folder, flushes and fsyncs it, then
renames it onto ``PATH`` (``os.replace`` is atomic on POSIX), so a reader never sees half a file and a
killed writer leaves only a ``.partial`` that the next run overwrites. On an exception the temporary
file is removed and ``PATH`` is untouched. A folder is written the same way (:func:`atomic_dir`). A full disk (or
quota) while writing is a :class:`DiskFullError` naming ``PATH``; only the temporary is removed, never a finished file.
Inputs are checked before any work (:func:`need`, :func:`utf8_lines`). Paths may be ``str`` or ``pathlib.Path``. Standard library only (cheap to import: no torch, no fairseq).
"""
from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import json
import os
import shutil
import tempfile
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

PARTIAL = ".partial"
PathLike = Union[str, "os.PathLike[str]"]
FULL = {errno.ENOSPC: "no space left on its disk", errno.EDQUOT: "the disk quota is used up"}  # errno -> the line's words


class DiskFullError(OSError):
    """Writing ``filename`` stopped on a full disk or quota (errno ENOSPC or EDQUOT): its one line names the path
    being written and the fix; what was half written is removed by the writer that raises it."""

    def __str__(self) -> str:
        return (f"{self.filename}: {FULL[self.errno]} while writing it (the half-written file is removed); free space "
                "there, or write to a folder on another disk")


def full_disk(error: BaseException) -> Optional[int]:
    """ENOSPC or EDQUOT when ``error`` reports a full disk or quota, else None: an OSError by its errno; a library's
    own error (safetensors, torch's zip writer) by the OS's words for it in its text."""
    if isinstance(error, OSError):
        return error.errno if error.errno in FULL else None
    return next((code for code in FULL if os.strerror(code) in str(error)), None)


def raise_if_full(error: BaseException, path: PathLike, kind: type = DiskFullError) -> None:
    """Raise ``kind`` (:class:`DiskFullError`, or an OSError class whose line says what else happened) naming
    ``path`` (the file or folder being written) when ``error`` is a full disk's (:func:`full_disk`); else nothing,
    and the caller re-raises ``error``."""
    code = full_disk(error)
    if code is not None:
        raise kind(code, os.strerror(code), os.fspath(path)) from error


def remove_if_exists(path: PathLike) -> None:
    """Delete the file ``path``; nothing if it is not there."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def remove_tree(path: PathLike) -> None:
    """Delete the folder ``path`` with its contents (a file or link: just it); nothing if absent."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        remove_if_exists(path)


def fsync_file(path: PathLike) -> None:
    """Flush the file ``path`` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: PathLike) -> None:
    """fsync a folder so that renames in it survive a crash (best effort: some file systems refuse)."""
    try:
        fd = os.open(os.fspath(path) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: PathLike, suffix: str = PARTIAL, fsync: bool = True) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, on error delete it (a full
    disk: a :class:`DiskFullError` naming ``path``).

    For writers that want a file name (``torch.save``, ``plt.savefig``, a subprocess)::

        with atomic_path("maps.png") as tmp:
            fig.savefig(tmp, format="png")  # name the format: the file name ends with .partial
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + suffix
    remove_if_exists(tmp)
    try:
        yield tmp
        if fsync:
            fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        remove_if_exists(tmp)
        raise_if_full(e, path)
        raise
    if fsync:
        fsync_dir(folder)


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: Optional[str] = "utf-8", newline: Optional[str] = None,
                fsync: bool = True) -> Iterator[IO[Any]]:
    """``open(path, mode)`` that writes to ``path.partial`` and renames it when the block ends."""
    if "b" in mode:
        encoding = None
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, mode, encoding=encoding, newline=newline) as f:
            yield f


@contextlib.contextmanager
def atomic_dir(path: PathLike) -> Iterator[str]:
    """Yield an empty folder ``path.partial`` to fill; when the block ends it replaces ``path``.

    A ``path.partial`` left by a killed run is removed first. An existing ``path`` is moved into a fresh
    folder ``path.old-XXXXXX`` (``tempfile.mkdtemp``: never a folder the user has, such as ``path.old``), the
    new folder renamed onto ``path``, then that fresh folder deleted (a folder cannot be renamed onto a
    non-empty one), so ``path`` is never half written: it is the old folder, absent for an instant, or the
    complete new one. On an exception ``path.partial`` is deleted and ``path`` is untouched (a full disk: a
    :class:`DiskFullError` naming ``path``).
    """
    path = os.fspath(path).rstrip(os.sep) or os.sep  # "hf/" is "hf": its siblings are named from it
    tmp = path + PARTIAL
    remove_tree(tmp)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException as e:
        remove_tree(tmp)
        raise_if_full(e, path)
        raise
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.lexists(path):
        aside = tempfile.mkdtemp(dir=parent, prefix=os.path.basename(path) + ".old-")  # only this call's
        old = os.path.join(aside, os.path.basename(path))
        os.rename(path, old)
        try:
            os.rename(tmp, path)
        except BaseException:
            os.rename(old, path)  # put the old folder back where it was
            os.rmdir(aside)
            raise
        remove_tree(aside)
    else:
        os.rename(tmp, path)
    fsync_dir(parent)


def write_text(path: PathLike, text: str) -> None:
    """``text`` (UTF-8) into ``path``, atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def write_json(path: PathLike, obj: Any, indent: Optional[int] = 1) -> None:
    """``obj`` as JSON and a final newline into ``path``, atomically."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def write_csv(path: PathLike, rows: List[Dict[str, Any]], fieldnames: Optional[Sequence[str]] = None,
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


def file_hash(path: PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (streamed: constant memory)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


FINGERPRINT_BYTES = 1 << 20


def file_fingerprint(path: PathLike) -> str:
    """A cheap identity of a large file (a checkpoint, a binary shard): sha256 of its size, first and last MiB (the
    whole file when smaller), 16 hex digits. Two checkpoints of one run differ in both (the pickled header holds
    the update count; the tensors fill the end); it reads 2 MiB whatever the size. Raises OSError."""
    digest = hashlib.sha256()
    size = os.path.getsize(path)
    digest.update(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(FINGERPRINT_BYTES))
        if size > 2 * FINGERPRINT_BYTES:
            f.seek(size - FINGERPRINT_BYTES)
        digest.update(f.read())
    return digest.hexdigest()[:16]


def folder_fingerprint(path: PathLike) -> str:
    """``file_fingerprint`` of a folder: every file under it, by relative name, in sorted order. Raises OSError
    (NotADirectoryError, FileNotFoundError) where ``path`` is not a folder."""
    if not os.path.isdir(path):
        raise NotADirectoryError(f"{path}: not a folder")
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            digest.update(f"{os.path.relpath(full, path)}\0{file_fingerprint(full)}\0".encode())
    return digest.hexdigest()[:16]


def read_json(path: PathLike) -> Optional[Any]:
    """The JSON in ``path``; None if the file is missing, empty or not valid JSON (the caller decides)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def text_from(path: PathLike, begin: int, most: Optional[int] = None) -> str:
    """The text of ``path`` from byte ``begin`` (a log's lines since then), undecodable bytes replaced; with ``most``,
    at most its last ``most`` bytes."""
    with open(path, "rb") as f:
        f.seek(begin if most is None else max(begin, os.path.getsize(path) - most))
        return f.read().decode("utf-8", errors="replace")


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
            raise ValueError(f"{record} is empty: rerun python -m tupe_preprocess.c4 layout (or run_all.sh STEPS=4)")
        return [os.path.normpath(os.path.join(os.path.abspath(data), p)) for p in line.split(":")]
    return [os.path.abspath(p) for p in data.split(":") if p]


def need(path: PathLike, kind: str = "file") -> str:
    """``path`` as a str when it is an existing ``kind`` (file or folder; ``out``: a folder to write, which may not
    exist yet, but nothing else may stand there or above it), else the OS error that
    :func:`tupe_common.errors.message` turns into one line naming it ('P: no such file or folder', 'P: is a
    folder, where a file is expected', 'P: is not a folder ...'), raised before any work."""
    p = os.fspath(path)
    if kind == "out":
        above = p
        while above and not os.path.exists(above):
            above = os.path.dirname(above.rstrip(os.sep))
        if above and not os.path.isdir(above):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), above)
        return p
    if not os.path.exists(p):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), p)
    if kind == "file" and os.path.isdir(p):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), p)
    if kind == "folder" and not os.path.isdir(p):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), p)
    return p


def utf8_lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    """(line number, line) of a UTF-8 text file; a line that is not UTF-8 is a ValueError naming the file, the line
    and the byte, and the fix."""
    with open(need(path), "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{os.fspath(path)}: line {number} is not UTF-8 (byte {e.start + 1} of the line is "
                                 f"{raw[e.start:e.start + 1]!r}); save the file as UTF-8") from None


def write_csv_atomic(path: str, rows: List[Dict], columns: Sequence[str] = ()) -> None:
    """``columns`` (the header even of a table with no rows, which a CSV reader such as pandas refuses when the
    file is empty), then any other key of the rows; floats to 6 significant digits, None as an empty cell."""
    keys = list(dict.fromkeys([*columns, *(k for r in rows for k in r)]))
    if columns and len(keys) > len(columns):
        raise ValueError(f"{path}: columns {keys[len(columns):]} are not in the table's declared columns")
    cells = [{k: ("" if r.get(k) is None else f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in keys}
             for r in rows]
    write_csv(path, cells, fieldnames=keys)
