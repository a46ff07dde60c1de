"""The attention blocks of ``tupe_roberta``: self-attention with an additive, batch-shared logit bias
(TUPE, T5, ALiBi, priors), and the two blocks whose positional effect depends on content: rotary q/k
(RoPE) and DeBERTa's disentangled c2p + p2c terms. All of them end in one core, ``attend``, on the path
of ``--tupe-attention`` (``sdpa`` or ``explicit``; ``auto`` picks per forward). Formulas and the paths:
``docs/positional_encodings.md``."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from .positional_term import PositionalTerm


def attention_mask(
    bias: Optional[Tensor], padding_mask: Optional[Tensor], dtype: torch.dtype
) -> Optional[Tensor]:
    """One additive mask for all layers, broadcastable to (B, H, T, T), in the compute ``dtype``.

    Without padding the (H, T, T) bias is only viewed as (1, H, T, T), never copied per batch
    element. With right padding SDPA needs a single mask, so the bias and the (B, T) key-padding
    mask are combined once per forward (not once per layer); padded keys get ``padding_value(dtype)``.
    The layout is fixed here too, once (``sdpa_layout``).
    """
    if padding_mask is None:
        mask = None if bias is None else bias.to(dtype).unsqueeze(0)  # (1, H, T, T)
    else:
        pad = torch.zeros(padding_mask.shape, dtype=dtype, device=padding_mask.device)
        pad = pad.masked_fill(padding_mask, padding_value(dtype))[:, None, None, :]  # (B, 1, 1, T)
        mask = pad if bias is None else bias.to(dtype).unsqueeze(0) + pad  # (B, H, T, T)
    return None if mask is None else sdpa_layout(mask)


def padding_value(dtype: torch.dtype) -> float:
    """The logit added at a padded key: half the lowest finite value of ``dtype``, not -inf. Beside any real
    key its softmax weight is still exactly 0 (exp underflows), but a row whose keys are all padding (a
    sequence without a real token) stays finite, uniform weights, where -inf gives NaN (softmax of an all
    -inf row), and that NaN would reach every other row through the padded positions' values in the next
    layer. Half: a bias or logit added to it later (DeBERTa's per-layer bias) cannot round it to -inf."""
    return torch.finfo(dtype).min / 2


# The device types whose masks get ``align_strides`` (tests add "cpu" to check the layout on CPU).
ALIGNED_DEVICES = {"cuda"}


def sdpa_layout(mask: Tensor) -> Tensor:
    """``mask`` laid out as SDPA reads it without a copy of its own: on CUDA aligned (``align_strides``),
    elsewhere with contiguous rows (the T5 bias is a permuted view, which every layer would otherwise read
    with a stride). The one layout rule for the shared mask and DeBERTa's per-layer bias."""
    if mask.device.type in ALIGNED_DEVICES:
        return align_strides(mask)
    return mask if mask.stride(-1) == 1 else mask.contiguous()


def align_strides(mask: Tensor, multiple: int = 8) -> Tensor:
    """``mask`` with every stride but the last a multiple of ``multiple`` (rows padded, then sliced back).

    CUDA's memory-efficient SDPA kernel pads an unaligned mask itself (PyTorch's ``preprocess_mask``:
    strides a multiple of 8, a rule that is strict under ``torch.compile``), which would copy it in every
    layer, e.g. whenever T is not a multiple of 8 or the bias is a strided view; doing it here copies it
    once per forward. The last dimension keeps its size: only the storage behind each row is longer."""
    if mask.stride(-1) == 1 and all(s % multiple == 0 for s in mask.stride()[:-1]):
        return mask
    T = mask.size(-1)
    extra = -T % multiple
    if not extra:
        return mask.contiguous()
    # a fresh row-major tensor (F.pad would keep a permuted input's layout, e.g. T5's heads-innermost bias)
    return mask.new_zeros(*mask.shape[:-1], T + extra)[..., :T].copy_(mask)


# The paths of ``--tupe-attention``; ``reference`` is accepted as the older name of ``explicit``.
ATTENTION_PATHS = ("auto", "sdpa", "explicit")


def choose_attention_path(device: torch.device, training: bool, dropout: float) -> str:
    """What ``--tupe-attention auto`` takes for one forward: ``explicit`` on CPU in training with attention
    dropout, else ``sdpa``. SDPA's fused CPU kernel has no dropout, so there SDPA runs its unfused math path:
    the same ops plus a check for fully masked rows in its softmax (``bench/bench_train_step.py --attention
    auto sdpa explicit`` compares them). On CUDA SDPA's fused kernels also give the bias its gradient."""
    return "explicit" if device.type == "cpu" and training and dropout > 0 else "sdpa"


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scaling: float, dropout: FairseqDropout,
    path: str,
) -> Tuple[Tensor, Optional[Tensor]]:
    """``dropout(softmax(q k^T * scaling + mask)) v``, the one attention core of every block.

    q, k, v: (B, H, T, dh); mask: additive, broadcastable to (B, H, T, T) (positional bias and padding),
    in q's dtype, or None; ``dropout``: the block's ``FairseqDropout`` (its ``p`` and whether it applies).
    ``path="sdpa"``: ``F.scaled_dot_product_attention`` (fused kernels where the device has them), returns
    (out, None). ``path="explicit"``: the plain ops, returns (out, the (B, H, T, T) probabilities before
    dropout); under fp16/bf16 the softmax runs in float32 and its result goes back to the compute dtype.
    """
    if path == "sdpa":
        p = dropout.p if dropout.training or dropout.apply_during_inference else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=scaling), None
    if path != "explicit":
        raise ValueError(f"attention path must be 'sdpa' or 'explicit', got {path!r}")
    logits = torch.matmul(q * scaling, k.transpose(-1, -2))  # (B, H, T, T)
    if mask is not None:
        logits += mask  # in place (one (B, H, T, T) tensor fewer): matmul's backward does not read its output
    half = logits.dtype in (torch.float16, torch.bfloat16)
    weights = torch.softmax(logits, dim=-1, dtype=torch.float32 if half else None)
    if half:
        weights = weights.to(logits.dtype)
    return torch.matmul(dropout(weights), v), weights  # (B, H, T, dh)


class BiasedSelfAttention(nn.Module):
    """Multi-head self-attention: ``softmax(q k^T * (scale_factor * dh)^-0.5 + mask) v``.

    Parameter names follow fairseq's ``MultiheadAttention`` (q_proj, k_proj, v_proj, out_proj).
    ``scale_factor`` is 1 for BERT, 2 for TUPE (the paper's 1/sqrt(2d) per head), 4 for BERT-Ad,
    3 for DeBERTa. Subclasses change only ``positional_qk`` (how positions enter q, k and the mask).
    ``impl`` (``--tupe-attention``) picks the path of ``attend``: ``sdpa``, ``explicit`` (also
    ``reference``: it returns the weights), or ``auto`` (``choose_attention_path``, per forward).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        scale_factor: float = 1.0,
        impl: str = "auto",
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if impl not in ATTENTION_PATHS + ("reference",):
            raise ValueError(f"--tupe-attention must be one of {ATTENTION_PATHS}, got {impl!r}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = (self.head_dim * scale_factor) ** -0.5
        self.impl = impl
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.q_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.k_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.v_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.out_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)

    def _heads(self, x: Tensor) -> Tensor:
        T, B, _ = x.shape
        return x.view(T, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)  # (B, H, T, dh)

    def attention_path(self, x: Tensor, need_weights: bool = False) -> str:
        """The path of this forward: ``explicit`` when the weights are asked for, else ``impl``'s,
        ``auto`` decided from x's device, training mode and the attention dropout."""
        if need_weights or self.impl in ("explicit", "reference"):
            return "explicit"
        if self.impl == "sdpa":
            return "sdpa"
        return choose_attention_path(x.device, self.training, self.dropout_module.p)

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor],
        positions: PositionalTerm,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (T, B, C); mask: additive, broadcastable to (B, H, T, T) (positional bias and padding);
        positions: this forward's ``PositionalTerm``; key_padding_mask: (B, T) True at padding, or
        None (already in ``mask``; for blocks that need it alone). Returns (T, B, C) and, on the
        explicit path (always with ``need_weights``), the (B, H, T, T) attention probabilities."""
        T, B, C = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        q, k, mask = self.positional_qk(q, k, mask, positions)
        if mask is not None and mask.dtype != q.dtype:
            mask = sdpa_layout(mask.to(q.dtype))  # a mask not built by TupeTransformerEncoder (it casts once)
        out, weights = attend(q, k, v, mask, self.scaling, self.dropout_module, self.attention_path(q, need_weights))
        out = out.permute(2, 0, 1, 3).reshape(T, B, C)
        return self.out_proj(out), weights

    def positional_qk(
        self, q: Tensor, k: Tensor, mask: Optional[Tensor], positions: PositionalTerm
    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """q, k: (B, H, T, dh). BERT-Ad adds the (H, T, dh) position q/k; others pass through."""
        if positions.query is not None:
            q, k = q + positions.query.unsqueeze(0), k + positions.key.unsqueeze(0)
        return q, k, mask


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on (..., T, dh): dims ``m`` and ``m + dh/2`` form the pair rotated by angle ``t * theta_m``
    (the GPT-NeoX layout of RoFormer's pairs ``(2m, 2m+1)``; the learned q/k projections absorb the
    fixed permutation between the two)."""
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class RotarySelfAttention(BiasedSelfAttention):
    """RoPE (Su et al., RoFormer): q and k of every layer rotated by their token's position, base
    10000, before the usual ``(dh)^-0.5`` scaled dot product (a rotation keeps norms, so the scale
    of the logits is BERT's)."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {self.head_dim} (embed_dim / heads)")

    def positional_qk(self, q, k, mask, positions):
        cos, sin = positions.rotary  # (T, dh) each
        return rotate(q, cos, sin), rotate(k, cos, sin), mask


class TakeColumns(torch.autograd.Function):
    """``x[..., at]`` for a 1-D index ``at`` shared by all leading dims. Its backward keeps only the index and
    the width: ``torch.gather`` keeps its whole input for backward (for DeBERTa two (H, B, T, R) score tensors
    per layer: 287 MiB, 12% of RoBERTa's peak, at base size, T=128, 1024 tokens per step). Forward is a gather
    with the index broadcast (on CPU 5x faster than ``index_select`` on the last dim of a 3-D tensor),
    backward its ``scatter_add``."""

    @staticmethod
    def forward(ctx, x: Tensor, at: Tensor) -> Tensor:
        index = at.view((1,) * (x.dim() - 1) + (-1,)).expand(*x.shape[:-1], -1)  # a view: no copy per row
        ctx.save_for_backward(index)
        ctx.width = x.size(-1)
        return torch.gather(x, -1, index)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(*grad.shape[:-1], ctx.width).scatter_add_(-1, index, grad), None


class DisentangledSelfAttention(BiasedSelfAttention):
    """DeBERTa's attention (He et al. 2021): content-to-content, content-to-position
    ``Q^c_i . K^r_{delta(i,j)}`` and position-to-content ``K^c_j . Q^r_{delta(i,j)}``, all scaled by
    ``(3 dh)^-0.5``, with ``delta(i,j) = clamp(i - j + k, 0, 2k - 1)``. p2c indexes by ``delta(i,j)`` as the
    official code does (the paper's Eq. 4 writes ``delta(j,i)``; docs/positional_encodings.md). The
    relative embeddings are shared by all layers (``TupePositions``); the projections ``K^r = P W_{k,r}``
    (no bias) and ``Q^r = P W_{q,r}`` (with bias, as the official code) belong to each layer."""

    def __init__(self, embed_dim: int, num_heads: int, q_noise: float = 0.0, qn_block_size: int = 8, **kwargs):
        super().__init__(embed_dim, num_heads, q_noise=q_noise, qn_block_size=qn_block_size, **kwargs)
        self.pos_key_proj = quant_noise(nn.Linear(embed_dim, embed_dim, bias=False), q_noise, qn_block_size)
        self.pos_query_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)

    def positional_qk(self, q, k, mask, positions):
        rel, index = positions.rel_embeddings, positions.rel_index  # (R, d), (T, T)
        R, H, dh = rel.size(0), self.num_heads, self.head_dim
        B, _, T, _ = q.shape
        # the scale goes on the (H, dh, R) projections, not on a (B, H, T, T) sum
        k_r = (self.pos_key_proj(rel) * self.scaling).view(R, H, dh).permute(1, 2, 0).to(q.dtype)  # (H, dh, R)
        q_r = (self.pos_query_proj(rel) * self.scaling).view(R, H, dh).permute(1, 2, 0).to(q.dtype)

        def scores(x: Tensor, r: Tensor) -> Tensor:
            """(B, H, T, dh) x (H, dh, R) -> (H, B, T R): one (B T, dh) @ (dh, R) product per head. The
            projections are shared by the batch; a broadcasting matmul would copy them B times (and keep
            the copy for backward)."""
            return torch.bmm(x.transpose(0, 1).reshape(H, B * T, dh), r).view(H, B, T * R)

        # One column selection per term straight into the [i, j] layout, from the (T, R) scores flattened:
        # c2p[i, j] = (q k_r)[i, d(i,j)] at i R + d(i,j); p2c[i, j] = (k q_r)[j, d(i,j)] at j R + d(i,j)
        rows = torch.arange(T, device=index.device) * R
        bias = TakeColumns.apply(scores(q, k_r), (index + rows[:, None]).view(-1))
        bias += TakeColumns.apply(scores(k, q_r), (index + rows[None, :]).view(-1))  # backward does not read it
        bias = bias.view(H, B, T, T).transpose(0, 1)  # (B, H, T, T), a view
        return q, k, sdpa_layout(bias if mask is None else bias.add_(mask))  # as the shared mask is laid out
