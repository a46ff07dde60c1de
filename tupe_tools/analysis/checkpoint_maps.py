"""Content-free positional logits of a checkpoint, per head, for every variant that has them: each encoding
gives its own map (``PositionalEncoding.content_free_map``), an encoding at the input adds layer 1's
position-position term of its rows.

* TUPE-A/R, tie-cls: the (H, T, T) term the model adds to every layer (incl. the [CLS] thetas and
  the relative bias), exactly as in training.
* BERT-Ad: ``(p_i U^Q)(p_j U^K)^T / sqrt(4 d_head)``, the position-position term of every layer.
* distance priors (L&S paper): the prior itself, per layer for ``learned_gaussian``.
* BERT-A/R: layer 1's position-position term ``(LN(p_i) W^Q)(LN(p_j) W^K)^T / sqrt(d_head)`` from the
  learned input PE alone (an approximation: in BERT the PE is mixed with the word before the LN; with Pre-LN after
  layer 1's own LayerNorm too, and at the layers' own scale: 1/sqrt(2 d_head) beside an untied TUPE term),
  plus the relative bias for BERT-R.
* sinusoidal: the same layer-1 position-position term from the fixed sin/cos table.
* t5_rel, alibi: the bias itself, exactly (shared by all layers); nope: zeros (no positional preference).
* pam_concat, pam_sequential, pam_window: no logits but position-only attention *weights*, used by the
  model directly (no softmax): ``positional_maps`` returns them exactly, per layer and head for the learned
  ones, the fixed window band for ``pam_window`` (``PositionMap.weights`` says which).
* rope, deberta_rel: none. Their positional effect depends on content (rotated q/k; c2p/p2c terms), so
  ``ContentDependentPositions`` is raised: only real attention maps (``tupe-locality --text``) describe them.

Works from the state dict alone (no dictionary, no data), on CPU, for base and large models.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from tupe_core.base import ContentDependentPositions, PositionMap
from tupe_core.facts import VARIANT_KEY
from tupe_core.registry import build, from_record
from tupe_tools.errors import UsageError

from tupe_plugin import checkpoint_safety  # noqa: F401
from tupe_common.checkpoint_file import load as read_checkpoint
from tupe_tools.checkpoint_record import info_from_state
from .locality_symmetry import softmax_rows

PREFIX = "encoder.sentence_encoder."


def load_checkpoint(path: str) -> Tuple[Dict[str, torch.Tensor], Dict[str, Any]]:
    state = read_checkpoint(path)  # the one reader: its checks name the file; read once
    model = {k: v.float() if v.is_floating_point() else v for k, v in state["model"].items()}
    return model, info_from_state(state, path)


def content_free_map(sd: Dict[str, torch.Tensor], info: Dict[str, Any], seq_len: int) -> PositionMap:
    """The checkpoint's content-free map: the encoding at the attention's own, plus layer 1's position-position
    term of the rows an encoding at the input adds (logits only)."""
    variant = from_record(sd[VARIANT_KEY])
    if seq_len > info["max_positions"]:
        raise UsageError(f"--length {seq_len} exceeds the checkpoint's {info['max_positions']} positions")
    d, H = info["encoder_embed_dim"], info["encoder_attention_heads"]
    at_input, positions = build(variant, d, H, info["max_positions"], info["encoder_layers"])
    encoder = {k[len(PREFIX):]: v for k, v in sd.items() if k.startswith(PREFIX)}
    positions.load_state_dict({k[len("positions."):]: v for k, v in encoder.items()
                               if k.startswith("positions.") and PREFIX + k != VARIANT_KEY})
    try:
        found = positions.content_free_map(seq_len, encoder)
    except ContentDependentPositions as e:
        raise ContentDependentPositions(
            f"positional variant '{variant.name}' has no content-free positional term: {e} "
            "(docs/positional_encodings.md), so there is no position-only map; use tupe-locality CKPT --text FILE "
            "for its real attention maps") from None
    if found is not None and found.weights:
        return found
    logits = found.values if found is not None else torch.zeros(H, seq_len, seq_len)
    if at_input is not None:
        at_input.load_state_dict({k[len("embed_positions."):]: v for k, v in encoder.items()
                                  if k.startswith("embed_positions.")})
        with torch.no_grad():  # at the layers' own scale (a TUPE-style encoding beside it: 1/sqrt(2 d_h))
            logits = logits + _input_pe_term(sd, at_input.rows(seq_len), H, positions.scale_for(positions.options),
                                             bool(info.get("encoder_normalize_before")))
    return PositionMap(logits, per_layer=found is not None and found.per_layer)


def _input_pe_term(sd: Dict[str, torch.Tensor], p: torch.Tensor, H: int, scale_factor: float = 1.0,
                   pre_ln: bool = False) -> torch.Tensor:
    """Layer 1's (H, T, T) position-position logits of the input PE rows ``p`` (T, d), as its attention scales
    them (1 / sqrt(d_h * ``scale_factor``)); with ``pre_ln`` (Pre-LN) after the layer's own LayerNorm."""
    T, d = p.shape
    if PREFIX + "layernorm_embedding.weight" in sd:
        p = F.layer_norm(p, (d,), sd[PREFIX + "layernorm_embedding.weight"], sd[PREFIX + "layernorm_embedding.bias"])
    attn = PREFIX + "layers.0.self_attn."
    if pre_ln:
        norm = PREFIX + "layers.0.self_attn_layer_norm."
        p = F.layer_norm(p, (d,), sd[norm + "weight"], sd[norm + "bias"])
    q = F.linear(p, sd[attn + "q_proj.weight"], sd[attn + "q_proj.bias"]).view(T, H, d // H).transpose(0, 1)
    k = F.linear(p, sd[attn + "k_proj.weight"], sd[attn + "k_proj.bias"]).view(T, H, d // H).transpose(0, 1)
    return q @ k.transpose(1, 2) * (d // H * scale_factor) ** -0.5


class PositionMaps(NamedTuple):
    """A checkpoint's content-free map as the model uses it (``values``), the attention it amounts to (``probs``),
    and whether there is one map per layer (``per_layer``: what the encoding declares, ``PositionMap.per_layer``)."""

    values: np.ndarray  # (H, T, T), or (L, H, T, T) per layer
    probs: np.ndarray
    per_layer: bool


def positional_maps(path: str, seq_len: int) -> PositionMaps:
    """The content-free map as the model uses it and the attention it amounts to. Logit variants: ``logits,
    softmax_rows(logits)``; PAM: the exact weights the layers apply to their values, twice, (L, H, T, T) learned (one
    table per layer) or (1, T, T) for ``pam_window`` (rows are not normalised: docs/positional_encodings.md, section
    PAM)."""
    sd, info = load_checkpoint(path)
    found = content_free_map(sd, info, seq_len)
    values = found.values.double().numpy()
    return PositionMaps(values, values if found.weights else softmax_rows(values), found.per_layer)
