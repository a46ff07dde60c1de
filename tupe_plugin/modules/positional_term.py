"""The content-free positional term of TUPE (Ke et al. 2021, Eq. 7-11), computed once per forward.

Shapes: ``H`` heads, ``T`` tokens (token 0 is ``<s>`` = [CLS]), ``d`` model width, ``dh = d / H``.
The official code (guolinke/TUPE) is the reference where it differs from the paper:

* the position table has ``max_positions + 1`` rows; token ``i`` uses row ``i + 1``;
* ``U^Q, U^K`` are ``nn.Linear(d, d)`` *with* bias, applied to ``LayerNorm(table)``;
* the absolute term is scaled by ``(2 * dh) ** -0.5``; the relative bias is not scaled;
* [CLS] untie: ``theta1 = q(row 0) . k(row 0)`` fills row 0 (incl. [0, 0]),
  ``theta2 = q(row 1) . k(row 1)`` fills column 0 (rows 1..T-1);
* relative buckets: T5 bidirectional (32 buckets, max distance 128); with the [CLS] untie,
  column 0 uses the extra bucket 32 and row 0 the never-used bucket 16.

The distance priors of the Locality & Symmetry paper's code (PAPERS.md §2.6) are one more option:
``gaussian`` adds ``softmax_j(-0.5 (j - i)^2)`` to every layer and head (``attenuated.py``; the
softmax runs over all ``max_positions`` keys, as for the official code's inputs padded to max_len,
so the prior of a sequence does not depend on the padding of its batch),
``learned_gaussian`` a learned scalar per layer, head and distance ``|j - i|``, initialised to
``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)`` (``attenuated_l.py``).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from fairseq.modules import LayerNorm
from torch import Tensor, nn


def relative_position_bucket(
    relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bidirectional bucket of ``j - i``: keys on the left (and self) get
    ``0 .. num_buckets/2 - 1``, keys on the right ``num_buckets/2 ..``; exact up to
    ``num_buckets/4``, logarithmic up to ``max_distance``, then saturated."""
    half = num_buckets // 2
    n = -relative_position
    bucket = (n < 0).long() * half
    n = n.abs()
    max_exact = half // 2
    # float32 log, as in the official code (it decides the bucket edges, e.g. distance 16 -> 10)
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + log_ratio * (half - max_exact)).long().clamp(max=half - 1)
    return bucket + torch.where(n < max_exact, n, large)


class PositionalTerm(NamedTuple):
    """What every layer receives: an additive logit bias and/or per-head position q/k."""

    bias: Optional[Tensor]  # (H, T, T) content-free logits, (L, H, T, T) if per layer, or None
    query: Optional[Tensor]  # (H, T, dh) positional query added to the content query (BERT-Ad)
    key: Optional[Tensor]  # (H, T, dh) positional key added to the content key (BERT-Ad)


class TupePositions(nn.Module):
    """Positional correlations shared by all layers.

    Args:
        untied_pos: learn ``p_i U^Q (p_j U^K)^T`` from a separate position table (TUPE).
        untie_cls: reset row/column 0 to per-head thetas (and the CLS relative buckets).
        rel_pos: add the T5-bucketed relative bias ``b_{j-i}`` (one scalar per bucket and head).
        mixed_terms: BERT-Ad: instead of a bias, return position q/k that every layer adds to
            its content q/k, which keeps all four word/position terms of the paper's Eq. 6.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        max_positions: int,
        untied_pos: bool,
        untie_cls: bool,
        rel_pos: bool,
        mixed_terms: bool = False,
        rel_pos_bins: int = 32,
        max_rel_pos: int = 128,
        scale_factor: float = 2.0,
        distance_prior: str = "none",
        num_layers: int = 1,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.max_positions = max_positions
        self.untied_pos, self.untie_cls, self.rel_pos = untied_pos, untie_cls, rel_pos
        self.mixed_terms = mixed_terms
        self.rel_pos_bins = rel_pos_bins
        self.scaling = (self.head_dim * scale_factor) ** -0.5
        self.distance_prior = distance_prior
        idx = torch.arange(max_positions)
        relative = idx[None, :] - idx[:, None]  # (T, T) = j - i
        distance = relative.abs()
        if distance_prior == "gaussian":  # rows normalised over all positions, once
            prior = torch.softmax(-0.5 * distance.double() ** 2, dim=-1).float()
            self.register_buffer("gaussian_prior", prior, persistent=False)
        if distance_prior == "learned_gaussian":
            self.register_buffer("distance", distance, persistent=False)
            d = torch.arange(max_positions, dtype=torch.float64)
            init = torch.exp(-0.5 * d**2) / torch.exp(-0.5 * d**2).sum()
            self.distance_bias = nn.Parameter(init.float().repeat(num_layers, num_heads, 1))  # (L, H, T)
        if untied_pos or mixed_terms:
            self.pos = nn.Embedding(max_positions + 1, embed_dim)
            self.pos_ln = LayerNorm(embed_dim)
            self.pos_q_linear = nn.Linear(embed_dim, embed_dim)
            self.pos_k_linear = nn.Linear(embed_dim, embed_dim)
        if rel_pos:
            self.relative_attention_bias = nn.Embedding(rel_pos_bins + 1, num_heads)
            bucket = relative_position_bucket(relative, rel_pos_bins, max_rel_pos)  # (T, T)
            if untie_cls:
                bucket[:, 0] = rel_pos_bins  # others -> [CLS]: the extra bucket
                bucket[0, :] = rel_pos_bins // 2  # [CLS] -> all: the bucket no pair uses
            self.register_buffer("rp_bucket", bucket, persistent=False)

    def forward(self, seq_len: int) -> PositionalTerm:
        if seq_len > self.max_positions:
            raise ValueError(
                f"sequence of {seq_len} tokens is longer than the model's {self.max_positions} "
                "positions; use --max-positions/--tokens-per-sample (and --shorten-method truncate "
                "for sentence_prediction) to cut inputs"
            )
        T, H, dh = seq_len, self.num_heads, self.head_dim
        bias = query = key = None
        if self.untied_pos or self.mixed_terms:
            p = self.pos_ln(self.pos.weight[: T + 1])  # (T+1, d)
            q = self.pos_q_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
            k = self.pos_k_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
            if self.mixed_terms:
                return PositionalTerm(None, q[:, 1:], k[:, 1:])
            abs_term = torch.bmm(q * self.scaling, k.transpose(1, 2))  # (H, T+1, T+1)
            bias = abs_term[:, 1:, 1:]  # token i <-> table row i + 1
            if self.untie_cls:
                theta1 = abs_term[:, 0, 0].view(H, 1, 1)  # [CLS] -> all
                theta2 = abs_term[:, 1, 1].view(H, 1, 1)  # others -> [CLS]
                idx = torch.arange(T, device=bias.device)
                bias = torch.where((idx == 0).view(1, 1, T), theta2, bias)
                bias = torch.where((idx == 0).view(1, T, 1), theta1, bias)  # row last: [0,0]=theta1
        if self.rel_pos:
            rel = self.relative_attention_bias(self.rp_bucket[:T, :T]).permute(2, 0, 1)  # (H, T, T)
            bias = rel if bias is None else bias + rel
        if self.distance_prior == "gaussian":
            bias = self.gaussian_prior[:T, :T].expand(H, T, T)
        elif self.distance_prior == "learned_gaussian":
            bias = self.distance_bias[:, :, self.distance[:T, :T]]  # (L, H, T, T): one per layer
        return PositionalTerm(bias, query, key)
