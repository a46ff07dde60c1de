"""What a positional encoding is: ``PositionalEncoding``, the base class of every encoding (what it hands every
layer, ``PositionalTerm``, is the attention core's: ``attention.py``).

An encoding is one ``nn.Module`` that owns its parameters and fixed tables and *declares* what the rest of the
model asks of it (x-transformers' habit), so the encoder, the attention blocks, the analysis, the study and
the Hugging Face export read these declarations instead of branching on flags; its options are its own
(``Options``), given to its ``__init__`` and to the classmethods below:

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
``name``               its name in the checkpoint record (``record.py``): never changes once written
``Options``            its options, a frozen dataclass (``options.py``: each field made by ``option`` is a ``--flag``
                       of the same name); ``validate`` checks them; ``self.options`` holds them
``flags``              the flags that select it, declared here (``--alibi``), besides its options' own
``selected_by``        the flag values that select it (none: only its arch does, as KERPLE's)
``combines``           whether it is defined together with another encoding (TUPE's Table 1), else it is the only
                       position signal of its variant (the registry refuses company beside it)
``fixed_tables``       its non-persistent buffers, computed from its options (``self.options``) and sizes
=====================  ========================================================================================

An encoding sits in one of two places of the encoder: ``embed_positions`` (``enters == INPUT``: fairseq calls it
with the tokens) or ``positions`` (every other kind: called once per forward with the length). A variant
(``registry.py``) is one of each, or fewer.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import PositionalTerm, SelfAttention
from .options import Flag, NoOptions, choices, option_flags

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

# The flags that select one of several encodings by value (their choices: the default and the encodings' values)
ATTENTION_BLOCK = Flag("attention_block", "standard",
                       "attention of every layer: standard, rope (rotary q/k), deberta (c2p + p2c), pam_* (PAM blocks)")
DISTANCE_PRIOR = Flag("distance_prior", "none", "L&S paper: add a fixed (gaussian) or learned per-layer "
                                                "(learned_gaussian) distance prior")


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
    overrides what differs; its ``__init__`` takes ``(options, embed_dim, num_heads, max_positions, num_layers)``,
    ``options`` its own ``Options``."""

    enters: str = NONE
    block = SelfAttention  # the attention block of every layer (a subclass where the encoding has its own)
    score_scale: float = 1.0
    left_padding: str = REFUSED  # AS_IS, POSITIONS or REFUSED (above)
    name: str = ""  # its name in the checkpoint record
    Options: type = NoOptions  # its options (options.py)
    # the flags that select it, declared here, and their values that select it ({"alibi": True}); a flag of another
    # encoding or a selecting flag of base.py may appear in selected_by without being declared here
    flags: Tuple[Flag, ...] = ()
    selected_by: Dict[str, object] = {}
    # whether it is defined together with another encoding (TUPE's Table 1: an input PE, an attention term); an
    # encoding that does not combine is the only position signal of its variant (the registry refuses others beside it)
    combines: bool = False

    def __init__(self, options: Any, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__()
        self.options = options  # its Options: what its fixed tables and parameters read
        self.embed_dim, self.num_heads, self.max_positions = embed_dim, num_heads, max_positions
        self.head_dim, self.num_layers = embed_dim // num_heads, num_layers
        for name, table in self.fixed_tables().items():
            self.register_buffer(name, table, persistent=False)

    # --- its options and flags -------------------------------------------------------------------------------
    @classmethod
    def option_flags(cls) -> Tuple[Flag, ...]:
        """The flags of its options (the fields of ``Options`` made by ``option``)."""
        return option_flags(cls.Options)

    @classmethod
    def validate(cls, options: Any) -> None:
        """Refuse options that are not this encoding's (a choice it does not have); an encoding with rules of its
        own between options overrides this (and calls it)."""
        flagged = {flag.name for flag in cls.option_flags()}
        for name, allowed in choices(cls.Options).items():
            if getattr(options, name) not in allowed:
                called = f"--{name.replace('_', '-')}" if name in flagged else f"{cls.__name__}'s {name}"
                raise ValueError(f"{called} must be one of {allowed}, got {getattr(options, name)!r}")

    @classmethod
    def selects(cls, flags: Mapping[str, Any]) -> bool:
        """Whether the flag values ``flags`` select it: every flag of ``selected_by`` has its value."""
        return bool(cls.selected_by) and all(flags[name] == value for name, value in cls.selected_by.items())

    @classmethod
    def options_from_flags(cls, flags: Mapping[str, Any]) -> Any:
        """Its options from the flag values ``flags`` (each option flag's value)."""
        return cls.Options(**{f.name: flags[f.name] for f in cls.option_flags()})

    @classmethod
    def to_flags(cls, options: Any) -> Dict[str, Any]:
        """The flag values that select it with ``options`` (the inverse of ``selects`` and ``options_from_flags``)."""
        return {**cls.selected_by, **{f.name: getattr(options, f.name) for f in cls.option_flags()}}

    @classmethod
    def selected_values(cls, flag: str) -> Tuple[Any, ...]:
        """The values of the selecting flag ``flag`` that select it (a choice of ``--attention-block``)."""
        return (cls.selected_by[flag],) if flag in cls.selected_by else ()

    @classmethod
    def switches(cls, defaults: Mapping[str, Any]) -> Tuple[str, ...]:
        """The flags that switch it on, as a refusal names them: those of ``selected_by`` away from their defaults
        (``--alibi``). An encoding that overrides ``selects`` overrides this too."""
        return tuple(name for name, value in cls.selected_by.items() if value != defaults[name])

    @classmethod
    def scale_for(cls, options: Any) -> float:
        """``score_scale`` for ``options`` (an encoding whose scale depends on its options overrides this)."""
        return cls.score_scale

    @classmethod
    def left_padding_for(cls, options: Any) -> str:
        """``left_padding`` for ``options`` (an encoding whose answer depends on its options overrides this)."""
        return cls.left_padding

    @property
    def reads_positions(self) -> bool:
        """Whether this encoding takes ``position_ids`` in a left-padded batch (``left_padding == POSITIONS``)."""
        return self.left_padding_for(self.options) == POSITIONS

    # --- what the rest of the model asks ---------------------------------------------------------------------
    @classmethod
    def attention_block(cls, options: Any, embed_dim: int, num_heads: int, dropout: float,
                        attention_path: str, max_positions: int) -> SelfAttention:
        """The attention block of every layer: ``block`` (the plain ``SelfAttention`` unless the encoding has its
        own) at this encoding's scale."""
        return cls.block(embed_dim, num_heads, dropout=dropout, scale_factor=cls.scale_for(options),
                             attention_path=attention_path)

    @classmethod
    def untrained_beyond(cls, options: Any, trained: int) -> Optional[str]:
        """Why this encoding's positions beyond the trained length ``trained`` mean nothing with ``options``, or None
        when they do (fixed functions of position or distance, buckets that saturate, or no positions at all)."""
        return None

    def trained_positions(self, encoder_state: Mapping[str, Tensor]) -> Optional[int]:
        """The ``--max-positions`` a checkpoint was trained with, read from this encoding's parameters that have a
        row (or column) per position or distance (a model with another number cannot load them), else None.
        ``encoder_state``: the checkpoint's encoder state (keys relative to the encoder, as :meth:`content_free_map`
        reads it). Default: None (no such parameter)."""
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

    def __init__(self, options: Any, embed_dim: int, num_heads: int, max_positions: int,
                 num_layers: int = 1, padding_idx: int = 1):
        self.padding_idx = padding_idx  # before the base's __init__: fixed tables may read it
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)

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
    name = "none"


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
