"""Silence the known third-party deprecation warnings that every fairseq run prints, and only those.

fairseq 0.12 builds its config with hydra's pre-1.1 API and calls ``torch.cuda.amp.autocast``; with
today's hydra and torch that prints a page of deprecation warnings on every ``fairseq-train`` (and on
every checkpoint load), which buries the warnings that matter. Each filter below matches one exact
message (and its category); any other warning, from these libraries or elsewhere, is shown as before.
Installed on import of ``tupe_plugin`` (``fairseq-train`` imports the ``--user-dir`` package before it
composes its config), so ``fairseq-train --user-dir tupe_plugin`` and our own commands are quiet alike.
``fairseq-hydra-train`` is only partly quieter: hydra warns about its own config (version_base, package
header, schema matching, working directory) before fairseq imports ``common.user_dir``.
Set ``TUPE_SHOW_ALL_WARNINGS=1`` to keep every warning.
"""
from __future__ import annotations

import os
import warnings
from typing import Tuple, Type

# (category, regular expression matched against the start of the message)
KNOWN: Tuple[Tuple[Type[Warning], str], ...] = (
    # hydra, through fairseq.dataclass.utils.convert_namespace_to_omegaconf
    (UserWarning, r"hydra\.experimental\.initialize\(\) is no longer experimental"),
    (UserWarning, r"hydra\.experimental\.compose\(\) is no longer experimental"),
    (UserWarning, r"\s*The version_base parameter is not specified"),  # Hydra14MigrationWarning
    (UserWarning, r"In '[^']*': Usage of deprecated keyword in package header '# @package _group_'"),
    (UserWarning, r"\s*'[^']*' is validated against ConfigStore schema with the same name"),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated"),
    # torch deprecations of APIs that fairseq 0.12 itself calls
    (FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated"),
    (DeprecationWarning, r"`torch\.jit\.script` is deprecated"),
)


def install() -> None:
    """Add one ``ignore`` filter per known message (idempotent: warnings dedups equal filters)."""
    if os.environ.get("TUPE_SHOW_ALL_WARNINGS") == "1":
        return
    for category, message in KNOWN:
        warnings.filterwarnings("ignore", message=message, category=category)


install()
