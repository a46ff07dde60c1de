"""The project's one usage error, for every command (``tupe-*``, ``python -m preprocess...``, ``glue``, the study).

``UsageError``: a wrong option value or setting, found before any work; the command says it in one line and
exits 2, as argparse does for its own usage errors (docs/troubleshooting.md, "Exit codes"). A ``ValueError``,
so the commands' ``except ValueError`` paths and ``tupe_plugin_cli.errors.USER_ERRORS`` keep treating it as
the user's to fix.
"""
from __future__ import annotations


class UsageError(ValueError):
    """A wrong option value or setting (a --length beyond the checkpoint, an OUTPUT that exists without
    --force, an unknown --tasks name, a VARIANTS entry that is not registered): exit 2, nothing changed."""
