"""The project's one usage error, for every command (``tupe-*``, ``python -m preprocess...``, ``glue``, the study).

``UsageError``: a wrong option value or setting, found before any work; the command says it in one line and
exits 2, as argparse does for its own usage errors (docs/troubleshooting.md, "Exit codes"). A ``ValueError``,
so the commands' ``except ValueError`` paths and ``tupe_plugin_cli.errors.USER_ERRORS`` keep treating it as
the user's to fix.

``stdout_reader_left()``: what a command does when the reader of its output leaves (``... | head``: a
BrokenPipeError) before it stops quietly, as a Unix tool does.
"""
from __future__ import annotations

import os
import sys


class UsageError(ValueError):
    """A wrong option value or setting (a --length beyond the checkpoint, an OUTPUT that exists without
    --force, an unknown --tasks name, a VARIANTS entry that is not registered): exit 2, nothing changed."""


def stdout_reader_left() -> None:
    """After a BrokenPipeError on stdout: point stdout at /dev/null, so that Python's flush at exit raises no second
    error. The caller then exits quietly (141, 128 + SIGPIPE, is what a shell reports for a tool SIGPIPE ended)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture)
        pass
