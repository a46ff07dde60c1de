"""What a ``tupe_roberta`` checkpoint is: its arch, positional variant and sizes.

``python -m tupe_plugin.checkpoint_info CKPT [--fairseq-args]`` prints JSON, or with
``--fairseq-args`` the model flags that rebuild the same model (``--arch ... --max-positions ...``,
the sizes ``--encoder-layers ...`` and the variant flags), so fine-tuning scripts take the variant from the checkpoint instead of
from a flag the user must remember. ``--list-variants`` prints the registry's variant names with
dashes (``tupe-r``, ``rope``, ...), one per line: the values of ``pretrain.sh``'s ``VARIANT``.
The code is ``tupe_plugin_cli/checkpoint_record.py``, which the console script runs without fairseq.
"""
from __future__ import annotations

import sys

from tupe_plugin_cli.checkpoint_record import (  # noqa: F401  (their import path here, used across the plugin)
    checkpoint_info,
    fairseq_args,
    info_from_state,
    model_config,
    model_setting,
    run,
)
from tupe_plugin_cli.checkpoints import load

from . import checkpoint_safety  # noqa: F401

# The one reader of checkpoints (every command, glue/finetune_helper.py, the study): a missing, empty, text,
# damaged or foreign file is refused in one line naming it and what to pass (tupe_plugin_cli/checkpoints.py).
# What a checkpoint records is read in tupe_plugin_cli/checkpoint_record.py, without fairseq.
load_checkpoint = load


if __name__ == "__main__":  # python -m tupe_plugin.checkpoint_info: the console script tupe-checkpoint-info
    from tupe_plugin_cli.commands import dispatch

    sys.exit(dispatch("tupe-checkpoint-info"))
