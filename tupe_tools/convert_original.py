"""Convert the original TUPE release (guolinke/TUPE, a 2019 fairseq fork) to a ``tupe_roberta`` checkpoint.

    tupe-convert-original tupe_ckp/checkpoint.pt tupe_r/model.pt --dict tupe_ckp/dict.txt
    python -m tupe_tools.convert_original IN.pt OUT.pt [--dict dict.txt] [--force]

This module is the writer and the CLI: it builds the plugin model the way ``fairseq-train`` would,
loads the mapped tensors through fairseq's own ``load_state_dict`` and writes the checkpoint
atomically. Reading the release safely, its config, the key map and the checks are in
``original_release.py``; the release's layout and what maps to what are in ``docs/original_release.md``.

The arch is ``tupe_r_*`` with ``rel_pos`` and ``tupe_a_*`` without (the original always unties
[CLS]). The written checkpoint carries the positional variant (``VARIANT_KEY``), a fairseq ``cfg``
(task ``masked_lm``) and ``classification_head_style="release"`` in its model args (the release's
GLUE head), so ``fairseq-train --restore-file``, ``fairseq-validate`` and
``TupeRobertaModel.from_pretrained`` load it.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import warnings
from typing import Dict, Optional, Sequence, Tuple

import torch

from tupe_common.io import atomic_open, atomic_path, file_hash

from tupe_plugin.build_task import DictionaryTask, numbered_dictionary
from .original_release import (  # noqa: F401  (ConversionError and convert's parts are this module's API too)
    NEW,
    ConversionError,
    OriginalConfig,
    check_buckets,
    head_shapes,
    load_original,
    map_state,
    original_config,
)
from tupe_tools.errors import UsageError
from tupe_tools.checkpoint_record import checkpoint_info, fairseq_args

# Recorded in the converted checkpoint's model args: the release's classification head style.
CLASSIFICATION_HEAD_STYLE = "release"


class OutputExistsError(ConversionError, UsageError):
    """OUTPUT (or a different dict.txt beside it) exists and --force was not given: nothing is written (exit 2)."""


def build_dictionary(cfg: OriginalConfig, dict_path: Optional[str]):
    from fairseq.data import Dictionary

    if dict_path is None:
        return numbered_dictionary(cfg.vocab_size)
    try:
        d = Dictionary.load(dict_path)
    except Exception as e:
        raise ConversionError(f"{dict_path}: not a fairseq dict.txt ({e})") from None
    d.add_symbol("<mask>")  # masked_lm and sentence_prediction add it, so the embedding has that row
    if len(d) != cfg.vocab_size:
        raise ConversionError(
            f"{dict_path} has {len(d) - 5} symbols, i.e. {len(d)} ids with the 4 specials and <mask>, but the "
            f"checkpoint's embedding has {cfg.vocab_size} rows: it is not this checkpoint's dictionary"
        )
    return d


def plugin_args(cfg: OriginalConfig, data_dir: str) -> argparse.Namespace:
    """The Namespace fairseq-train would parse for this model with task masked_lm."""
    from fairseq import options

    from tupe_plugin.models.architectures import tupe_roberta_base_architecture  # noqa: F401  (registers archs)

    argv = [
        data_dir, "--task", "masked_lm", "--criterion", "masked_lm", "--arch", cfg.arch,
        "--max-positions", str(cfg.max_positions), "--tokens-per-sample", str(cfg.max_positions),
        "--sample-break-mode", "complete",
        "--encoder-layers", str(cfg.layers), "--encoder-embed-dim", str(cfg.embed_dim),
        "--encoder-ffn-embed-dim", str(cfg.ffn_dim), "--encoder-attention-heads", str(cfg.heads),
        "--dropout", str(cfg.dropout), "--attention-dropout", str(cfg.attention_dropout),
        "--activation-dropout", str(cfg.activation_dropout), "--activation-fn", cfg.activation_fn,
        "--pooler-dropout", str(cfg.pooler_dropout), "--pooler-activation-fn", cfg.pooler_activation_fn,
        "--rel-pos-bins", str(cfg.rel_pos_bins), "--max-rel-pos", str(cfg.max_rel_pos),
    ]
    if cfg.normalize_before:
        argv.append("--encoder-normalize-before")
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    args.layernorm_embedding = cfg.embedding_normalize
    args.classification_head_style = CLASSIFICATION_HEAD_STYLE  # set after parsing: not a flag of every version
    return args


def build_plugin_model(args: argparse.Namespace, dictionary, heads: Dict[str, Tuple[int, int]]):
    from tupe_plugin.models.tupe_roberta import TupeRobertaModel

    model = TupeRobertaModel.build_model(args, DictionaryTask(dictionary, args.max_positions))
    for name, (inner_dim, num_classes) in heads.items():
        model.register_classification_head(name, num_classes=num_classes, inner_dim=inner_dim)
    return model


def _dict_needs_copy(dict_path: str, out_dir: str, force: bool) -> bool:
    """Whether ``dict_path`` must be copied to OUT's folder; refuses to replace another dict.txt."""
    dest = os.path.join(out_dir, "dict.txt")
    if os.path.abspath(dest) == os.path.abspath(dict_path):
        return False
    if os.path.exists(dest):
        with open(dest, "rb") as a, open(dict_path, "rb") as b:
            if a.read() == b.read():
                return False
        if not force:
            raise OutputExistsError(f"{dest} exists and differs from {dict_path}; pass --force to replace it")
    return True


def _copy_dict(dict_path: str, out_dir: str) -> str:
    dest = os.path.join(out_dir, "dict.txt")
    with atomic_path(dest) as tmp:
        shutil.copyfile(dict_path, tmp)
    return dest


def convert(in_path: str, out_path: str, dict_path: Optional[str] = None, force: bool = False,
            inert: Sequence[str] = (), drop_heads: bool = False) -> dict:
    """Convert ``in_path`` and write ``out_path``; returns a summary (also printed by ``main``)."""
    if os.path.exists(out_path) and not force:
        raise OutputExistsError(f"{out_path} exists; pass --force to overwrite it")
    if dict_path is not None and not os.path.isfile(dict_path):
        raise ConversionError(f"{dict_path}: file not found")
    out_dir = os.path.dirname(os.path.abspath(out_path))
    copy_dict = dict_path is not None and _dict_needs_copy(dict_path, out_dir, force)
    state = load_original(in_path, inert)
    model_state = state["model"]
    cfg = original_config(state)
    heads = head_shapes(model_state, drop_heads)
    new_state, notes = map_state(model_state, cfg, heads, drop_heads)

    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    from tupe_core.facts import VARIANT_KEY
    from tupe_core.t5_relative import relative_buckets

    args = plugin_args(cfg, out_dir)
    fs_cfg = convert_namespace_to_omegaconf(args)
    model = build_plugin_model(fs_cfg.model, build_dictionary(cfg, dict_path), heads)
    tupe = model.positional_variant.options("tupe")  # the release's TUPE-A or TUPE-R
    check_buckets(relative_buckets(tupe, fs_cfg.model.max_positions) if tupe.rel_pos else None, model_state)
    new_state[VARIANT_KEY] = model.variant_record.clone()
    new_state[NEW + "version"] = model.encoder.sentence_encoder.version.clone()
    expected = model.state_dict()
    shape_errors = [f"{k}: {tuple(v.shape)} vs the model's {tuple(expected[k].shape)}"
                    for k, v in new_state.items() if k in expected and v.shape != expected[k].shape]
    if shape_errors or set(expected) != set(new_state):
        raise ConversionError(  # a bug in the key map, not in the input: the input was checked above
            "internal: mapped state does not fit tupe_roberta: "
            f"missing {sorted(set(expected) - set(new_state))}, extra {sorted(set(new_state) - set(expected))}, "
            f"shapes {shape_errors}"
        )
    model.load_state_dict(new_state, strict=True, model_cfg=fs_cfg.model)  # fairseq's own load path

    history = state.get("optimizer_history") or [{}]
    checkpoint = {
        "args": None,
        "cfg": OmegaConf.to_container(fs_cfg, resolve=True, enum_to_str=True),
        "model": model.state_dict(),
        "criterion": None,
        "optimizer_history": [{"criterion_name": "MaskedLmLoss", "optimizer_name": "none (converted)",
                               "lr_scheduler_state": {"best": None}, "num_updates": 0}],
        "task_state": {},
        "extra_state": {
            "train_iterator": {"epoch": 1, "iterations_in_epoch": 0, "shuffle": True, "version": 2},
            "tupe_convert_original": {
                "source": os.path.basename(in_path),
                "source_sha256": file_hash(in_path),
                "source_arch": getattr(state["args"], "arch", None),
                "source_num_updates": int(history[-1].get("num_updates", 0) or 0),
                "notes": notes,
            },
        },
    }
    os.makedirs(out_dir, exist_ok=True)
    # a file object: a full disk is then Python's OSError (ENOSPC), where torch's own writer says "file write failed"
    with atomic_open(out_path, "wb") as f:
        torch.save(checkpoint, f)
    copied = _copy_dict(dict_path, out_dir) if copy_dict else None
    if dict_path is not None and not copy_dict:
        copied = os.path.join(out_dir, "dict.txt")
    return {
        "out": out_path, "arch": cfg.arch, "variant": cfg.variant, "layers": cfg.layers,
        "embed_dim": cfg.embed_dim, "ffn_dim": cfg.ffn_dim, "heads": cfg.heads,
        "max_positions": cfg.max_positions, "vocab_size": cfg.vocab_size, "classification_heads": sorted(heads),
        "tensors": len(checkpoint["model"]), "dict": copied, "notes": notes, "size": cfg.size,
    }


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_tools.commands.convert_parser``."""
    logging.basicConfig(level=logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hydra's deprecation chatter from fairseq's config conversion
        for name in ("fairseq", "hydra", "tupe_core", "tupe_plugin"):
            logging.getLogger(name).setLevel(logging.ERROR)
        info = convert(args.input, args.output, args.dict, args.force, args.inert_global, args.drop_heads)
    print(f"wrote {info['out']}: arch {info['arch']} ({info['layers']} layers, width {info['embed_dim']}, "
          f"ffn {info['ffn_dim']}, {info['heads']} heads), {info['max_positions']} positions, "
          f"vocabulary {info['vocab_size']}, {info['tensors']} tensors, "
          f"heads {info['classification_heads'] or 'none'}")
    for note in info["notes"]:
        print(f"note: {note}")
    if info["dict"]:
        print(f"dictionary: {info['dict']}")
    if info["size"] is None:
        print("note: not a base/large size: the flags below carry its sizes")
    flags = fairseq_args(checkpoint_info(info["out"]))  # sizes, variant and layer settings (Pre-LN, ...): as trained
    print(f"fine-tune with: {flags} --restore-file {info['out']} --reset-optimizer --reset-dataloader --reset-meters")
    return 0


if __name__ == "__main__":  # python -m tupe_tools.convert_original: the console script tupe-convert-original
    from tupe_tools.commands import dispatch

    sys.exit(dispatch("tupe-convert-original"))
