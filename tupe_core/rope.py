"""RoPE (Su et al., RoFormer): q and k of every layer rotated by their token's position, base 10000, before the
usual ``(dh)^-0.5`` scaled dot product (a rotation keeps norms, so the scale of the logits is BERT's).

Its options stretch the rotation to inputs ``s`` times longer than the trained length T (``--rope-scaling``,
``--rope-scaling-factor s``); pair m (of dh/2) turns by ``t * theta_m`` at position t, ``theta_m = 10000^(-2m/dh)``:

* ``none``: as above (the numbers of RoPE before these options, exactly).
* ``linear``, position interpolation (Chen, Wong, Chen & Tian 2023, "Extending Context Window of Large Language
  Models via Positional Interpolation"): positions divided by s, ``theta_m / s``.
* ``ntk``, NTK-aware scaling (bloc97, 2023, as YaRN's section 3.1 writes it): the base raised to
  ``b' = 10000 * s^(dh / (dh - 2))``, so the slowest pair is interpolated by s and the fastest kept.
* ``yarn`` (Peng, Quesnelle, Fan & Shippole 2023, "YaRN: Efficient Context Window Extension of Large Language
  Models", Eq. 17-20): per pair, ``r_m = T / lambda_m`` turns of its wavelength ``lambda_m = 2 pi / theta_m`` fit in
  the trained length, ``gamma = 0`` below ``alpha = 1``, 1 above ``beta = 32``, linear between, and
  ``theta'_m = (1 - gamma) theta_m / s + gamma theta_m`` (slow pairs interpolated, fast ones kept); and the logits
  divided by t with ``sqrt(1/t) = 0.1 ln(s) + 1``, here by multiplying cos and sin (so q and k) by ``sqrt(1/t)``.
  The ramp needs T itself: ``--rope-scaling-length`` (the trained length). The paper's formula is continuous in
  ``r``; its code (and transformers') rounds the ramp's ends to whole pairs, which moves a pair or two.

The study's longer inputs set these at evaluation (``tupe_study/longer_inputs.py``: ``s`` = the length / T); a model
trained with them records them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor

from .attend import fused_kernels
from .attention import SelfAttention
from .facts import ROPE_SCALINGS
from .options import option
from .base import AS_IS, ATTENTION_BLOCK, ROTATION, ContentDependentPositions, PositionalEncoding, PositionalTerm, PositionMap, check_length


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on (..., T, dh): dims ``m`` and ``m + dh/2`` form the pair rotated by angle ``t * theta_m``
    (the GPT-NeoX layout of RoFormer's pairs ``(2m, 2m+1)``; the learned q/k projections absorb the
    fixed permutation between the two)."""
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Rotation(NamedTuple):
    """RoPE's payload: the cos and sin of every token's angles, (T, dh) each, shared by all layers."""

    cos: Tensor
    sin: Tensor


class RotarySelfAttention(SelfAttention):
    """``SelfAttention`` with q and k rotated by ``positions.payload`` (``Rotation``) before the dot product: on CUDA by our Triton
    kernel (``kernels/rotary.py``), elsewhere by ``rotate``."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {self.head_dim} (embed_dim / heads)")

    def positional_qk(self, q, k, mask, positions):
        cos, sin = positions.payload  # Rotation: (T, dh) each
        kernel = fused_kernels("rotary") if q.is_cuda else None
        if kernel is not None and kernel.available(q.device):  # one read and one write per tensor, each way
            return (*kernel.rotate_qk(q, k, cos, sin), mask)
        return rotate(q, cos, sin), rotate(k, cos, sin), mask


BASE = 10000.0
SCALINGS = ROPE_SCALINGS
YARN_ALPHA, YARN_BETA = 1.0, 32.0  # YaRN's ramp ends, in turns per trained length (its values for LLaMA)


@dataclass(frozen=True)
class RopeOptions:
    rope_scaling: str = option("none", "RoPE scaling to longer inputs: none, linear (position interpolation), ntk "
                                       "(NTK-aware base), yarn (YaRN's ramp and temperature)", choices=SCALINGS)
    rope_scaling_factor: float = option(1.0, "RoPE scaling: s, how many times the trained length the input may be")
    rope_scaling_length: int = option(0, "RoPE scaling: the trained length T that YaRN's ramp reads (yarn only)")


def rotation_frequencies(options: RopeOptions, head_dim: int) -> Tensor:
    """(dh/2,) float64: the angle per position of each pair, ``theta_m`` as ``options`` scale it."""
    dh, s = head_dim, options.rope_scaling_factor
    if options.rope_scaling == "ntk":
        return (BASE * s ** (dh / (dh - 2))) ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    inv_freq = BASE ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (dh/2,) theta_m
    if options.rope_scaling == "linear":
        return inv_freq / s
    if options.rope_scaling == "yarn":
        turns = options.rope_scaling_length * inv_freq / (2 * math.pi)  # r_m = T / lambda_m
        gamma = ((turns - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)).clamp(0, 1)
        return (1 - gamma) * inv_freq / s + gamma * inv_freq
    return inv_freq


def logit_temperature(options: RopeOptions) -> float:
    """``sqrt(1/t)``, the factor on q and k (so 1/t on the logits): YaRN's ``0.1 ln(s) + 1``, else 1."""
    return 0.1 * math.log(options.rope_scaling_factor) + 1 if options.rope_scaling == "yarn" else 1.0


class Rope(PositionalEncoding):
    """``--attention-block rope``: the (cos, sin) tables, (T, dh) each, shared by all layers."""

    enters = ROTATION
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning
    block = RotarySelfAttention
    name = "rope"
    flags = (ATTENTION_BLOCK,)
    selected_by = {"attention_block": "rope"}
    Options = RopeOptions

    @classmethod
    def validate(cls, options: RopeOptions) -> None:
        super().validate(options)
        if options.rope_scaling == "none":
            if options.rope_scaling_factor != 1.0 or options.rope_scaling_length != 0:
                raise ValueError("--rope-scaling-factor and --rope-scaling-length are read with --rope-scaling "
                                 "linear, ntk or yarn only: leave them at 1 and 0, or choose a scaling")
            return
        if not options.rope_scaling_factor >= 1.0:
            raise ValueError(f"--rope-scaling-factor must be at least 1 (how many times the trained length), got "
                             f"{options.rope_scaling_factor}")
        if (options.rope_scaling == "yarn") != (options.rope_scaling_length > 0):
            raise ValueError("--rope-scaling-length (the trained length T) is read by --rope-scaling yarn only, "
                             f"which needs it: got {options.rope_scaling_length} with {options.rope_scaling}")

    def fixed_tables(self) -> Dict[str, Tensor]:
        inv_freq = rotation_frequencies(self.options, self.head_dim)  # (dh/2,)
        angle = torch.arange(self.max_positions).double()[:, None] * inv_freq  # (P, dh/2)
        angle = torch.cat([angle, angle], dim=-1)  # (P, dh): dims m and m + dh/2 share angle m
        if self.options.rope_scaling != "yarn":
            return {"rope_cos": angle.cos().float(), "rope_sin": angle.sin().float()}
        temperature = logit_temperature(self.options)  # YaRN's sqrt(1/t) on q and k: 1/t on their dot product
        return {"rope_cos": (angle.cos() * temperature).float(), "rope_sin": (angle.sin() * temperature).float()}

    def rescale(self, options: RopeOptions) -> None:
        """Take ``options`` (another scaling) and recompute the tables: a trained model evaluated on longer inputs
        (tupe_study/longer_inputs.py). Its parameters do not change; its record keeps the options it was trained with."""
        self.validate(options)
        self.options = options
        for name, table in self.fixed_tables().items():
            getattr(self, name).copy_(table)

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        return PositionalTerm(None, Rotation(self.rope_cos[:seq_len], self.rope_sin[:seq_len]))

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        raise ContentDependentPositions("RoPE rotates the content q and k by position, so its positional effect "
                                        "depends on content")
