"""What a ``tupe_roberta`` checkpoint is: its arch, positional variant and sizes.

``python -m tupe_plugin.checkpoint_info CKPT [--fairseq-args]`` prints JSON, or with
``--fairseq-args`` the model flags that rebuild the same model (``--arch ... --max-positions ...``,
the sizes ``--encoder-layers ...`` and the variant flags), so fine-tuning scripts take the variant from the checkpoint instead of
from a flag the user must remember. ``--list-variants`` prints the registry's variant names with
dashes (``tupe-r``, ``rope``, ...), one per line: the values of ``pretrain.sh``'s ``VARIANT``.
"""
from __future__ import annotations

import argparse
import json
import sys

from tupe_plugin_cli.checkpoint_record import (  # noqa: F401  (their import path here, used across the plugin)
    checkpoint_info,
    fairseq_args,
    info_from_state,
    model_config,
    model_setting,
)
from tupe_plugin_cli.checkpoints import load
from tupe_plugin_cli.errors import UsageError

from . import checkpoint_safety  # noqa: F401
from .positional.registry import names

# The one reader of checkpoints (every command, glue/finetune_helper.py, the study): a missing, empty, text,
# damaged or foreign file is refused in one line naming it and what to pass (tupe_plugin_cli/checkpoints.py).
# What a checkpoint records is read in tupe_plugin_cli/checkpoint_record.py, without fairseq.
load_checkpoint = load


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_plugin_cli.commands.checkpoint_info_parser``."""
    if args.list_variants:
        print("\n".join(names()))
        return 0
    if args.checkpoint is None:
        raise UsageError("give a CHECKPOINT (or --list-variants)")
    info = checkpoint_info(args.checkpoint)
    print(fairseq_args(info) if args.fairseq_args else json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":  # python -m tupe_plugin.checkpoint_info: the console script tupe-checkpoint-info
    from tupe_plugin_cli.commands import dispatch

    sys.exit(dispatch("tupe-checkpoint-info"))
