"""What a ``tupe_roberta`` checkpoint is: its arch, positional variant and sizes.

``python -m tupe_plugin.checkpoint_info CKPT [--fairseq-args]`` prints JSON, or with
``--fairseq-args`` the model flags that rebuild the same model (``--arch ... --max-positions ...``,
the sizes ``--encoder-layers ...`` and the variant flags), so fine-tuning scripts take the variant from the checkpoint instead of
from a flag the user must remember. ``--list-variants`` prints the registry's variant names with
dashes (``tupe-r``, ``rope``, ...), one per line: ``train_scripts/pretrain.sh`` reads its ``VARIANT``
list from it.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
from typing import Any, Callable, Dict

import torch
from tupe_plugin_cli.errors import UsageError

from . import checkpoint_safety  # noqa: F401
from .models.architectures import SIZE_FIELDS
from .models.electra import objective_info
from .models.tupe_roberta import VARIANT_KEY
from .positional import VARIANTS, PositionalVariant


def checkpoint_info(path: str) -> Dict[str, Any]:
    return info_from_state(load_checkpoint(path), path)


def load_checkpoint(path: str) -> Dict[str, Any]:
    """A fairseq checkpoint's dict (``torch.load`` weights only, with the plugin's allowlist); a file that is
    not one is refused by saying so (torch itself ends in e.g. a bare ``KeyError`` for a text file)."""
    try:
        state = torch.load(path, map_location="cpu")
    except (KeyError, EOFError, RuntimeError, pickle.UnpicklingError) as e:  # what torch.load raises for other files
        from tupe_plugin_cli.errors import without_torch_advice

        reason = without_torch_advice(e) if isinstance(e, pickle.UnpicklingError) else f"{type(e).__name__}: {e}"
        raise ValueError(f"{path}: not a readable checkpoint (torch.load: {reason})") from e
    if not isinstance(state, dict) or "model" not in state:
        what = f"a {type(state).__name__}" + (f" with keys {sorted(state)[:5]}" if isinstance(state, dict) else "")
        raise ValueError(f"{path}: not a fairseq checkpoint (it holds {what}, no 'model' state)")
    return state


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
        raise ValueError(
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
        print("\n".join(name.replace("_", "-") for name in VARIANTS))
        return 0
    if args.checkpoint is None:
        raise UsageError("give a CHECKPOINT (or --list-variants)")
    info = checkpoint_info(args.checkpoint)
    print(fairseq_args(info) if args.fairseq_args else json.dumps(info, indent=2))
    return 0


def main(argv=None) -> int:
    from tupe_plugin_cli.commands import checkpoint_info as command  # parses before torch is imported

    return command(argv)


if __name__ == "__main__":
    sys.exit(main())
