"""Small helpers shared by the C4 steps: input opening, progress lines, atomic files."""
from __future__ import annotations

import gzip
import os
import sys
import time
from typing import BinaryIO


def open_binary(path: str) -> BinaryIO:
    """Open a text file for reading bytes; ``.gz`` files are decompressed on the fly."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb", buffering=1 << 20)


def open_output(path: str) -> BinaryIO:
    """Open ``path`` for writing bytes; gzip (level 1, fast) if the name ends with ``.gz``."""
    if path.endswith(".gz"):
        return gzip.GzipFile(filename="", mode="wb", fileobj=open(path, "wb"), compresslevel=1, mtime=0)  # type: ignore[return-value]
    return open(path, "wb", buffering=1 << 20)


def log(prog: str, msg: str) -> None:
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


class Progress:
    """Print a progress line to stderr at most every ``seconds`` seconds (0 disables)."""

    def __init__(self, prog: str, seconds: float) -> None:
        self.prog, self.seconds = prog, seconds
        self.start = self.last = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def maybe(self, make_msg) -> None:
        if self.seconds <= 0:
            return
        now = time.monotonic()
        if now - self.last >= self.seconds:
            self.last = now
            log(self.prog, make_msg(now - self.start))


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
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


def remove_if_exists(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def mb(n: float) -> str:
    return f"{n / 1e6:.1f}MB"

