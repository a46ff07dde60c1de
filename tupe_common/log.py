"""One logging setup for the project's command-line tools.

``log = setup_logging("c4_extract")`` once in ``main()``, then ``log.info(...)``/``log.warning(...)``.
Lines go to stderr as ``PROG: message`` (warnings as ``PROG: warning: message``, errors as
``PROG: error: message``), so progress, summaries and errors share one format and one stream, and
stdout stays free for results (e.g. a path another script reads). ``--quiet`` maps to WARNING,
``--verbose``/``TUPE_DEBUG=1`` to DEBUG. Standard library only (no torch, no fairseq).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Optional, TextIO

_PREFIX = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = super().format(record)
        return f"{record.name}: {_PREFIX.get(record.levelno, '')}{msg}"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (pytest and redirections replace it)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def setup_logging(prog: str, level: Optional[int] = None, stream: Optional[TextIO] = None) -> logging.Logger:
    """The logger ``prog``, printing ``PROG: message`` lines to stderr (idempotent).

    ``level`` defaults to INFO, or DEBUG when the environment has ``TUPE_DEBUG=1``.
    """
    if level is None:
        level = logging.DEBUG if os.environ.get("TUPE_DEBUG", "") not in ("", "0") else logging.INFO
    logger = logging.getLogger(prog)
    logger.setLevel(level)
    logger.propagate = False  # fairseq's root handler would print each line twice
    for h in list(logger.handlers):
        if getattr(h, "_tupe", False):
            logger.removeHandler(h)
    handler: logging.Handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler._tupe = True  # type: ignore[attr-defined]
    handler.setFormatter(_Formatter("%(message)s"))
    logger.addHandler(handler)
    return logger


def get_logger(prog: str) -> logging.Logger:
    """The logger of ``prog``: set up with defaults if ``setup_logging`` was not called yet."""
    logger = logging.getLogger(prog)
    return logger if logger.handlers else setup_logging(prog)
