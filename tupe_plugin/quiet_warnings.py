"""Silence the known third-party warnings that every fairseq run prints, and only those.

fairseq 0.12 builds its config with hydra's pre-1.1 API and calls ``torch.cuda.amp.autocast``; with
today's hydra and torch that prints a page of deprecation warnings on every ``fairseq-train`` (and on
every checkpoint load), which buries the warnings that matter. fairseq's batch iterators also always ask
torch's DataLoader for pinned memory, and on a machine without an accelerator torch pins nothing (nothing
would use it) and warns about it at every epoch. Each filter below matches one exact message (and its
category); any other warning, from these libraries or elsewhere, is shown as before.
Installed on import of ``tupe_plugin`` (``fairseq-train`` imports the ``--user-dir`` package before it
composes its config), so ``fairseq-train --user-dir tupe_plugin`` and our own commands are quiet alike.
``fairseq-hydra-train`` is only partly quieter: hydra warns about its own config (version_base, package
header, schema matching, working directory) before fairseq imports ``common.user_dir``.
fairseq also logs "Please install tensorboardX" on import of its tasks (``text_to_speech``, a task and a
package nothing here uses): our commands drop that one log record (``fairseq-train`` has imported its tasks,
and logged it, before it reads ``--user-dir``).
Set ``TUPE_SHOW_ALL_WARNINGS=1`` to keep every warning and that line.
"""
from __future__ import annotations

import logging
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
    # torch's DataLoader, which fairseq's iterators always build with pin_memory=True: on a CPU-only machine
    # torch does not pin (there is no device to copy to) and says so once per epoch
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
)


# (logger, start of the message) of log records dropped
KNOWN_LOG_RECORDS: Tuple[Tuple[str, str], ...] = (
    ("fairseq.tasks.text_to_speech", "Please install tensorboardX"),
)


class DropRecord(logging.Filter):
    """Drops the records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def install() -> None:
    """Add one ``ignore`` filter per known message and one log filter per known record (idempotent:
    warnings dedups equal filters, a logger gets each prefix once)."""
    if os.environ.get("TUPE_SHOW_ALL_WARNINGS") == "1":
        return
    for category, message in KNOWN:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name, prefix in KNOWN_LOG_RECORDS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropRecord) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(DropRecord(prefix))


install()
