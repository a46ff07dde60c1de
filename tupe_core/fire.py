"""FIRE (Li, Xu, Beltagy, Lu, Ontañón, Yang, Chen, Ginsburg, Sun, Zaheer, Jiang, Hong, Gupta, Guo & Chi, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", ICLR 2024), in a two-sided form for a
bidirectional (MLM) encoder.

The paper's bias (causal: key j at or left of query i, 0-based positions) is a learned function of the distance,
normalised by the query's position:

    b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),    psi(x) = log(c x + 1)

``f_theta`` a small MLP (1 -> 32 hidden, ReLU -> one output per head), ``c > 0`` and the threshold ``L`` learned.
Dividing by ``psi(i)`` maps every query's distances into [0, 1] whatever the length ("progressive
interpolation"); the threshold ``L`` keeps short positions from being stretched (a query before ``L`` divides by
``psi(L)``) and keeps the divisor away from ``psi(0) = log 1 = 0``. One ``f_theta``, ``c`` and ``L`` serve every
layer, as in the paper, which shares the encoding across layers.

The paper's ``i - j`` is never negative (causal attention). An encoder's query also sees keys on its right, so here:

    r(i, j) = psi(|i - j|) / psi(max(L, i))
    b_h(i, j) = f_theta(r)[h]        for j <= i  (the paper's FIRE, entry for entry)
    b_h(i, j) = f_theta(r)[H + h]    for j >  i  (keys on the right: H more outputs of the same hidden layer)

so the MLP is 1 -> hidden -> 2H and both directions share its hidden features (as T5 gives each direction its own
buckets, the bias can tell left from right; the sign of ``i - j`` as a second input would do the same with a
function of the direction that is forced to be a shift of one curve). The divisor stays the query's position
``psi(max(L, i))``, as in the paper, not the longest distance in the row (``max(i, T - 1 - i)``): that would make a
token's bias depend on the padded length of its batch. The cost: on the right of an early query ``r`` can exceed 1
once ``T > L`` (the MLP then reads inputs beyond those it saw where ``T <= L``).

Parameters and start, following the paper's appendix pseudo-code (PyTorch): ``c`` starts at 0.1; ``L = |m| L0``
with a learned multiplier ``m`` starting at 1 and ``L0 = --fire-threshold`` (512, the paper's); the divisor gets
``+ 1e-6`` (the paper's eps); ``|c|`` is used where ``c`` appears. The MLP's weights are drawn as ``nn.Linear`` draws
them (uniform in +-1/sqrt(fan_in), weights and biases): not fairseq's N(0, 0.02) with zero biases, under which the
hidden units with a negative weight would never fire (their input ``r`` is never negative) and stay dead. So they
are plain parameters, which fairseq's ``init_bert_params`` does not touch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import BIAS, POSITIONS, PositionalEncoding, PositionalTerm, at_positions, check_length
from .options import Flag, option

INITIAL_C = 0.1  # the paper's start of c
EPS = 1e-6  # the paper's guard on the divisor psi(max(L, i))


@dataclass(frozen=True)
class FireOptions:
    fire_mlp_width: int = option(32, "FIRE: hidden units of the MLP f_theta (the paper's 32)")
    fire_threshold: float = option(512.0, "FIRE: the threshold L of the divisor psi(max(L, i)) at the start (it is "
                                          "learned, as |m| times this; the paper's 512)")


class Fire(PositionalEncoding):
    """``--fire``: an (H, T, T) bias, shared by the batch and the layers, from one small MLP of the normalised
    log-distance."""

    enters = BIAS
    left_padding = POSITIONS  # the divisor reads the query's position i, not only j - i
    name = "fire"
    Options = FireOptions
    flags = (Flag("fire", False, "FIRE: add f_theta(psi(|i-j|) / psi(max(L, i))) to the logits, a learned MLP of "
                                 "the normalised log-distance, one output per head and direction"),)
    selected_by = {"fire": True}

    @classmethod
    def validate(cls, options: FireOptions) -> None:
        super().validate(options)
        if not options.fire_mlp_width >= 1:
            raise ValueError(f"--fire-mlp-width must be at least 1, got {options.fire_mlp_width}")
        if not options.fire_threshold > 0:
            raise ValueError(f"--fire-threshold must be positive (the divisor psi(max(L, i)) is log 1 = 0 at i = 0 "
                             f"without it), got {options.fire_threshold}")

    def __init__(self, options: FireOptions, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        W, H = options.fire_mlp_width, num_heads
        # f_theta: 1 -> W (ReLU) -> 2H, drawn as nn.Linear draws its weight and bias: U(-1/sqrt(fan_in), +)
        self.mlp_in_weight = nn.Parameter(torch.empty(W).uniform_(-1.0, 1.0))  # (W,), fan_in 1
        self.mlp_in_bias = nn.Parameter(torch.empty(W).uniform_(-1.0, 1.0))  # (W,)
        bound = 1 / math.sqrt(W)
        self.mlp_out_weight = nn.Parameter(torch.empty(2 * H, W).uniform_(-bound, bound))  # (2H, W): left, then right
        self.mlp_out_bias = nn.Parameter(torch.empty(2 * H).uniform_(-bound, bound))  # (2H,)
        start = self.initial_values()
        self.c = nn.Parameter(start["c"])  # () psi's scale, used as |c|
        self.threshold_multiplier = nn.Parameter(start["threshold_multiplier"])  # () m of L = |m| L0

    def initial_values(self) -> Dict[str, Tensor]:
        return {"c": torch.tensor(INITIAL_C), "threshold_multiplier": torch.tensor(1.0)}

    def normalised_distance(self, seq_len: int) -> Tensor:
        """(T, T) ``r(i, j) = psi(|i - j|) / psi(max(L, i))``, in fp32 whatever the parameters' dtype."""
        i = torch.arange(seq_len, device=self.c.device, dtype=torch.float32)  # 0-based positions
        c = self.c.float().abs()
        threshold = self.threshold_multiplier.float().abs() * self.options.fire_threshold  # L
        divisor = torch.log(c * torch.maximum(i, threshold) + 1) + EPS  # (T,) psi(max(L, i)), one per query
        return torch.log(c * (i[:, None] - i[None, :]).abs() + 1) / divisor[:, None]  # (T, T)

    def forward(self, seq_len: int, position_ids: Optional[Tensor] = None) -> PositionalTerm:
        """(H, T, T), shared by the batch; with ``position_ids`` (a left-padded batch) (B, H, T, T), each sequence's
        bias at its tokens' positions (``at_positions``)."""
        check_length(seq_len, self.max_positions)
        T, H = seq_len, self.num_heads
        r = self.normalised_distance(T).to(self.mlp_in_weight.dtype)  # (T, T)
        hidden = F.relu(r[..., None] * self.mlp_in_weight + self.mlp_in_bias)  # (T, T, W)
        out = F.linear(hidden, self.mlp_out_weight, self.mlp_out_bias)  # (T, T, 2H)
        idx = torch.arange(T, device=r.device)
        left = (idx[None, :] <= idx[:, None])[..., None]  # (T, T, 1): key j at or left of query i
        bias = torch.where(left, out[..., :H], out[..., H:]).permute(2, 0, 1)  # (H, T, T)
        return PositionalTerm(bias if position_ids is None else at_positions(bias, position_ids))
