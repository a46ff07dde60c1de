"""Convert the original TUPE release (guolinke/TUPE, a 2019 fairseq fork) to a ``tupe_roberta`` checkpoint.

    tupe-convert-original tupe_ckp/checkpoint.pt tupe_r/model.pt --dict tupe_ckp/dict.txt
    python -m tupe_plugin.convert_original IN.pt OUT.pt [--dict dict.txt] [--force]

The original file is a fairseq checkpoint of the ``bert`` model: ``args`` (an argparse Namespace with
``arch='bert_base'``, ``rel_pos``, ``max_positions``, ``embedding_normalize``, ...) and ``model`` with
``decoder.sentence_encoder.*`` and ``decoder.lm_head.*`` tensors. Both implement the same recipe
(PAPERS.md, recipe appendix), so the conversion only renames and splits tensors:

=============================================  ==================================================
original (``decoder.sentence_encoder.`` ...)    this plugin (``encoder.sentence_encoder.`` ...)
=============================================  ==================================================
``embed_tokens.weight``                         ``embed_tokens.weight`` (no scaling in either)
``emb_layer_norm.*``                            ``layernorm_embedding.*``
``emb_out_layer_norm.*`` (Pre-LN only)          ``layer_norm.*``
``pos.weight``, ``pos_ln.*``                    ``positions.pos.weight``, ``positions.pos_ln.*``
``pos_q_linear.*``, ``pos_k_linear.*``          ``positions.pos_q_linear.*``, ``positions.pos_k_linear.*``
``pos_proj.*`` (earlier fork: q;k stacked)      split into ``positions.pos_q_linear/pos_k_linear``
``relative_attention_bias.weight``              ``positions.relative_attention_bias.weight``
``rp_bucket`` (a frozen parameter)              checked against ours, not stored (we rebuild it)
``layers.N.self_attn.in_proj_*`` (q;k;v)        ``layers.N.self_attn.{q,k,v}_proj.*``
``layers.N.{self_attn.out_proj,fc1,fc2,...}``   same names
``decoder.lm_head.{dense,layer_norm,bias}``     ``encoder.lm_head.*``; ``weight`` is tied to the embedding
``classification_heads.NAME.{dense,out_proj}``  same names
=============================================  ==================================================

The arch is ``tupe_r_*`` with ``rel_pos`` and ``tupe_a_*`` without (the original always unties
[CLS]); sizes, dropouts and activations come from ``args``. Every tensor shape is checked, and a
file with keys this table does not know, or without keys it needs, is refused with the list. The
written checkpoint carries the positional variant (``VARIANT_KEY``) and a fairseq ``cfg`` (task
``masked_lm``), so ``fairseq-train --restore-file``, ``fairseq-validate`` and
``TupeRobertaModel.from_pretrained`` load it.

Reading never runs code from the file: ``torch.load(weights_only=True)`` with a small allowlist
(argparse ``Namespace``, numpy scalars), and the 2019 trainer's meter objects, which nothing here
reads, are rebuilt as inert placeholders. Any other Python global in the pickle stops the conversion.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import re
import shutil
import sys
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

ORIG = "decoder.sentence_encoder."
NEW = "encoder.sentence_encoder."
ORIG_LM = "decoder.lm_head."
NEW_LM = "encoder.lm_head."
HEADS = "classification_heads."

# (layers, embed dim, ffn dim, heads) of the original archs; args saved by fairseq-train carry them too.
ORIGINAL_SIZES = {
    "bert": (12, 768, 3072, 12),
    "bert_base": (12, 768, 3072, 12),
    "bert_large": (24, 1024, 4096, 16),
}
PLUGIN_SIZES = {"base": (12, 768, 3072, 12), "large": (24, 1024, 4096, 16)}


class ConversionError(Exception):
    """The input is not a checkpoint this converter can map exactly; the message says why."""


# --------------------------------------------------------------------------------------------
# Reading the original file without executing anything from it
# --------------------------------------------------------------------------------------------


class InertPlaceholder:
    """Stands in for a class of the 2019 training state that is never read (e.g. its meters).

    Built and given state without running anything, so it is safe for any name it replaces.
    """

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __repr__(self) -> str:
        return "<inert placeholder>"


# fairseq 2019 stored ``extra_state['train_meters']``: an OrderedDict of these (trainer.save_checkpoint).
INERT_BY_DEFAULT = (
    "fairseq.meters.AverageMeter",
    "fairseq.meters.TimeMeter",
    "fairseq.meters.StopwatchMeter",
)


def _numpy_globals() -> list:
    """numpy scalars (e.g. a float64 ``val_loss``) as pickled by numpy 1.x (``numpy.core``) or 2.x."""
    core = getattr(np, "_core", None) or np.core
    scalar = core.multiarray.scalar
    out = [(scalar, "numpy.core.multiarray.scalar"), (scalar, "numpy._core.multiarray.scalar"), np.dtype]
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25: BUILD on a dtype instance needs its class
    if dtypes is not None:
        for name in ("Float64DType", "Float32DType", "Float16DType", "Int64DType", "Int32DType", "BoolDType"):
            if hasattr(dtypes, name):
                out.append(getattr(dtypes, name))
    return out


def allowed_globals(inert: Sequence[str] = ()) -> list:
    """What reading the original may build: nothing that can run code."""
    names = list(INERT_BY_DEFAULT) + [n for n in inert if n not in INERT_BY_DEFAULT]
    return [argparse.Namespace, *_numpy_globals(), *[(InertPlaceholder, n) for n in names]]


@contextlib.contextmanager
def _extra_safe_globals(extra: list):
    """Like ``torch.serialization.safe_globals``, but restores the exact previous allowlist on exit
    (torch's context manager removes its names even when they were allowlisted before, e.g. the
    plugin's ``argparse.Namespace``)."""
    before = list(torch.serialization.get_safe_globals())
    torch.serialization.add_safe_globals(extra)
    try:
        yield
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)


def _unsupported_globals(path: str, error: Exception, allowed: list) -> List[str]:
    names = set(re.findall(r"GLOBAL ([\w.]+)", str(error)))
    try:  # zip checkpoints can be scanned for every global at once (legacy ones cannot)
        everything = list(allowed) + list(torch.serialization.get_safe_globals())
        ok = {n if isinstance(n, str) else f"{n.__module__}.{n.__qualname__}"
              for n in (x[1] if isinstance(x, tuple) else x for x in everything)}
        names |= {g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in ok}
    except Exception:
        pass
    return sorted(names)


def load_original(path: str, inert: Sequence[str] = ()) -> dict:
    """``torch.load(weights_only=True)`` with the converter's allowlist, local to this call."""
    if not os.path.isfile(path):
        raise ConversionError(f"{path}: file not found")
    allowed = allowed_globals(inert)
    try:
        with _extra_safe_globals(allowed):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises pickle.UnpicklingError (and others for non-pickles)
        names = _unsupported_globals(path, e, allowed)
        if names:
            raise ConversionError(
                f"{path} holds Python globals this converter does not allow: {', '.join(names)}. "
                "Nothing from the file was executed. If a name is a class of training state that the "
                "model does not need (like fairseq's 2019 meters), pass --inert-global NAME to read it "
                "as an inert placeholder; never load the file with weights_only=False."
            ) from None
        raise ConversionError(f"{path}: not a readable torch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise ConversionError(f"{path}: not a fairseq checkpoint (no 'model' entry)")
    return state


# --------------------------------------------------------------------------------------------
# What the original is: config from its args, checked against its tensors
# --------------------------------------------------------------------------------------------


@dataclass
class OriginalConfig:
    layers: int
    embed_dim: int
    ffn_dim: int
    heads: int
    max_positions: int
    vocab_size: int
    rel_pos: bool
    rel_pos_bins: int
    max_rel_pos: int
    embedding_normalize: bool
    normalize_before: bool
    activation_fn: str
    pooler_activation_fn: str
    dropout: float
    attention_dropout: float
    activation_dropout: float
    pooler_dropout: float
    pos_proj: bool  # q/k projections stacked in one ``pos_proj`` (an earlier commit of the fork)

    @property
    def variant(self) -> str:
        return "tupe_r" if self.rel_pos else "tupe_a"

    @property
    def size(self) -> Optional[str]:
        sizes = (self.layers, self.embed_dim, self.ffn_dim, self.heads)
        return next((name for name, s in PLUGIN_SIZES.items() if s == sizes), None)

    @property
    def arch(self) -> str:
        return f"{self.variant}_{self.size or 'base'}"


def original_config(state: dict) -> OriginalConfig:
    args = state.get("args")
    if not isinstance(args, argparse.Namespace):
        raise ConversionError("the checkpoint has no argparse 'args' (a 2019 fairseq checkpoint has one)")
    model = state["model"]
    arch = getattr(args, "arch", None)
    if arch not in ORIGINAL_SIZES:
        raise ConversionError(f"args.arch is {arch!r}; the original release is one of {', '.join(ORIGINAL_SIZES)}")
    defaults = dict(zip(("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads"),
                        ORIGINAL_SIZES[arch]))
    get = lambda name, default=None: getattr(args, name, defaults.get(name, default))  # noqa: E731
    embed = model.get(ORIG + "embed_tokens.weight")
    if not isinstance(embed, torch.Tensor) or embed.dim() != 2:
        raise ConversionError(f"missing or malformed '{ORIG}embed_tokens.weight'")
    max_positions = get("max_positions") or get("tokens_per_sample")
    if max_positions is None:
        raise ConversionError("args has neither max_positions nor tokens_per_sample")
    cfg = OriginalConfig(
        layers=int(get("encoder_layers")),
        embed_dim=int(get("encoder_embed_dim")),
        ffn_dim=int(get("encoder_ffn_embed_dim")),
        heads=int(get("encoder_attention_heads")),
        max_positions=int(max_positions),
        vocab_size=int(embed.size(0)),
        rel_pos=bool(get("rel_pos", False)),
        rel_pos_bins=int(get("rel_pos_bins", 32)),
        max_rel_pos=int(get("max_rel_pos", 128)),
        embedding_normalize=bool(get("embedding_normalize", False)),
        normalize_before=bool(get("encoder_normalize_before", False)),
        activation_fn=str(get("activation_fn", "gelu")),
        pooler_activation_fn=str(get("pooler_activation_fn", "tanh")),
        dropout=float(get("dropout", 0.1)),
        attention_dropout=float(get("attention_dropout", 0.1)),
        activation_dropout=float(get("activation_dropout", 0.0)),
        pooler_dropout=float(get("pooler_dropout", 0.1)),
        pos_proj=(ORIG + "pos_proj.weight") in model,
    )
    if embed.size(1) != cfg.embed_dim:
        raise ConversionError(
            f"args.encoder_embed_dim is {cfg.embed_dim} but embed_tokens has width {embed.size(1)}"
        )
    if cfg.embed_dim % cfg.heads:
        raise ConversionError(f"embed dim {cfg.embed_dim} is not divisible by {cfg.heads} heads")
    return cfg


# --------------------------------------------------------------------------------------------
# The key map
# --------------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One original tensor: its expected shape and the plugin key(s) it becomes (split on dim 0)."""

    shape: Tuple[int, ...]
    targets: Tuple[str, ...]


def expected_entries(cfg: OriginalConfig) -> Dict[str, Entry]:
    d, f = cfg.embed_dim, cfg.ffn_dim
    same = lambda orig, new, shape: (orig, Entry(shape, (new,)))  # noqa: E731
    items = [
        same(ORIG + "embed_tokens.weight", NEW + "embed_tokens.weight", (cfg.vocab_size, d)),
        same(ORIG + "pos.weight", NEW + "positions.pos.weight", (cfg.max_positions + 1, d)),
        same(ORIG + "pos_ln.weight", NEW + "positions.pos_ln.weight", (d,)),
        same(ORIG + "pos_ln.bias", NEW + "positions.pos_ln.bias", (d,)),
        same(ORIG_LM + "dense.weight", NEW_LM + "dense.weight", (d, d)),
        same(ORIG_LM + "dense.bias", NEW_LM + "dense.bias", (d,)),
        same(ORIG_LM + "layer_norm.weight", NEW_LM + "layer_norm.weight", (d,)),
        same(ORIG_LM + "layer_norm.bias", NEW_LM + "layer_norm.bias", (d,)),
        same(ORIG_LM + "bias", NEW_LM + "bias", (cfg.vocab_size,)),
    ]
    pos_q, pos_k = NEW + "positions.pos_q_linear.", NEW + "positions.pos_k_linear."
    if cfg.pos_proj:  # Linear(d, 2d); its output is viewed as (T+1, 2, H, dh): q first, then k
        items += [(ORIG + "pos_proj.weight", Entry((2 * d, d), (pos_q + "weight", pos_k + "weight"))),
                  (ORIG + "pos_proj.bias", Entry((2 * d,), (pos_q + "bias", pos_k + "bias")))]
    else:
        for name, new in (("pos_q_linear.", pos_q), ("pos_k_linear.", pos_k)):
            items += [same(ORIG + name + "weight", new + "weight", (d, d)),
                      same(ORIG + name + "bias", new + "bias", (d,))]
    if cfg.embedding_normalize:
        items += [same(ORIG + "emb_layer_norm." + p, NEW + "layernorm_embedding." + p, (d,))
                  for p in ("weight", "bias")]
    if cfg.normalize_before:
        items += [same(ORIG + "emb_out_layer_norm." + p, NEW + "layer_norm." + p, (d,))
                  for p in ("weight", "bias")]
    if cfg.rel_pos:
        items.append(same(ORIG + "relative_attention_bias.weight", NEW + "positions.relative_attention_bias.weight",
                          (cfg.rel_pos_bins + 1, cfg.heads)))
    for i in range(cfg.layers):
        o, n = f"{ORIG}layers.{i}.", f"{NEW}layers.{i}."
        qkv = lambda p: tuple(f"{n}self_attn.{x}_proj.{p}" for x in "qkv")  # noqa: E731
        items += [(o + "self_attn.in_proj_weight", Entry((3 * d, d), qkv("weight"))),
                  (o + "self_attn.in_proj_bias", Entry((3 * d,), qkv("bias")))]
        for name, shape in [("self_attn.out_proj.weight", (d, d)), ("self_attn.out_proj.bias", (d,)),
                            ("self_attn_layer_norm.weight", (d,)), ("self_attn_layer_norm.bias", (d,)),
                            ("fc1.weight", (f, d)), ("fc1.bias", (f,)), ("fc2.weight", (d, f)), ("fc2.bias", (d,)),
                            ("final_layer_norm.weight", (d,)), ("final_layer_norm.bias", (d,))]:
            items.append(same(o + name, n + name, shape))
    return dict(items)


HEAD_PARTS = ("dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias")


def head_shapes(model: Dict[str, torch.Tensor], drop_heads: bool) -> Dict[str, Tuple[int, int]]:
    """name -> (inner_dim, num_classes) of each classification head; refuses heads we cannot hold."""
    keys: Dict[str, set] = {}
    for k in model:
        if k.startswith(HEADS):
            name, _, part = k[len(HEADS):].partition(".")
            keys.setdefault(name, set()).add(part)
    if drop_heads:
        return {}
    out = {}
    for name, parts in keys.items():
        if parts != set(HEAD_PARTS):
            raise ConversionError(
                f"classification head '{name}' has {sorted(parts)}; tupe_roberta heads (like the released "
                f"BERT heads) are dense + tanh + out_proj: {list(HEAD_PARTS)}. Pass --drop-heads to convert "
                "the encoder without its heads."
            )
        out[name] = (model[f"{HEADS}{name}.dense.weight"].size(0), model[f"{HEADS}{name}.out_proj.weight"].size(0))
    return out


def map_state(model: Dict[str, torch.Tensor], cfg: OriginalConfig, heads: Dict[str, Tuple[int, int]],
              drop_heads: bool = False) -> Tuple["OrderedDict[str, torch.Tensor]", List[str]]:
    """Original tensors -> plugin keys (fp32). Returns (state, notes about what was not carried over)."""
    entries = expected_entries(cfg)
    optional = {ORIG + "rp_bucket", ORIG_LM + "weight"}
    head_keys = {k for k in model if k.startswith(HEADS)}
    unknown = sorted(set(model) - set(entries) - optional - head_keys)
    missing = sorted(set(entries) - set(model))
    problems = []
    if unknown:
        problems.append(f"{len(unknown)} unknown key(s): " + ", ".join(unknown))
    if missing:
        problems.append(f"{len(missing)} missing key(s): " + ", ".join(missing))
    for k, entry in entries.items():
        v = model.get(k)
        if v is None:
            continue
        if not isinstance(v, torch.Tensor):
            problems.append(f"{k} is a {type(v).__name__}, not a tensor")
        elif tuple(v.shape) != entry.shape:
            problems.append(f"{k} has shape {tuple(v.shape)}, expected {entry.shape} (from args: {cfg.layers} "
                            f"layers, width {cfg.embed_dim}, ffn {cfg.ffn_dim}, {cfg.heads} heads, "
                            f"{cfg.max_positions} positions)")
    if problems:
        raise ConversionError("the checkpoint does not match the original TUPE layout:\n  "
                              + "\n  ".join(problems))

    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for k, entry in entries.items():
        v = model[k].detach().to(torch.float32)
        for target, piece in zip(entry.targets, v.chunk(len(entry.targets), dim=0)):
            out[target] = piece.clone()
    embed = out[NEW + "embed_tokens.weight"]
    tied = model.get(ORIG_LM + "weight")
    if tied is not None and (tuple(tied.shape) != tuple(embed.shape) or not torch.equal(tied.float(), embed)):
        raise ConversionError(
            f"{ORIG_LM}weight differs from embed_tokens; the original ties them and so does tupe_roberta"
        )
    out[NEW_LM + "weight"] = embed
    notes = []
    if drop_heads and head_keys:
        notes.append(f"dropped classification heads: {sorted({k.split('.')[1] for k in head_keys})}")
    for name in heads:
        for part in HEAD_PARTS:
            out[f"{HEADS}{name}.{part}"] = model[f"{HEADS}{name}.{part}"].detach().to(torch.float32).clone()
    return out, notes


# --------------------------------------------------------------------------------------------
# Building the plugin model the way fairseq-train would, and writing the checkpoint
# --------------------------------------------------------------------------------------------


class _Vocabulary:
    """The part of a fairseq task that ``build_model`` asks for."""

    def __init__(self, dictionary, max_positions: int):
        self.source_dictionary = self.target_dictionary = dictionary
        self._max = max_positions

    def max_positions(self) -> int:
        return self._max


def build_dictionary(cfg: OriginalConfig, dict_path: Optional[str]):
    from fairseq.data import Dictionary

    if dict_path is None:
        d = Dictionary()
        while len(d) < cfg.vocab_size:
            d.add_symbol(f"madeupword{len(d):05d}")
        return d
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

    from .models.architectures import tupe_roberta_base_architecture  # noqa: F401  (registers archs)

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
    return args


def build_plugin_model(args: argparse.Namespace, dictionary, heads: Dict[str, Tuple[int, int]]):
    from .models.tupe_roberta import TupeRobertaModel

    model = TupeRobertaModel.build_model(args, _Vocabulary(dictionary, args.max_positions))
    for name, (inner_dim, num_classes) in heads.items():
        model.register_classification_head(name, num_classes=num_classes, inner_dim=inner_dim)
    return model


def check_buckets(model, original: Dict[str, torch.Tensor]) -> None:
    saved = original.get(ORIG + "rp_bucket")
    if saved is None:
        return
    ours = model.encoder.sentence_encoder.positions.rp_bucket
    if tuple(saved.shape) != tuple(ours.shape) or not torch.equal(saved.long(), ours.long()):
        same_shape = tuple(saved.shape) == tuple(ours.shape)
        diff = f"{int((saved.long() != ours).sum())} entries" if same_shape else "shape"
        raise ConversionError(f"the original relative-position bucket table differs from ours ({diff})")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _save_atomic(obj, path: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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
            raise ConversionError(f"{dest} exists and differs from {dict_path}; pass --force to replace it")
    return True


def _copy_dict(dict_path: str, out_dir: str) -> str:
    dest = os.path.join(out_dir, "dict.txt")
    tmp = f"{dest}.tmp{os.getpid()}"
    shutil.copyfile(dict_path, tmp)
    os.replace(tmp, dest)
    return dest


def convert(in_path: str, out_path: str, dict_path: Optional[str] = None, force: bool = False,
            inert: Sequence[str] = (), drop_heads: bool = False) -> dict:
    """Convert ``in_path`` and write ``out_path``; returns a summary (also printed by ``main``)."""
    if os.path.exists(out_path) and not force:
        raise ConversionError(f"{out_path} exists; pass --force to overwrite it")
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

    from .models.tupe_roberta import VARIANT_KEY

    args = plugin_args(cfg, out_dir)
    fs_cfg = convert_namespace_to_omegaconf(args)
    model = build_plugin_model(fs_cfg.model, build_dictionary(cfg, dict_path), heads)
    check_buckets(model, model_state)
    new_state[VARIANT_KEY] = model.encoder.sentence_encoder.positions.variant.clone()
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
                "source_sha256": _sha256(in_path),
                "source_arch": getattr(state["args"], "arch", None),
                "source_num_updates": int(history[-1].get("num_updates", 0) or 0),
                "notes": notes,
            },
        },
    }
    os.makedirs(out_dir, exist_ok=True)
    _save_atomic(checkpoint, out_path)
    copied = _copy_dict(dict_path, out_dir) if copy_dict else None
    if dict_path is not None and not copy_dict:
        copied = os.path.join(out_dir, "dict.txt")
    return {
        "out": out_path, "arch": cfg.arch, "variant": cfg.variant, "layers": cfg.layers,
        "embed_dim": cfg.embed_dim, "ffn_dim": cfg.ffn_dim, "heads": cfg.heads,
        "max_positions": cfg.max_positions, "vocab_size": cfg.vocab_size, "classification_heads": sorted(heads),
        "tensors": len(checkpoint["model"]), "dict": copied, "notes": notes, "size": cfg.size,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="tupe-convert-original",
        description="Convert the original TUPE checkpoint (guolinke/TUPE, fairseq 2019 'bert' model) "
        "to a tupe_roberta checkpoint that fairseq-train/-validate and from_pretrained load.",
    )
    p.add_argument("input", help="the original checkpoint (e.g. checkpoint.pt from tupe_ckp.tar.gz)")
    p.add_argument("output", help="where to write the tupe_roberta checkpoint (e.g. tupe_r/model.pt)")
    p.add_argument("--dict", help="the release's dict.txt: checked against the embedding, copied next to OUTPUT")
    p.add_argument("--force", action="store_true", help="overwrite OUTPUT (and a different dict.txt beside it)")
    p.add_argument("--drop-heads", action="store_true", help="leave out any classification heads")
    p.add_argument("--inert-global", action="append", default=[], metavar="MODULE.NAME",
                   help="read this pickled class as an inert placeholder (training state the model does not "
                   f"need); always: {', '.join(INERT_BY_DEFAULT)}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # hydra's deprecation chatter from fairseq's config conversion
            for name in ("fairseq", "hydra", "tupe_plugin"):
                logging.getLogger(name).setLevel(logging.ERROR)
            info = convert(args.input, args.output, args.dict, args.force, args.inert_global, args.drop_heads)
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {info['out']}: arch {info['arch']} ({info['layers']} layers, width {info['embed_dim']}, "
          f"ffn {info['ffn_dim']}, {info['heads']} heads), {info['max_positions']} positions, "
          f"vocabulary {info['vocab_size']}, {info['tensors']} tensors, "
          f"heads {info['classification_heads'] or 'none'}")
    for note in info["notes"]:
        print(f"note: {note}")
    if info["dict"]:
        print(f"dictionary: {info['dict']}")
    if info["size"] is None:
        print("note: not a base/large size: pass --encoder-layers/--encoder-embed-dim/--encoder-ffn-embed-dim/"
              "--encoder-attention-heads to fairseq-train along with --arch")
    print(f"fine-tune with: --arch {info['arch']} --max-positions {info['max_positions']} "
          f"--restore-file {info['out']} --reset-optimizer --reset-dataloader --reset-meters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
