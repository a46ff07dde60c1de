"""``flex_biased_attention``: attention with an additive positional bias through PyTorch's FlexAttention
(``torch.nn.attention.flex_attention``), the bias a ``score_mod`` and the key padding a block mask:

    out = softmax(q k^T * scale + bias, over the real keys) v

The bias arrives dense, computed once per forward by the caller ((H, T, T) shared by the batch, any strides, or
(B, H, T, T) per sequence); ``score_mod`` only reads it (``score + bias[h, q_idx, kv_idx]``: one load per score,
never a bucket-table gather inside the kernel). Key padding is ``mask_mod`` of a block mask built from the
(B, T) mask, so FlexAttention skips the key blocks that are all padding.

Padded keys: a row with real keys equals the explicit path's (its padded keys weigh exactly 0 on both). A row
whose keys are all padding gives zeros (FlexAttention computes no block of it; its gradients are zero too),
where the explicit path gives the mean of v: finite either way, and padded rows feed no real one.

No attention dropout (FlexAttention has none): ``dropout_p > 0`` raises. On CUDA the whole call (block mask and
attention) runs ``torch.compile``d, the bias and the mask its inputs (no recompilation per forward); elsewhere
eagerly, where FlexAttention materialises the (B, H, T, T) scores and has no backward for q, k, v on CPU
(torch 2.13; the bias still gets its gradient).

Plain torch (no fairseq import).
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], key_padding_mask: Optional[Tensor],
            scale: float) -> Tensor:
    """FlexAttention with ``bias`` as the score_mod and ``key_padding_mask`` as the block mask. Both closures
    are made here, inside what ``torch.compile`` traces, so the bias and the mask are graph inputs: a new
    tensor each forward does not recompile."""
    B, H, T, _ = q.shape
    score_mod = None
    if bias is not None and bias.dim() == 3:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score + bias[h, q_idx, kv_idx]
    elif bias is not None:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score + bias[b, h, q_idx, kv_idx]
    block_mask = None
    if key_padding_mask is not None:
        def real_key(b, h, q_idx, kv_idx):
            return ~key_padding_mask[b, kv_idx]
        block_mask = create_block_mask(real_key, B, None, T, T, device=q.device)  # heads share it
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


_COMPILED = {}


def _compiled_attend():
    """``_attend`` compiled once per process (shapes may vary: torch.compile's automatic dynamic shapes)."""
    if "attend" not in _COMPILED:
        _COMPILED["attend"] = torch.compile(_attend, fullgraph=True)
    return _COMPILED["attend"]


def flex_biased_attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], key_padding_mask: Optional[Tensor], scale: float,
    dropout_p: float, *, compiled: Optional[bool] = None,
) -> Tensor:
    """``softmax(q k^T * scale + bias) v`` over the real keys, by FlexAttention; differentiable in q, k, v, bias.

    q, k, v: (B, H, T, D), one dtype; bias: (H, T, T) shared (any strides) or (B, H, T, T) per sequence, or None;
    key_padding_mask: (B, T) bool, True at padding, or None. A row without a real key gives zeros (module
    docstring). ``dropout_p`` must be 0. ``compiled``: torch.compile the call (default: on CUDA only).
    Returns (B, H, T, D) in q's dtype.
    """
    if dropout_p > 0:
        raise ValueError(f"FlexAttention has no attention dropout (dropout_p={dropout_p}): use --tupe-attention "
                         "triton (or sdpa / explicit) for training with attention dropout, or set it to 0")
    B, H, T, _ = q.shape
    if bias is not None and tuple(bias.shape) not in ((H, T, T), (B, H, T, T)):
        raise ValueError(f"bias must be (H, T, T) = {(H, T, T)} or (B, H, T, T) = {(B, H, T, T)}, got {tuple(bias.shape)}")
    if key_padding_mask is not None and (key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (B, T)):
        raise ValueError(f"key_padding_mask must be (B, T) = {(B, T)} bool, got {tuple(key_padding_mask.shape)} "
                         f"{key_padding_mask.dtype}")
    if compiled is None:
        compiled = q.device.type == "cuda"
    if compiled:
        return _compiled_attend()(q, k, v, bias, key_padding_mask, scale)
    with warnings.catch_warnings():  # eager on purpose (tests, CPU): not the "use torch.compile" advice
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return _attend(q, k, v, bias, key_padding_mask, scale)
