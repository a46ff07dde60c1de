"""The original TUPE release's checkpoint, read and mapped without building any model (pure part).

Safe reading (``torch.load(weights_only=True)`` with a small allowlist; the 2019 trainer's meters
become inert placeholders), the config inferred from its ``args`` and tensors, the key map to
``tupe_roberta``, and the checks of every key and shape. The layout and the map are described in
``docs/original_release.md``; ``convert_original.py`` builds the model and writes the checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from tupe_core.facts import SIZES, VARIANT_KEY
from tupe_common.checkpoint_file import ORIGINAL_FIX, CheckpointError, load

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
# The plugin's sizes in the same order (tupe_core/facts.py: SIZES).
PLUGIN_SIZES = {name: (s.layers, s.embed_dim, s.ffn_dim, s.heads) for name, s in SIZES.items()}


class ConversionError(ValueError):
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
    """The checkpoint at ``path``, read by the plugin's one reader (``tupe_common.checkpoint_file.load``: weights
    only) with the converter's allowlist added for this call; a global it refuses is named."""
    allowed = allowed_globals(inert)
    try:
        with _extra_safe_globals(allowed):
            state = load(path, fix=ORIGINAL_FIX)
    except CheckpointError as e:
        names = _unsupported_globals(path, e.__cause__, allowed) if e.__cause__ is not None else []
        if names:
            raise ConversionError(
                f"{path} holds Python globals this converter does not allow: {', '.join(names)}. "
                "Nothing from the file was executed. If a name is a class of training state that the "
                "model does not need (like fairseq's 2019 meters), pass --inert-global NAME to read it "
                "as an inert placeholder; never load the file with weights_only=False."
            ) from None
        raise ConversionError(str(e)) from None
    if any(k.endswith(VARIANT_KEY) for k in state["model"]):
        raise ConversionError(f"{path}: already a tupe_roberta checkpoint (see tupe-checkpoint-info {path}); "
                              "fine-tune, analyse or export it as it is; tupe-convert-original reads the original release")
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
    pos_proj: bool  # q/k projections stacked in one ``pos_proj`` (a later, unmerged change of the fork)

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
        qkv = {p: tuple(f"{n}self_attn.{x}_proj.{p}" for x in "qkv") for p in ("weight", "bias")}
        items += [(o + "self_attn.in_proj_weight", Entry((3 * d, d), qkv["weight"])),
                  (o + "self_attn.in_proj_bias", Entry((3 * d,), qkv["bias"]))]
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


def check_buckets(ours: Optional[torch.Tensor], original: Dict[str, torch.Tensor]) -> None:
    """The release stores its relative-position bucket table; it must equal the one we rebuild."""
    saved = original.get(ORIG + "rp_bucket")
    if saved is None:
        return
    if ours is None:
        raise ConversionError(f"the checkpoint has {ORIG}rp_bucket but its args say rel_pos is off")
    if tuple(saved.shape) != tuple(ours.shape) or not torch.equal(saved.long(), ours.long()):
        same_shape = tuple(saved.shape) == tuple(ours.shape)
        diff = f"{int((saved.long() != ours).sum())} entries" if same_shape else "shape"
        raise ConversionError(f"the original relative-position bucket table differs from ours ({diff})")
