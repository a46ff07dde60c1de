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
from typing import Any, Callable, Dict, Optional

from tupe_plugin_cli.checkpoints import CheckpointError, load
from tupe_plugin_cli.errors import UsageError

from . import checkpoint_safety  # noqa: F401
from .models.architectures import SIZE_FIELDS
from .models.electra import objective_info
from .models.tupe_roberta import VARIANT_KEY
from .positional import PositionalVariant
from .positional.registry import names


# The one reader of checkpoints (every command, glue/finetune_helper.py, the study): a missing, empty, text,
# damaged or foreign file is refused in one line naming it and what to pass (tupe_plugin_cli/checkpoints.py).
load_checkpoint = load


def checkpoint_info(path: str, objective: Optional[str] = None, head: bool = False) -> Dict[str, Any]:
    """What the checkpoint ``path`` is, after the checks of :func:`load_checkpoint`; refused, naming the file,
    when it is not a tupe_roberta checkpoint, not of ``objective`` ("mlm", "electra"), or (``head``) has no
    classification head, i.e. it is not fine-tuned. Tensors are not read (mmap)."""
    state = load_checkpoint(path, mmap=True)
    info = info_from_state(state, path)
    if objective is not None and info["objective"] != objective:
        why = {"mlm": "its discriminator has no trained MLM head; pass a checkpoint pre-trained with OBJECTIVE=mlm",
               "electra": "pass a checkpoint pre-trained with OBJECTIVE=electra"}[objective]
        raise CheckpointError(f"{path}: an {info['objective'].upper()} checkpoint where an {objective.upper()} one "
                              f"is needed: {why}")
    if head and not any(".classification_heads." in k or k.startswith("classification_heads.") for k in state["model"]):
        raise CheckpointError(f"{path}: a pre-trained checkpoint, with no classification head; pass a fine-tuned one "
                              "(glue/finetune.sh with KEEP_CHECKPOINTS=1 keeps its checkpoint_best.pt)")
    return info


def model_config(state: Dict[str, Any]) -> Any:
    """The model settings of a loaded checkpoint: ``cfg.model`` (fairseq >= 0.10, fairseq-hydra-train), else the
    older ``args`` namespace; None if it has neither."""
    cfg = state.get("cfg") or {}
    model_cfg = cfg.get("model") if hasattr(cfg, "get") else None
    return state.get("args") if model_cfg is None else model_cfg


def model_setting(state: Dict[str, Any]) -> Callable[..., Any]:
    """``get(name, default=None)``: one setting of ``model_config(state)``, ``default`` where it is absent or None."""
    model_cfg = model_config(state)

    def get(name: str, default: Any = None) -> Any:
        value = model_cfg.get(name) if hasattr(model_cfg, "get") else getattr(model_cfg, name, None)
        return default if value is None else value

    return get


def info_from_state(state: Dict[str, Any], path: str) -> Dict[str, Any]:
    """``checkpoint_info`` of an already loaded checkpoint dict (``path`` names it in errors)."""
    model_state = state.get("model", {})
    key = next((k for k in model_state if k.endswith(VARIANT_KEY) or k == VARIANT_KEY), None)
    if key is None:
        raise CheckpointError(
            f"{path}: no '{VARIANT_KEY}' in the model state: not a tupe_roberta checkpoint "
            "(for the original TUPE release, run tupe-convert-original first)"
        )
    get = model_setting(state)
    variant = PositionalVariant.from_tensor(model_state[key])
    return {
        "arch": get("arch") or get("_name"),
        "variant": variant.name,
        "variant_flags": variant.flags(),
        "max_positions": get("max_positions"),
        "encoder_layers": get("encoder_layers"),
        "encoder_embed_dim": get("encoder_embed_dim"),
        "encoder_attention_heads": get("encoder_attention_heads"),
        "encoder_ffn_embed_dim": get("encoder_ffn_embed_dim"),
        **objective_info(model_state, get),  # mlm, or electra and its generator's sizes
    }


SIZE_FLAGS = SIZE_FIELDS  # the fields a size sets (models/architectures.py: SIZES)


def fairseq_args(info: Dict[str, Any]) -> str:
    """The flags that rebuild the model: arch, positions, sizes (a run may have resized its arch) and variant."""
    sizes = " ".join(f"--{k.replace('_', '-')} {info[k]}" for k in SIZE_FLAGS if info.get(k) is not None)
    return f"--arch {info['arch']} --max-positions {info['max_positions']} {sizes} {info['variant_flags']}"


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
