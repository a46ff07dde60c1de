"""The base attention block of every layer, ``SelfAttention``: multi-head self-attention whose logits get an
additive, batch-shared bias (TUPE, T5, ALiBi, the priors; or none). An encoding with its own block subclasses
it and changes how positions enter q, k and the mask (``positional_qk``, reading its encoding's
``PositionalTerm.payload``): ``bert_ad.py``, ``rope.py``, ``deberta.py``, ``pam.py``; each encoding's ``attention_block`` builds the block of every layer. Formulas:
``docs/positional_encodings.md``.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from .attend import PATHS, Dropout, attend, check_attention_path, choose_attention_path, say_once
from .masks import AttentionMask


class PositionalTerm(NamedTuple):
    """What every layer's block receives from the encoding at the attention, once per forward.

    ``bias``: the content-free logits that the attention core adds (the mask of every layer is built from it):
    (H, T, T) shared by the batch, (B, H, T, T) per sequence, (L, H, T, T) one per layer for an encoding that
    declares ``enters == LAYER_BIAS``, or None. ``payload``: whatever the encoding's own attention block reads
    (RoPE's ``Rotation``, DeBERTa's ``RelativeRows``, BERT-Ad's ``PositionQK``: a small NamedTuple defined in the
    encoding's module), or None; only that block reads it, so a new kind of payload needs no edit here."""

    bias: Optional[Tensor]
    payload: Any = None


class SelfAttention(nn.Module):
    """Multi-head self-attention: ``softmax(q k^T * (scale_factor * dh)^-0.5 + mask) v``, the base of every block.

    Parameter names follow fairseq's ``MultiheadAttention`` (q_proj, k_proj, v_proj, out_proj).
    ``scale_factor`` is 1 for BERT, 2 for TUPE (the paper's 1/sqrt(2d) per head), 4 for BERT-Ad,
    3 for DeBERTa. Subclasses change only ``positional_qk`` (how positions enter q, k and the mask).
    ``attention_path`` (``--tupe-attention``) picks the path of ``attend``: ``sdpa``, ``explicit`` (it
    returns the weights), ``triton``, ``flex``, or ``auto`` (``choose_attention_path``, per forward).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        scale_factor: float = 1.0,
        attention_path: str = "auto",
    ):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = (self.head_dim * scale_factor) ** -0.5
        self.attention_path = check_attention_path(attention_path)
        if self.attention_path in PATHS and not PATHS[self.attention_path].dropout and dropout > 0:
            raise ValueError(f"--tupe-attention {self.attention_path} has no attention dropout (its kernel applies "
                             f"none), but the model's is {dropout}: use --tupe-attention triton (dropout inside the "
                             "kernel), or --attention-dropout 0 (MosaicBERT's and ModernBERT's recipe)")
        self.dropout_module = Dropout(dropout)
        self.last_path: Optional[str] = None
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def initial_values(self) -> Dict[str, Tensor]:
        """Parameters of an encoding's own block that do not start as N(0, 0.02) (PAM's weights); none here."""
        return {}

    def _heads(self, x: Tensor) -> Tensor:
        T, B, _ = x.shape
        return x.view(T, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)  # (B, H, T, dh)

    def forward_path(self, x: Tensor, mask: Optional[AttentionMask] = None, need_weights: bool = False) -> str:
        """The attention path of this forward: ``explicit`` when the weights are asked for, else
        ``attention_path``; ``auto`` decided from x's (q's: (B, H, T, dh)) device and dtype, training mode, the
        attention dropout and whether the mask's bias needs a gradient (said in the log once)."""
        if need_weights or self.attention_path == "explicit":
            return "explicit"
        if self.attention_path != "auto":
            return self.attention_path
        learned = mask is not None and mask.learned_bias
        path, why = choose_attention_path(x.device, self.training, self.dropout_module.p, x.dtype, learned,
                                          self.head_dim, learned and mask.bias.dim() == 4,
                                          (x, mask.bias) if learned else None)
        say_once(path, why)
        return path

    def forward(
        self,
        x: Tensor,
        mask: Optional[AttentionMask],
        positions: PositionalTerm,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (T, B, C); mask: this layer's ``AttentionMask`` (positional bias and key padding), or None;
        positions: this forward's ``PositionalTerm``; key_padding_mask: (B, T) True at padding, or None (also in
        ``mask``; for blocks that need it alone). Returns (T, B, C) and, on the explicit path (always with
        ``need_weights``), the (B, H, T, T) attention probabilities."""
        T, B, C = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        q, k, mask = self.positional_qk(q, k, mask, positions)
        path = self.forward_path(q, mask, need_weights)
        if not torch.compiler.is_compiling():  # what this forward took (benchmarks read it); no side effect in a graph
            self.last_path = path
        out, weights = attend(q, k, v, mask, self.scaling, self.dropout_module, path, self.attention_path == "auto")
        out = out.permute(2, 0, 1, 3).reshape(T, B, C)
        return self.out_proj(out), weights

    def positional_qk(
        self, q: Tensor, k: Tensor, mask: Optional[AttentionMask], positions: PositionalTerm
    ) -> Tuple[Tensor, Tensor, Optional[AttentionMask]]:
        """q, k: (B, H, T, dh); how positions enter q, k and the mask, from ``positions.payload`` (an encoding's own
        block overrides this: ``bert_ad.py``, ``rope.py``, ``deberta.py``). Here: nothing, they pass through."""
        return q, k, mask

