"""The mask of a forward: the positional bias and the key padding, apart for the fused kernels, and as one
additive tensor in the compute dtype and the layout SDPA reads without a copy of its own. The encoder (and the
exported model) builds it once per forward and every layer shares it.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention computes in: autocast's where it is on for x's device (``--amp``), else x's
    (``--fp16``/``--bf16`` convert the model, so the embeddings are already half)."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class AttentionMask:
    """What a layer adds to its logits: the positional ``bias`` ((H, T, T) shared by the batch, (B, H, T, T) per
    sequence, or None) and the ``key_padding`` ((B, T) bool, True at padding, or None), kept apart, as the fused
    kernels read them (``attend``: triton, flex). The one additive tensor that SDPA and the explicit path read is
    built from them when a layer first asks (``additive``) and kept: the encoder hands every layer the same object,
    so it is built once per forward, and never on a path that does not need it."""

    def __init__(self, bias: Optional[Tensor], key_padding: Optional[Tensor], dtype: torch.dtype, owned: bool = False):
        self.bias, self.key_padding, self.dtype = bias, key_padding, dtype
        self.owned = owned  # the bias is this mask's own (B, H, T, T): the padding may be added into it in place
        self._additive: Optional[Tensor] = None
        self._kernel_bias: Optional[Tensor] = None

    def kernel_bias(self, layout: Callable[[Tensor], Tensor]) -> Optional[Tensor]:
        """The bias in a fused kernel's layout (``layout``: ``triton_attention.kernel_layout``), made when a layer
        first asks and kept, as ``additive``: a bias that needs a copy is copied once per forward, not per layer."""
        if self._kernel_bias is None and self.bias is not None:
            self._kernel_bias = layout(self.bias)
        return self._kernel_bias

    @property
    def learned_bias(self) -> bool:
        """Whether the bias needs a gradient (what sends SDPA on CUDA to its slow kernel)."""
        return self.bias is not None and self.bias.requires_grad

    @property
    def additive(self) -> Optional[Tensor]:
        """The bias and the padding as one additive mask, broadcastable to (B, H, T, T), in ``dtype``.

        Without padding an (H, T, T) bias is only viewed as (1, H, T, T), never copied per batch element. With
        right padding SDPA needs a single mask, so the bias and the (B, T) key-padding mask are added once;
        padded keys get ``padding_value(dtype)``. The layout is fixed here too, once (``sdpa_layout``)."""
        if self._additive is None and (self.bias is not None or self.key_padding is not None):
            bias = None if self.bias is None else self.bias.to(self.dtype)
            if bias is not None and bias.dim() == 3:
                bias = bias.unsqueeze(0)  # (1, H, T, T)
            if self.key_padding is not None:
                pad = torch.zeros(self.key_padding.shape, dtype=self.dtype, device=self.key_padding.device)
                pad = pad.masked_fill(self.key_padding, padding_value(self.dtype))[:, None, None, :]  # (B, 1, 1, T)
                if bias is None:
                    bias = pad
                elif self.owned and bias.dtype == self.bias.dtype and bias.dim() == 4:
                    bias = bias.add_(pad)  # in place: one (B, H, T, T) tensor fewer (add's backward reads neither)
                else:
                    bias = bias + pad  # (B, H, T, T)
            self._additive = sdpa_layout(bias)
        return self._additive

def attention_mask(bias: Optional[Tensor], padding_mask: Optional[Tensor], dtype: torch.dtype) -> AttentionMask:
    """The mask of one forward for every layer (or one layer index): ``bias`` (H, T, T) or None, ``padding_mask``
    (B, T) True at padding or None, ``dtype`` the compute dtype of the additive tensor."""
    return AttentionMask(bias, padding_mask, dtype)


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
