"""``tupe-checkpoint-info``: what a ``tupe_roberta`` checkpoint is, its arch, positional variant and sizes (JSON),
or with ``--fairseq-args`` the model flags that rebuild the same model (``--arch ... --max-positions ...``, the
sizes ``--encoder-layers ...`` and the variant flags), so fine-tuning scripts take the variant from the checkpoint
instead of from a flag the user must remember. ``--list-variants`` prints the registry's variant names with dashes
(``tupe-r``, ``rope``, ...), one per line: the values of ``tupe-pretrain``'s ``VARIANT``. The record is read by
``tupe_tools/checkpoint_record.py``, without fairseq (the command imports only torch).
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Dict, Optional

from tupe_common.errors import UsageError
from tupe_common.vocab import dict_in
from tupe_common.checkpoint_file import load
from tupe_tools.checkpoint_record import checkpoint_info, data_dirs, fairseq_args
from tupe_core.registry import names


def find_dict(state: Dict[str, Any]) -> Optional[str]:
    """fairseq's dict.txt of the checkpoint's data (masked_lm: DATA/dict.txt, GLUE: DATA/input0/dict.txt), where
    this machine has it (None otherwise)."""
    return next((dict_in(d) for d in data_dirs(state)[:1]), None)


def trained_dict(path: str) -> Optional[str]:
    """The dict.txt the checkpoint ``path`` was trained with (:func:`find_dict`), where this machine has it."""
    return find_dict(load(path, mmap=True))


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_tools.commands.checkpoint_info_parser``."""
    if args.list_variants:
        print("\n".join(names()))
        return 0
    if args.checkpoint is None:
        raise UsageError("give a CHECKPOINT (or --list-variants)")
    info = checkpoint_info(args.checkpoint)
    print(fairseq_args(info) if args.fairseq_args else json.dumps(info, indent=2))
    return 0
