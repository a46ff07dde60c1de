"""The one attention core of every block, ``attend``: ``dropout(softmax(q k^T * scaling + mask)) v`` on the
attention path that ``--tupe-attention`` sets: ``sdpa`` (``F.scaled_dot_product_attention``), ``explicit`` (the
plain ops; returns the weights), or ``auto`` (``choose_attention_path``, per forward). The paths and their
cost: ``docs/positional_encodings.md``.

The fairseq layer swaps fairseq's ``FairseqDropout`` in for ``Dropout`` (``modules/encoder.py``: ``fairseq_block``).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Module):
    """Dropout with ``FairseqDropout``'s interface (``p``, ``apply_during_inference``), in plain torch."""

    def __init__(self, p: float):
        super().__init__()
        self.p, self.apply_during_inference = p, False

    def forward(self, x: Tensor) -> Tensor:
        if self.p > 0 and (self.training or self.apply_during_inference):
            return F.dropout(x, p=self.p, training=True)
        return x


# The attention paths, the values of ``--tupe-attention``
ATTENTION_PATHS = ("auto", "sdpa", "explicit")
OLD_PATH_NAMES = {"reference": "explicit"}  # older args (checkpoints, scripts) still load


def check_attention_path(attention_path: str) -> str:
    """``attention_path`` if it is one of ``ATTENTION_PATHS`` (an older name becomes its new one), else an
    error naming ``--tupe-attention``."""
    attention_path = OLD_PATH_NAMES.get(attention_path, attention_path)
    if attention_path not in ATTENTION_PATHS:
        raise ValueError(f"--tupe-attention must be one of {ATTENTION_PATHS}, got {attention_path!r}")
    return attention_path


def choose_attention_path(device: torch.device, training: bool, dropout: float) -> str:
    """What ``--tupe-attention auto`` takes for one forward: ``explicit`` on CPU in training with attention
    dropout, else ``sdpa``. SDPA's fused CPU kernel has no dropout, so there SDPA runs its unfused math path:
    the same ops plus a check for fully masked rows in its softmax (``bench/bench_train_step.py --attention
    auto sdpa explicit`` compares them). On CUDA SDPA's fused kernels also give the bias its gradient."""
    return "explicit" if device.type == "cpu" and training and dropout > 0 else "sdpa"


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scaling: float, dropout: nn.Module,
    attention_path: str,
) -> Tuple[Tensor, Optional[Tensor]]:
    """``dropout(softmax(q k^T * scaling + mask)) v``, the one attention core of every block.

    q, k, v: (B, H, T, dh); mask: additive, broadcastable to (B, H, T, T) (positional bias and padding),
    in q's dtype, or None; ``dropout``: the block's ``Dropout`` or ``FairseqDropout`` (its ``p`` and whether
    it applies).
    ``attention_path="sdpa"``: ``F.scaled_dot_product_attention`` (fused kernels where the device has them),
    returns (out, None). ``"explicit"``: the plain ops, returns (out, the (B, H, T, T) probabilities before
    dropout); under fp16/bf16 the softmax runs in float32 and its result goes back to the compute dtype.
    """
    if attention_path == "sdpa":
        p = dropout.p if dropout.training or dropout.apply_during_inference else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=scaling), None
    if attention_path != "explicit":
        raise ValueError(f"attention path must be 'sdpa' or 'explicit', got {attention_path!r}")
    logits = torch.matmul(q * scaling, k.transpose(-1, -2))  # (B, H, T, T)
    if mask is not None:
        logits += mask  # in place (one (B, H, T, T) tensor fewer): matmul's backward does not read its output
    half = logits.dtype in (torch.float16, torch.bfloat16)
    weights = torch.softmax(logits, dim=-1, dtype=torch.float32 if half else None)
    if half:
        weights = weights.to(logits.dtype)
    return torch.matmul(dropout(weights), v), weights  # (B, H, T, dh)
