"""Loop formulas that several references are made of (TUPE's untied term, the T5 bias, RoPE's rotation, DeBERTa's
c2p + p2c, the content logits), written entry by entry from docs/positional_encodings.md. A reference file
(``tests/references/<variant>.py``) adds up the ones its variant has; nothing here looks at a variant's flags."""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from tupe_core.t5_relative import relative_position_bucket


def paper_bucket(delta: int) -> int:
    """docs/positional_encodings.md, T5 buckets: keys left/self 0..15, right 16 + same."""
    d = abs(delta)
    if d < 8:
        b = d
    else:
        edges = [(11, 8), (15, 9), (22, 10), (31, 11), (45, 12), (63, 13), (90, 14)]
        b = next((bucket for top, bucket in edges if d <= top), 15)
    return b + (16 if delta > 0 else 0)


def positions(model):
    """The encoding at the attention of a ``tupe_roberta`` model."""
    return model.encoder.sentence_encoder.positions


# --- content-free terms, entry by entry (float64, not differentiable) ------------------------------------------

def untied_term(model, T: int, layer: int = 0, *, untie_cls: bool) -> torch.Tensor:
    """TUPE's recipe, steps 2-4: ``p_i U^Q (p_j U^K)^T / sqrt(2 dh)`` over table rows ``i + 1``, ``j + 1``; with
    ``untie_cls``, row 0 holds theta1 = the [0, 0] entry of the T + 1 rows and column 0 theta2 = their [1, 1]."""
    pos = positions(model)
    H, dh = pos.num_heads, pos.head_dim
    P = F.layer_norm(pos.pos.weight[: T + 1], (pos.pos.weight.size(1),), pos.pos_ln.weight, pos.pos_ln.bias)
    q = (P @ pos.pos_q_linear.weight.T + pos.pos_q_linear.bias).double().detach()
    k = (P @ pos.pos_k_linear.weight.T + pos.pos_k_linear.bias).double().detach()
    scale = 1 / math.sqrt(2 * dh)
    out = torch.zeros(H, T, T, dtype=torch.float64)
    for h in range(H):
        s = slice(h * dh, (h + 1) * dh)
        theta1 = float(q[0, s] @ k[0, s]) * scale
        theta2 = float(q[1, s] @ k[1, s]) * scale
        for i in range(T):
            for j in range(T):
                if untie_cls and i == 0:
                    out[h, i, j] = theta1
                elif untie_cls and j == 0:
                    out[h, i, j] = theta2
                else:
                    out[h, i, j] = float(q[i + 1, s] @ k[j + 1, s]) * scale
    return out


def t5_bias(model, T: int, layer: int = 0, *, cls_buckets: bool) -> torch.Tensor:
    """``b_h[bucket(j - i)]``; with ``cls_buckets`` row 0 reads bucket 16 and column 0 bucket 32."""
    table = positions(model).relative_attention_bias.weight.double().detach()  # (33, H)
    out = torch.zeros(table.size(1), T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(T):
            b = paper_bucket(j - i)
            if cls_buckets and i == 0:
                b = 16
            elif cls_buckets and j == 0:
                b = 32
            out[:, i, j] = table[b]
    return out


def by_distance(weights: torch.Tensor, T: int) -> torch.Tensor:
    """(H, T, T) with ``out[h, i, j] = weights[h, |i - j|]``, by loops (``weights``: (H, >= T))."""
    out = torch.zeros(weights.size(0), T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(T):
            out[:, i, j] = weights[:, abs(i - j)].double()
    return out


# --- the same terms written the obvious way in torch (float64, differentiable) ------------------------------------

def untied_term_obvious(pos, T: int, *, untie_cls: bool) -> torch.Tensor:
    """The whole absolute term by einsum, the [CLS] reset by torch.where."""
    H, dh = pos.num_heads, pos.head_dim
    P = F.layer_norm(pos.pos.weight[: T + 1].double(), (pos.pos.weight.size(1),), pos.pos_ln.weight.double(),
                     pos.pos_ln.bias.double())
    q = (P @ pos.pos_q_linear.weight.double().T + pos.pos_q_linear.bias.double()).view(T + 1, H, dh)
    k = (P @ pos.pos_k_linear.weight.double().T + pos.pos_k_linear.bias.double()).view(T + 1, H, dh)
    full = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(2 * dh)  # (H, T+1, T+1)
    bias = full[:, 1:, 1:]
    if untie_cls:
        cls = cls_row(T)
        bias = torch.where(cls, full[:, 0, 0, None, None], torch.where(cls.T, full[:, 1, 1, None, None], bias))
    return bias


def t5_bias_obvious(pos, T: int, *, cls_buckets: bool) -> torch.Tensor:
    """One bucket lookup per (i, j), the [CLS] buckets by torch.where."""
    idx = torch.arange(T)
    bucket = relative_position_bucket(idx[None, :] - idx[:, None])
    if cls_buckets:
        cls = cls_row(T)
        bucket = torch.where(cls, 16, torch.where(cls.T, 32, bucket))
    return pos.relative_attention_bias.weight.double()[bucket].permute(2, 0, 1)


def cls_row(T: int) -> torch.Tensor:
    cls = torch.zeros(T, T, dtype=torch.bool)
    cls[0, :] = True
    return cls


# --- layer 0's logits ------------------------------------------------------------------------------------------------

def content(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``q_i k_j^T / sqrt(scale dh)`` of one head, (B, T, T)."""
    return q @ k.transpose(-1, -2) / math.sqrt(scale * q.size(-1))


def content_plus(scale: float, positional: Optional[Callable]) -> Callable:
    """The layer-0 logits of a block that adds a content-free bias (or nothing) to the scaled content logits:
    ``layer0_logits(model, attn, term, q, k, h)`` for a reference file."""
    def layer0_logits(model, attn, term, q, k, h):
        logits = content(q, k, scale)
        return logits if positional is None else logits + positional(model, q.size(-2))[h]
    return layer0_logits


def rope_reference(x: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation of (..., T, dh), pairs (m, m + dh/2), angle t * 10000^(-2m/dh), by loops."""
    out = x.clone()
    dh = x.size(-1)
    for t in range(x.size(-2)):
        for m in range(dh // 2):
            a = t * 10000.0 ** (-2.0 * m / dh)
            x1, x2 = x[..., t, m], x[..., t, m + dh // 2]
            out[..., t, m] = x1 * math.cos(a) - x2 * math.sin(a)
            out[..., t, m + dh // 2] = x2 * math.cos(a) + x1 * math.sin(a)
    return out


def deberta_reference(model, attn, q, k, h, T):
    """c2p + p2c of head h for one layer: q_i . K^r[delta(i,j)] + k_j . Q^r[delta(i,j)],
    delta(i,j) = clamp(i - j + k, 0, 2k - 1) (p2c indexed as the official DeBERTa code; the paper's
    Eq. 4 writes delta(j,i): docs/positional_encodings.md); (B, T, T), unscaled."""
    kk = model.positional_variant.options("deberta").max_rel_pos
    rel = positions(model).rel_embeddings.weight.double()  # (2k, d)
    s = slice(h * attn.head_dim, (h + 1) * attn.head_dim)
    k_r = (rel @ attn.pos_key_proj.weight.double().T)[:, s]
    q_r = (rel @ attn.pos_query_proj.weight.double().T + attn.pos_query_proj.bias.double())[:, s]
    out = torch.zeros(q.size(0), T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(T):
            d_ij = min(max(i - j + kk, 0), 2 * kk - 1)
            out[:, i, j] = q[:, i] @ k_r[d_ij] + k[:, j] @ q_r[d_ij]
    return out
