"""The additive mask of a forward: the positional bias and the key padding in one tensor, in the compute dtype
and the layout SDPA reads without a copy of its own. The encoder (and the exported model) builds it once per
forward and every layer shares it.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention computes in: autocast's where it is on for x's device (``--amp``), else x's
    (``--fp16``/``--bf16`` convert the model, so the embeddings are already half)."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


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
