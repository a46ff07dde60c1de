"""What a positional encoding is: ``PositionalEncoding``, the base class of every encoding (what it hands every
layer, ``PositionalTerm``, is the attention core's: ``attention.py``).

An encoding is one ``nn.Module`` that owns its parameters and fixed tables and *declares* what the rest of the
model asks of it (x-transformers' habit), so the encoder, the attention blocks, the analysis, the study and
the Hugging Face export read these declarations instead of branching on flags:

=====================  ========================================================================================
``enters``             how its signal enters: ``INPUT`` (added to the word embeddings), ``BIAS`` (an (H, T, T)
                       logit bias shared by the batch), ``LAYER_BIAS`` (one per layer), ``QK`` (position q/k
                       added to the content q/k), ``ROTATION`` (q/k rotated), ``BLOCK`` (its own attention
                       block), ``NONE``
``score_scale``        content logits are scaled by ``(score_scale * head_dim) ** -0.5``
``left_padding``       what a left-padded row needs: nothing (``AS_IS``: a term of j - i only), each token's
                       position (``POSITIONS``: ``forward`` takes ``position_ids``), or it is refused (``REFUSED``)
``untrained_beyond``   why positions beyond the trained length mean nothing (or None)
``content_free_map``   its position-only map for the analysis (logits, weights, or ``ContentDependentPositions``)
``attention_block``    the attention block of every layer
``selected_by``        which checkpoint records (``record.PositionalVariant``) build it: field -> value
``reads``              the record's other fields it reads (its settings: ``validate`` refuses one set without it)
``combines``           whether it is defined together with another encoding (TUPE's Table 1), else it is the only
                       position signal of its variant
``fixed_tables``       its non-persistent buffers, computed from its options (``self.options``) and sizes
=====================  ========================================================================================

An encoding sits in one of two places of the encoder: ``embed_positions`` (``enters == INPUT``: fairseq calls it
with the tokens) or ``positions`` (every other kind: called once per forward with the length). A variant
(``registry.py``) is one of each, or fewer.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import PositionalTerm, SelfAttention
from .record import PositionalVariant

__all__ = ["PositionalEncoding", "InputEncoding", "NoTerm", "PositionalTerm", "PositionMap",
           "ContentDependentPositions", "check_length", "token_positions", "at_positions",
           "AS_IS", "POSITIONS", "REFUSED"]

# fairseq's init_bert_params draws every embedding and projection from N(0, 0.02)
BERT_INIT_STD = 0.02

INPUT, BIAS, LAYER_BIAS, QK, ROTATION, BLOCK, NONE = "input", "bias", "layer_bias", "qk", "rotation", "block", "none"
ENTERS = (INPUT, BIAS, LAYER_BIAS, QK, ROTATION, BLOCK, NONE)

# ``left_padding``: what a row with padding before its real tokens needs from an encoding
AS_IS = "as_is"  # nothing: its terms depend on j - i only (or it counts real tokens itself), so a shifted row keeps them
POSITIONS = "positions"  # each token's position: the encoder passes ``position_ids`` (B, T) when a batch is left-padded
REFUSED = "refused"  # the math does not allow it: the encoder refuses left-padded input, naming the variant
LEFT_PADDING = (AS_IS, POSITIONS, REFUSED)


class ContentDependentPositions(ValueError):
    """The encoding has no content-free positional map (RoPE, DeBERTa): only real attention maps describe it."""


class PositionMap(NamedTuple):
    """An encoding's content-free map, as the encoding declares it: ``values`` (H, T, T), or (L, H, T, T) one map per
    layer when ``per_layer``; ``weights`` says whether they are attention weights used as they are (PAM) rather than
    logits that a softmax turns into weights. The analysis reads these two flags, not the shape."""

    values: Tensor
    weights: bool = False
    per_layer: bool = False


def check_length(seq_len: int, max_positions: int) -> None:
    """The one refusal of an input longer than the model's positions."""
    if seq_len > max_positions:
        raise ValueError(
            f"sequence of {seq_len} tokens is longer than the model's {max_positions} positions; use "
            "--max-positions/--tokens-per-sample (and --shorten-method truncate for sentence_prediction) "
            "to cut inputs"
        )


class PositionalEncoding(nn.Module):
    """One positional encoding (see the module docstring for the declarations). A subclass sets ``enters`` and
    overrides what differs; its ``__init__`` takes ``(variant, embed_dim, num_heads, max_positions, num_layers)``
    and reads its options from the variant record."""

    enters: str = NONE
    block = SelfAttention  # the attention block of every layer (a subclass where the encoding has its own)
    score_scale: float = 1.0
    left_padding: str = REFUSED  # AS_IS, POSITIONS or REFUSED (above)
    # the record's fields that select it (built-in encodings have flags of their own: {"alibi": True})
    selected_by: Dict[str, object] = {}
    # the record's other fields it reads, its settings ("untie_cls", "rel_pos_bins"): PositionalVariant.validate
    # refuses a flag set away from its default that no encoding of the variant reads
    reads: Tuple[str, ...] = ()
    # whether it is defined together with another encoding (TUPE's Table 1: an input PE, an attention term); an
    # encoding that does not combine is the only position signal of its variant (validate refuses others beside it)
    combines: bool = False
    # an encoding registered without a flag of its own (registry.register(..., encoding=Cls)) is recorded by
    # this number, set by the registry from the variant's name
    record_id: int = 0

    def __init__(self, variant: "PositionalVariant", embed_dim: int, num_heads: int, max_positions: int,
                 num_layers: int = 1):
        super().__init__()
        self.options = variant  # the checkpoint record: the options its fixed tables and parameters read
        self.embed_dim, self.num_heads, self.max_positions = embed_dim, num_heads, max_positions
        self.head_dim, self.num_layers = embed_dim // num_heads, num_layers
        for name, table in self.fixed_tables().items():
            self.register_buffer(name, table, persistent=False)

    # --- which records build it -----------------------------------------------------------------------------
    @classmethod
    def selected(cls, variant: "PositionalVariant") -> bool:
        """Whether ``variant`` has this encoding: every field of ``selected_by`` has its value (a flagless
        encoding: the record id)."""
        if cls.selected_by:
            return all(getattr(variant, field) == value for field, value in cls.selected_by.items())
        return cls.record_id != 0 and variant.encoding_id == cls.record_id

    @classmethod
    def switches(cls) -> Tuple[str, ...]:
        """The record's fields that switch it on, as a refusal names them: those of ``selected_by`` away from their
        defaults (``--alibi``), or ``encoding_id`` for an encoding registered without flags. An encoding that
        overrides ``selected`` overrides this too."""
        if not cls.selected_by:
            return ("encoding_id",)
        defaults = {f.name: f.default for f in fields(PositionalVariant)}
        return tuple(name for name, value in cls.selected_by.items() if value != defaults[name])

    @classmethod
    def scale_for(cls, variant: "PositionalVariant") -> float:
        """``score_scale`` for ``variant`` (an encoding whose scale depends on its options overrides this)."""
        return cls.score_scale

    @classmethod
    def left_padding_for(cls, variant: "PositionalVariant") -> str:
        """``left_padding`` for ``variant`` (an encoding whose answer depends on its options overrides this)."""
        return cls.left_padding

    @property
    def reads_positions(self) -> bool:
        """Whether this encoding takes ``position_ids`` in a left-padded batch (``left_padding == POSITIONS``)."""
        return self.left_padding_for(self.options) == POSITIONS

    # --- what the rest of the model asks ---------------------------------------------------------------------
    @classmethod
    def attention_block(cls, variant: "PositionalVariant", embed_dim: int, num_heads: int, dropout: float,
                        attention_path: str, max_positions: int) -> SelfAttention:
        """The attention block of every layer: ``block`` (the plain ``SelfAttention`` unless the encoding has its
        own) at this encoding's scale."""
        return cls.block(embed_dim, num_heads, dropout=dropout, scale_factor=cls.scale_for(variant),
                             attention_path=attention_path)

    @classmethod
    def untrained_beyond(cls, variant: "PositionalVariant", trained: int) -> Optional[str]:
        """Why this encoding's positions beyond the trained length ``trained`` mean nothing in ``variant``, or None
        when they do (fixed functions of position or distance, buckets that saturate, or no positions at all)."""
        return None

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        """The position-only map of a model whose ``positions`` this is (its state loaded), or None when it adds
        nothing at the attention. ``encoder_state``: the encoder's state dict (keys relative to the encoder),
        for encodings whose positions live in the layers. Default: the bias of ``forward``, (H, T, T), or one per
        layer where the encoding declares ``enters == LAYER_BIAS``."""
        with torch.no_grad():
            bias = self(seq_len).bias
        return None if bias is None else PositionMap(bias, per_layer=self.enters == LAYER_BIAS)

    def initial_values(self) -> Dict[str, Tensor]:
        """The tensors that start at fixed values, by attribute name: the fixed tables and the parameters that do
        not start as N(0, 0.02) (fairseq's init_bert_params). The exported model sets them in its init
        (transformers builds it on the meta device, then loads the parameters a checkpoint has)."""
        return self.fixed_tables()

    def fixed_tables(self) -> Dict[str, Tensor]:
        """The non-persistent buffers, computed from the options and sizes alone (registered by ``__init__``)."""
        return {}

    def forward(self, seq_len: int) -> PositionalTerm:
        """The term of every layer for ``seq_len`` tokens at positions 0..T-1. An encoding that declares
        ``left_padding = POSITIONS`` takes ``position_ids`` too ((B, T), each token's position, given only when the
        batch has left padding) and returns the terms of those positions (``at_positions``)."""
        check_length(seq_len, self.max_positions)
        return PositionalTerm(None)


class InputEncoding(PositionalEncoding):
    """An encoding added to the word embeddings: the encoder's ``embed_positions``, called with the tokens
    (fairseq's ``forward_embedding``). ``padding_idx``: the dictionary's pad, for encodings that skip pads."""

    enters = INPUT

    def __init__(self, variant: "PositionalVariant", embed_dim: int, num_heads: int, max_positions: int,
                 num_layers: int = 1, padding_idx: int = 1):
        self.padding_idx = padding_idx  # before the base's __init__: fixed tables may read it
        super().__init__(variant, embed_dim, num_heads, max_positions, num_layers)

    def rows(self, seq_len: int) -> Tensor:
        """(T, d): what tokens 0..T-1 of a sequence without padding get added."""
        raise NotImplementedError

    def forward(self, src_tokens: Tensor, position_ids: Optional[Tensor] = None) -> Tensor:
        """(B, T) -> broadcastable to (B, T, d): ``rows``, or with ``position_ids`` (B, T) (a left-padded batch,
        ``left_padding = POSITIONS``) the row of each token's position."""
        check_length(src_tokens.size(1), self.max_positions)
        rows = self.rows(src_tokens.size(1))
        return rows.unsqueeze(0) if position_ids is None else F.embedding(position_ids, rows)


class NoTerm(PositionalEncoding):
    """Nothing at the attention: the ``positions`` of a variant whose positions are all at the input (BERT-A,
    sinusoidal) or that has none (NoPE). Left padding is harmless to it."""

    left_padding = AS_IS  # the registry's fallback: no selected_by, never chosen by a flag


def token_positions(padding_mask: Tensor) -> Tensor:
    """(B, T) each token's position in its sequence, from the (B, T) padding mask (True at pads): real tokens count
    0, 1, ... after any left padding; pads get 0 before the first real token and the last position after it (their
    rows and columns are masked)."""
    return (torch.cumsum(~padding_mask, dim=1) - 1).clamp(min=0)


def at_positions(bias: Tensor, position_ids: Tensor) -> Tensor:
    """A (G, T, T) term of positions 0..T-1 (G heads, or 1) read at each sequence's ``position_ids`` (B, T):
    (B, G, T, T) with ``[b, g, i, j] = bias[g, pos[b, i], pos[b, j]]``, one gather (its backward an index_add
    into the shared term). The per-sequence bias of a left-padded batch, for a term built from positions."""
    G, T, _ = bias.shape
    B = position_ids.size(0)
    index = (position_ids[:, :, None] * T + position_ids[:, None, :]).reshape(-1)  # (B T T)
    return bias.reshape(G, T * T).index_select(1, index).view(G, B, T, T).transpose(0, 1)
