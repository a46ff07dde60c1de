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
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import AS_IS, LAYER_BIAS, REFUSED, PositionalEncoding, PositionalTerm, token_positions
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


class Padding(NamedTuple):
    """A batch's padding as the encoder's forward needs it, read once (``check_padding``): whether it has pads, and
    each token's position (B, T) where the batch is left-padded and the variant reads positions, else None."""

    has_pads: bool
    position_ids: Optional[Tensor] = None


def check_padding(padding_mask: Tensor, left_padding: str, what: str, fix: str) -> Padding:
    """The (B, T) batch's padding (True at pads), in one host sync, by the variant's declaration
    (``registry.left_padding``): ``AS_IS``, only whether it has pads; ``POSITIONS``, also whether a row has a real
    token after a pad (left padding), and then every token's position (``token_positions``) for the encodings that
    read it; ``REFUSED``, such a row is refused (token i gets position i, so left padding would silently shift every
    position). A right-padded batch gets no positions: its forward is the one without them. ``what`` names the
    variant, ``fix`` says how to pad on the right in the caller's terms."""
    if left_padding == AS_IS:
        return Padding(bool(padding_mask.any()))
    shifted = (padding_mask[:, :-1] & ~padding_mask[:, 1:]).any(dim=1)  # (B,): a real token right after a pad
    any_pad, any_left = torch.stack([padding_mask.any(), shifted.any()]).tolist()
    if any_left and left_padding == REFUSED:
        rows = shifted.nonzero().flatten().tolist()
        raise LeftPaddingError(
            f"left-padded input (batch rows {rows[:5]} have padding before real tokens): {what} gives token i "
            f"position i, so left padding would silently shift every position; {fix}")
    return Padding(any_pad, token_positions(padding_mask) if any_left else None)


def positional_term(positions: PositionalEncoding, seq_len: int, position_ids: Optional[Tensor]) -> PositionalTerm:
    """The term of this forward: with each token's position where the batch is left-padded and the encoding reads
    them (``left_padding == POSITIONS``), else of positions 0..T-1."""
    if position_ids is not None and positions.reads_positions:
        return positions(seq_len, position_ids)
    return positions(seq_len)


def input_positions(embed_positions: nn.Module, src_tokens: Tensor, position_ids: Optional[Tensor]) -> Tensor:
    """What the encoding at the input adds to the words: with each token's position where the batch is left-padded
    and the encoding reads them, else as fairseq calls it (the tokens alone)."""
    if position_ids is not None and embed_positions.reads_positions:
        return embed_positions(src_tokens, position_ids)
    return embed_positions(src_tokens)


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
               layer_index: Optional[Dict[int, int]] = None, keep_states: bool = False,
               position_ids: Optional[Tensor] = None) -> Tuple[Tensor, List[Tensor]]:
    """x (T, B, C) through ``layers`` with the positional term computed once and the masks built once.
    ``padding_mask``: (B, T) True at padding, or None when the batch has none; ``layer_index``: id(layer) -> its
    index in the full stack (with layerdrop only some layers run; each gets its own index's mask);
    ``position_ids``: (B, T) each token's position in a left-padded batch (``check_padding``), else None.
    Returns x and, with ``keep_states``, [x before the first layer, after each layer]."""
    term = positional_term(positions, x.size(0), position_ids)  # once per forward, shared by all layers
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
