"""What positions contribute to attention, computed once per forward and shared by all layers.

TUPE's content-free term (Ke et al. 2021, Eq. 7-11), the T5 relative bias, the L&S distance priors,
ALiBi's linear bias, RoPE's rotation tables, DeBERTa's shared relative embeddings, and the fixed
sinusoidal input PE. Formulas and sources: ``docs/positional_encodings.md``.

Plain torch (no fairseq import): ``tupe-export-hf`` ships this file into the exported model folder.

Shapes: ``H`` heads, ``T`` tokens (token 0 is ``<s>`` = [CLS]), ``d`` model width, ``dh = d / H``.
The official code (guolinke/TUPE) is the reference where it differs from the paper:

* the position table has ``max_positions + 1`` rows; token ``i`` uses row ``i + 1``;
* ``U^Q, U^K`` are ``nn.Linear(d, d)`` *with* bias, applied to ``LayerNorm(table)``;
* the absolute term is scaled by ``(2 * dh) ** -0.5``; the relative bias is not scaled;
* [CLS] untie: ``theta1 = q(row 0) . k(row 0)`` fills row 0 (incl. [0, 0]),
  ``theta2 = q(row 1) . k(row 1)`` fills column 0 (rows 1..T-1);
* relative buckets: T5 bidirectional (32 buckets, max distance 128); with the [CLS] untie,
  column 0 uses the extra bucket 32 and row 0 the never-used bucket 16.

The distance priors of the Locality & Symmetry paper's code (docs/positional_encodings.md) are one more option:
``gaussian`` adds ``softmax_j(-0.5 (j - i)^2)`` to every layer and head (``attenuated.py``; the
softmax runs over all ``max_positions`` keys, as for the official code's inputs padded to max_len,
so the prior of a sequence does not depend on the padding of its batch),
``learned_gaussian`` a learned scalar per layer, head and distance ``|j - i|``, initialised to
``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)`` (``attenuated_l.py``).
"""
from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
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


def alibi_slopes(num_heads: int) -> List[float]:
    """Press et al.'s head slopes: ``2^(-8 h / n)`` for ``h = 1..n`` when ``n`` is a power of 2; otherwise
    the slopes of the closest smaller power of 2, then every other slope of twice that number."""
    def power_of_2(n: int) -> List[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_2(num_heads)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_2(closest) + power_of_2(2 * closest)[0::2][: num_heads - closest]


def check_length(seq_len: int, max_positions: int) -> None:
    """The one refusal of an input longer than the model's positions (input PE, positional term, PAM)."""
    if seq_len > max_positions:
        raise ValueError(
            f"sequence of {seq_len} tokens is longer than the model's {max_positions} positions; use "
            "--max-positions/--tokens-per-sample (and --shorten-method truncate for sentence_prediction) "
            "to cut inputs"
        )


def gaussian_by_distance(max_positions: int) -> Tensor:
    """(max_positions,): ``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)`` for ``d = 0 .. P-1``, in
    float64 then float32: the L&S code's initial weight per distance (``attenuated_l.py``, the PAM blocks)."""
    d = torch.arange(max_positions, dtype=torch.float64)
    w = torch.exp(-0.5 * d**2)
    return (w / w.sum()).float()


def relative_buckets(variant, max_positions: int) -> Tensor:
    """(P, P) bucket of query i, key j, with the [CLS] buckets of ``untie_cls``: the table the original TUPE
    release stores (``rp_bucket``; the converter compares it). The model reads the 2P - 1 distances only."""
    idx = torch.arange(max_positions)
    bucket = relative_position_bucket(idx[None, :] - idx[:, None], variant.rel_pos_bins, variant.max_rel_pos)
    if variant.untie_cls:
        bucket[:, 0] = variant.rel_pos_bins  # others -> [CLS]: the extra bucket
        bucket[0, :] = variant.rel_pos_bins // 2  # [CLS] -> all: the bucket no pair uses
    return bucket


def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al.'s PE: ``PE[p, 2i] = sin(p / base^(2i/d))``, ``PE[p, 2i+1] = cos(p / base^(2i/d))``."""
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(d/2),)
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table.float()


# fairseq's init_bert_params draws every embedding from N(0, 0.02): the scale of the words at initialisation
WORD_INIT_STD = 0.02


class SinusoidalInputPositions(nn.Module):
    """Fixed sin/cos PE added to the word embeddings (fairseq calls it as ``embed_positions``); token
    ``i`` (0 = [CLS]) gets row ``i``. No parameters, nothing in the state dict.

    ``scaled``: the table times ``WORD_INIT_STD``. Vaswani et al. add the table (RMS 1/sqrt(2)) to words
    drawn from N(0, 1/d) and multiplied by sqrt(d) (RMS 1); RoBERTa's words are N(0, 0.02) and not
    multiplied, so the unscaled table outweighs them 35:1. Scaled, positions and words stand 0.71:1 at
    initialisation, Vaswani's ratio at every width, and the embedding LayerNorm removes the common factor."""

    def __init__(self, embed_dim: int, max_positions: int, scaled: bool = True):
        super().__init__()
        self.embed_dim, self.max_positions, self.scaled = embed_dim, max_positions, scaled
        for name, table in self.fixed_tables().items():
            self.register_buffer(name, table, persistent=False)

    def fixed_tables(self) -> Dict[str, Tensor]:
        """The buffers, computed from the sizes alone (the exported model recomputes them after loading)."""
        table = sinusoidal_table(self.max_positions, self.embed_dim)
        return {"table": table * WORD_INIT_STD if self.scaled else table}

    def forward(self, src_tokens: Tensor) -> Tensor:
        check_length(src_tokens.size(1), self.max_positions)
        return self.table[: src_tokens.size(1)].unsqueeze(0)  # (1, T, d): right padding keeps 0..len-1


class PositionalTerm(NamedTuple):
    """What every layer receives. Each attention block reads the fields it uses."""

    bias: Optional[Tensor]  # (H, T, T) content-free logits, (L, H, T, T) if per layer, or None
    query: Optional[Tensor] = None  # (H, T, dh) positional query added to the content query (BERT-Ad)
    key: Optional[Tensor] = None  # (H, T, dh) positional key added to the content key (BERT-Ad)
    rotary: Optional[Tuple[Tensor, Tensor]] = None  # RoPE (cos, sin), each (T, dh)
    rel_embeddings: Optional[Tensor] = None  # DeBERTa: (R, d) rows of the shared relative table in use
    rel_index: Optional[Tensor] = None  # DeBERTa: (T, T) row of rel_embeddings for query i, key j


class TupePositions(nn.Module):
    """The positional part of every variant, computed once per forward and shared by all layers.

    ``variant`` (a ``PositionalVariant``, models/variants.py) decides what is built:
        untied_pos: ``p_i U^Q (p_j U^K)^T`` from a separate position table (TUPE).
        untie_cls: reset row/column 0 to per-head thetas (and the CLS relative buckets).
        rel_pos: add the T5-bucketed relative bias ``b_{j-i}`` (one scalar per bucket and head).
        pos_mixed_terms: BERT-Ad: instead of a bias, return position q/k that every layer adds to
            its content q/k, which keeps all four word/position terms of the paper's Eq. 6.
        distance_prior: the L&S Gaussian priors; alibi: ``-m_h |j - i|``;
        attention_block rope: the rotation tables; deberta: the shared relative embeddings.

    The logit terms a variant has are added (``forward``); which flags may be combined at all is decided in
    one place, ``PositionalVariant.validate``, called here too, so a combination it refuses is an error
    naming the flags, never a term silently replacing another.
    """

    def __init__(self, variant, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__()
        variant.validate()
        # not "self.variant": that name is the checkpoint record buffer (models/tupe_roberta.py)
        v = self.positional_variant = variant
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.max_positions = max_positions
        self.scaling = (self.head_dim * v.attn_scale_factor) ** -0.5
        if v.distance_prior == "learned_gaussian":  # (L, H, P): one scalar per layer, head and distance
            self.distance_bias = nn.Parameter(gaussian_by_distance(max_positions).repeat(num_layers, num_heads, 1))
        if v.untied_pos or v.pos_mixed_terms:
            self.pos = nn.Embedding(max_positions + 1, embed_dim)
            self.pos_ln = nn.LayerNorm(embed_dim)
            self.pos_q_linear = nn.Linear(embed_dim, embed_dim)
            self.pos_k_linear = nn.Linear(embed_dim, embed_dim)
        if v.rel_pos:
            self.relative_attention_bias = nn.Embedding(v.rel_pos_bins + 1, num_heads)
        if v.attention_block == "deberta":
            self.rel_embeddings = nn.Embedding(2 * v.max_rel_pos, embed_dim)  # shared by all layers
        for name, table in self.fixed_tables().items():
            self.register_buffer(name, table, persistent=False)

    def fixed_tables(self) -> Dict[str, Tensor]:
        """The non-persistent buffers, computed from the variant and the sizes: registered by ``__init__``, and
        recomputed by the exported model after loading (transformers builds it on the meta device)."""
        v, P, H = self.positional_variant, self.max_positions, self.num_heads
        idx = torch.arange(P)
        relative = idx[None, :] - idx[:, None]  # (P, P) = j - i
        distance = relative.abs()
        tables = {}
        if v.distance_prior == "gaussian":  # rows normalised over all positions, once
            tables["gaussian_prior"] = torch.softmax(-0.5 * distance.double() ** 2, dim=-1).float()
        if v.distance_prior == "learned_gaussian" or v.alibi:
            tables["distance"] = distance
        if v.alibi:
            tables["alibi_slopes"] = torch.tensor(alibi_slopes(H))
        if v.rel_pos:  # one bucket per distance j - i = -(P-1) .. P-1: what relative_bias reads
            tables["rp_bucket_by_distance"] = relative_position_bucket(
                torch.arange(-(P - 1), P), v.rel_pos_bins, v.max_rel_pos)
        if v.attention_block == "rope":
            dh = self.head_dim
            inv_freq = 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (dh/2,)
            angle = idx.double()[:, None] * inv_freq  # (P, dh/2)
            angle = torch.cat([angle, angle], dim=-1)  # (P, dh): dims m and m + dh/2 share angle m
            tables["rope_cos"], tables["rope_sin"] = angle.cos().float(), angle.sin().float()
        if v.attention_block == "deberta":  # delta(i, j) = clamp(i - j + k, 0, 2k - 1): the row for query i, key j
            k = v.max_rel_pos
            tables["rel_index"] = (-relative + k).clamp(0, 2 * k - 1)
        return tables

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        v, T, H, dh = self.positional_variant, seq_len, self.num_heads, self.head_dim
        terms: List[Tensor] = []  # additive logit terms, (H, T, T) or (L, H, T, T): their sum is the bias
        query = key = rotary = rel_embeddings = rel_index = None
        # TUPE's term: the untied absolute term and/or the T5 relative bias, then the [CLS] reset of their sum
        tupe = cls_row = cls_col = None
        if v.untied_pos or v.pos_mixed_terms:
            p = self.pos_ln(self.pos.weight[: T + 1])  # (T+1, d)
            q = self.pos_q_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
            k = self.pos_k_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
            if v.pos_mixed_terms:  # BERT-Ad: not a logit term; every layer adds them to its content q/k
                query, key = q[:, 1:], k[:, 1:]
            else:
                abs_term = torch.bmm(q * self.scaling, k.transpose(1, 2))  # (H, T+1, T+1)
                tupe = abs_term[:, 1:, 1:]  # token i <-> table row i + 1
                if v.untie_cls:  # theta1: [CLS] -> all, theta2: others -> [CLS] (copies: tupe is written below)
                    cls_row, cls_col = abs_term[:, 0, 0].clone(), abs_term[:, 1, 1].clone()
        if v.rel_pos:
            rel = self.relative_bias(T)  # (H, T, T)
            tupe = rel if tupe is None else tupe + rel
            if v.untie_cls:  # [CLS]'s row: the bucket no pair uses; the others' column 0: the extra bucket
                w = self.relative_attention_bias.weight  # (bins + 1, H)
                row, col = w[v.rel_pos_bins // 2], w[v.rel_pos_bins]
                cls_row, cls_col = (row, col) if cls_row is None else (cls_row + row, cls_col + col)
        if cls_row is not None:  # in place, row last: [0, 0] is [CLS]'s own row (theta1)
            tupe[:, 1:, 0] = cls_col[:, None]
            tupe[:, 0, :] = cls_row[:, None]
        if tupe is not None:
            terms.append(tupe)
        if v.distance_prior == "gaussian":
            terms.append(self.gaussian_prior[:T, :T].expand(H, T, T))
        elif v.distance_prior == "learned_gaussian":
            terms.append(self.distance_bias[:, :, self.distance[:T, :T]])  # (L, H, T, T): one per layer
        if v.alibi:
            terms.append(-self.alibi_slopes.view(H, 1, 1) * self.distance[:T, :T])  # (H, T, T)
        if v.attention_block == "rope":
            rotary = (self.rope_cos[:T], self.rope_sin[:T])
        if v.attention_block == "deberta":
            k = v.max_rel_pos
            lo, hi = max(0, k - T + 1), min(2 * k, k + T)  # the rows that T tokens can use
            rel_embeddings, rel_index = self.rel_embeddings.weight[lo:hi], self.rel_index[:T, :T] - lo
        bias = None
        for term in terms:
            bias = term if bias is None else bias + term
        return PositionalTerm(bias, query, key, rotary, rel_embeddings, rel_index)

    def relative_bias(self, seq_len: int) -> Tensor:
        """(H, T, T) T5 bias ``b_h[bucket(j - i)]``, read from the 2T - 1 distances (a Toeplitz matrix as a
        view of one row per distance, then one copy), not T^2 lookups: the same values, a far cheaper
        backward than the embedding gradient of T^2 indices."""
        T, P = seq_len, self.max_positions
        by_distance = self.relative_attention_bias(self.rp_bucket_by_distance[P - T: P + T - 1])  # (2T-1, H)
        # unfold: [h, s, t] = by_distance[s + t, h]; flipping s -> T - 1 - i gives index j - i + T - 1
        return by_distance.t().unfold(-1, T, 1).flip(1)
