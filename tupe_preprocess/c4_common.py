"""Small helpers shared by the C4 steps: input opening, progress lines, the steps' loggers.

Atomic files and hashes come from :mod:`tupe_common.io`, log lines from :mod:`tupe_common.log`.
"""
from __future__ import annotations

import contextlib
import gzip
import logging
import os
import time
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence

from tupe_common.io import read_json, remove_if_exists, write_json
from tupe_common.log import get_logger


def open_binary(path: str) -> BinaryIO:
    """Open a text file for reading bytes; ``.gz`` files are decompressed on the fly."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb", buffering=1 << 20)


def read_text(path: str, fallback: Optional[str], log: logging.Logger) -> str:
    """The whole of a text file (``.gz`` too) as UTF-8; bytes that are not UTF-8 are an error naming the
    file and the fix, or, with ``fallback`` (e.g. ``latin-1``), a warning on ``log`` and the file read in it."""
    with open_binary(path) as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if not fallback:
            raise ValueError(f"{path}: not UTF-8 text ({e}); convert it (iconv -t UTF-8) or pass "
                             "--fallback-encoding latin-1") from e
        log.warning(f"{path}: not UTF-8 ({e.reason} at byte {e.start}); read as {fallback}")
        return data.decode(fallback)


class GzipOutput(gzip.GzipFile):
    """A gzip file written to ``path`` without its name or a time in the header (the same bytes for the same text,
    whatever the temporary name), which closes the file it writes: GzipFile leaves a file it was given open, for the
    garbage collector to close, and an error there (a full disk) would be lost."""

    def __init__(self, path: str) -> None:
        self._raw = open(path, "wb")
        super().__init__(filename="", mode="wb", fileobj=self._raw, compresslevel=1, mtime=0)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def open_output(path: str, final: Optional[str] = None) -> BinaryIO:
    """Open ``path`` for writing bytes; gzip (level 1, fast) if the name it gets, ``final`` (default ``path``: a
    temporary ``OUT.txt.gz.partial`` is gzip for OUT.txt.gz), ends with ``.gz``."""
    if (final or path).endswith(".gz"):
        return GzipOutput(path)  # type: ignore[return-value]
    return open(path, "wb", buffering=1 << 20)


class Progress:
    """Log a progress line at most every ``seconds`` seconds (0 disables)."""

    def __init__(self, prog: str, seconds: float) -> None:
        self.log: logging.Logger = get_logger(prog)
        self.seconds = seconds
        self.start = self.last = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def maybe(self, make_msg: Callable[[float], str]) -> None:
        if self.seconds <= 0:
            return
        now = time.monotonic()
        if now - self.last >= self.seconds:
            self.last = now
            self.log.info(make_msg(now - self.start))


def mb(n: float) -> str:
    return f"{n / 1e6:.1f}MB"


class SettingsMismatch(ValueError):
    """Existing outputs were made with other settings than this run's."""


def settings_diff(recorded: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    """``NAME: recorded R, now C`` for every setting that differs (missing ones read as None)."""
    return [f"{k}: recorded {recorded.get(k)!r}, now {current.get(k)!r}"
            for k in sorted(set(recorded) | set(current)) if recorded.get(k) != current.get(k)]


def check_settings(what: str, recorded: Optional[Dict[str, Any]], current: Dict[str, Any]) -> None:
    """Refuse to reuse ``what`` (finished outputs) when ``recorded`` settings differ from ``current``.

    The message names each differing setting and the two ways out: redo (``--force``; ``FORCE=1`` for
    the shell steps) or a new output folder.
    """
    diff = settings_diff(recorded or {}, current)
    if diff:
        raise SettingsMismatch(
            f"{what} was made with other settings ({'; '.join(diff)}). Rerun with --force (FORCE=1 for "
            "tupe-c4 run) to redo it with the new settings, or write to a new OUT_DIR to keep both")


@contextlib.contextmanager
def claim(record: str, settings: Dict[str, Any], outputs: Sequence[str]) -> Iterator[None]:
    """Write ``record`` with ``settings`` and no summary before any of ``outputs`` changes, so that a rerun knows
    outputs under a record without a summary as a run of this command cut short (redone), and outputs without a
    record as files this command did not write (refused). A run that fails before any output exists takes the
    record back (and the folder it was made in, when that is new and left empty). Extract and spm write their
    summary into the record after; binarize's record is a mark (PREFIX.writing) it removes once PREFIX.done is
    written."""
    folder = os.path.dirname(os.path.abspath(record))
    made = not os.path.isdir(folder)
    write_json(record, {"settings": settings})
    try:
        yield
    except BaseException:
        if not any(os.path.exists(p) for p in outputs):
            remove_if_exists(record)
            if made and not os.listdir(folder):
                os.rmdir(folder)
        raise


def outputs_done(record: str, settings: Dict[str, Any], outputs: List[str], what: str, force: bool) -> bool:
    """For a command that records its settings in the JSON file ``record`` (``{"settings": ...}``):
    True when every path of ``outputs`` exists and was made with these ``settings`` (skip the work);
    False when there is nothing finished or ``force`` is set (do it); SettingsMismatch otherwise, and also
    when an output exists without the record (a user's file, or a run cut short before its record): it is
    never replaced silently."""
    if force:
        return False
    done = read_json(record)
    if done is None:
        there = [p for p in outputs if os.path.exists(p)]
        if there:
            raise SettingsMismatch(f"{there[0]} exists without its record {record} (a file this command did not "
                                   "write, or a run cut short): pass --force to rewrite it, or move it away")
        return False
    check_settings(what, done.get("settings"), settings)
    return all(os.path.isfile(p) for p in outputs)
