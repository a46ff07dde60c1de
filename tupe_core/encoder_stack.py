"""The encoder's forward, shared by the fairseq model (``modules/encoder.py``) and the exported one
(``hf/remote/modeling_tupe.py``): the left-padding rule, the positional term and the masks once per forward,
the per-layer loop, fairseq's encoder layer and activation table.

Restates fairseq 0.12.3 (the ve-fairseq 0.12.3 wheel): ``TransformerEncoderLayerBase.forward`` (``layer_forward``),
the layer loop of ``TransformerEncoderBase.forward_scriptable`` (``run_layers``) and ``utils.get_activation_fn``
(``ACTIVATIONS``). tests/test_restated_code.py fails when fairseq's source changes, and compares them with
fairseq's own on one input. Changed: one additive mask (positional bias + key padding, built once per
forward) and the ``PositionalTerm`` go to every attention block instead of key_padding_mask/attn_mask; no
-1e8 attn_mask conversion, no fc_result return.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import LAYER_BIAS, PositionalEncoding, PositionalTerm
from .masks import attention_mask, compute_dtype

# fairseq 0.12.3 utils.get_activation_fn: gelu in float32, gelu_accurate its tanh approximation
ACTIVATIONS: Dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": lambda x: F.gelu(x.float()).type_as(x),
    "gelu_accurate": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3)))),
    "relu": F.relu,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}

# The sentence classification head of a fine-tuned model unless its checkpoint says otherwise: the TUPE
# release's (dense, tanh, dropout, out_proj); "roberta" puts a dropout before dense too (docs/glue_protocol.md).
HEAD_STYLES = ("release", "roberta")
DEFAULT_HEAD_STYLE = "release"


class LeftPaddingError(ValueError):
    """A row with a real token after a pad, for a variant whose positions count from column 0."""


def check_padding(padding_mask: Tensor, left_padding_allowed: bool, what: str, fix: str) -> bool:
    """Whether the (B, T) batch (True at padding) has pads, in one host sync. Refuses a row with a real token
    after a pad (left padding) unless every encoding of the variant allows it (``left_padding_allowed``): token
    i gets position i, so left padding would silently shift every position. ``what`` names the variant, ``fix``
    says how to pad on the right in the caller's terms."""
    if left_padding_allowed:
        return bool(padding_mask.any())
    shifted = (padding_mask[:, :-1] & ~padding_mask[:, 1:]).any(dim=1)  # (B,): a real token right after a pad
    any_pad, any_left = torch.stack([padding_mask.any(), shifted.any()]).tolist()
    if any_left:
        rows = shifted.nonzero().flatten().tolist()
        raise LeftPaddingError(
            f"left-padded input (batch rows {rows[:5]} have padding before real tokens): {what} gives token i "
            f"position i, so left padding would silently shift every position; {fix}")
    return any_pad


def layer_masks(term: PositionalTerm, padding_mask: Optional[Tensor], dtype: torch.dtype,
                num_layers: int, per_layer: bool = False) -> List[Optional[Tensor]]:
    """The additive mask of every layer index: one tensor shared by all layers, or, for an encoding that declares
    a bias per layer (``enters == LAYER_BIAS``: ``per_layer``), one per layer of its (L, H, T, T) bias. Built once
    per forward, in the compute dtype."""
    if per_layer:
        return [attention_mask(b, padding_mask, dtype) for b in term.bias]
    return [attention_mask(term.bias, padding_mask, dtype)] * num_layers


def layer_forward(layer: nn.Module, x: Tensor, mask: Optional[Tensor], positions: PositionalTerm,
                  key_padding_mask: Optional[Tensor]) -> Tensor:
    """fairseq's encoder layer (Post-LN unless ``layer.normalize_before``) on x (T, B, C). ``layer`` has fairseq's
    names: self_attn, self_attn_layer_norm, fc1, fc2, final_layer_norm, activation_fn, dropout_module,
    activation_dropout_module, normalize_before."""
    residual = x
    if layer.normalize_before:
        x = layer.self_attn_layer_norm(x)
    x, _ = layer.self_attn(x, mask, positions, key_padding_mask)
    x = residual + layer.dropout_module(x)
    if not layer.normalize_before:
        x = layer.self_attn_layer_norm(x)

    residual = x
    if layer.normalize_before:
        x = layer.final_layer_norm(x)
    x = layer.fc2(layer.activation_dropout_module(layer.activation_fn(layer.fc1(x))))
    x = residual + layer.dropout_module(x)
    if not layer.normalize_before:
        x = layer.final_layer_norm(x)
    return x


def run_layers(x: Tensor, padding_mask: Optional[Tensor], positions: PositionalEncoding, layers: Sequence[nn.Module],
               layer_index: Optional[Dict[int, int]] = None, keep_states: bool = False
               ) -> Tuple[Tensor, List[Tensor]]:
    """x (T, B, C) through ``layers`` with the positional term computed once and the masks built once.
    ``padding_mask``: (B, T) True at padding, or None when the batch has none; ``layer_index``: id(layer) -> its
    index in the full stack (with layerdrop only some layers run; each gets its own index's mask).
    Returns x and, with ``keep_states``, [x before the first layer, after each layer]."""
    term = positions(x.size(0))  # once per forward, shared by all layers
    # padded key columns get a large finite negative logit (masks.padding_value), not -inf: a sequence without a
    # real token gives finite rows, not NaN. Cast to the compute dtype here, once per forward, not in every layer
    masks = layer_masks(term, padding_mask, compute_dtype(x), len(layer_index) if layer_index else len(layers),
                        per_layer=positions.enters == LAYER_BIAS)
    states = [x] if keep_states else []
    for i, layer in enumerate(layers):
        x = layer(x, masks[layer_index[id(layer)] if layer_index else i], term, padding_mask)
        if keep_states:
            states.append(x)
    return x, states
