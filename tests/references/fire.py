"""FIRE (Li et al., ICLR 2024), two-sided (docs/positional_encodings.md, "FIRE"): with 0-based positions,
``r = log(|c| |i - j| + 1) / (log(|c| max(L, i) + 1) + 1e-6)``, ``L = |m| L0``, and
``b_h(i, j) = W2[o] . relu(w1 r + b1) + b2[o]`` with ``o = h`` for a key at or left of the query (j <= i), ``o = H + h``
for a key on its right."""
import math

import torch

from references._shared import content_plus, positions
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, None, 1
BEYOND = None  # a function of the (normalised) distance and position: defined at every length
ARCH_ONLY = False  # --fire


def fire_entry(w1, b1, w2, b2, c: float, L: float, i: int, j: int, out: int) -> float:
    """One entry, from the formula: the MLP's output ``out`` at ``r(i, j)``."""
    r = math.log(abs(c) * abs(i - j) + 1) / (math.log(abs(c) * max(L, i) + 1) + 1e-6)
    hidden = [max(0.0, w1[u] * r + b1[u]) for u in range(len(w1))]
    return sum(w2[out][u] * hidden[u] for u in range(len(w1))) + b2[out]


def positional(model, T: int, layer: int = 0):
    pos = positions(model)
    H = pos.num_heads
    w1, b1 = pos.mlp_in_weight.tolist(), pos.mlp_in_bias.tolist()
    w2, b2 = pos.mlp_out_weight.tolist(), pos.mlp_out_bias.tolist()
    c = float(pos.c.detach())
    L = abs(float(pos.threshold_multiplier.detach())) * model.positional_variant.options("fire").fire_threshold
    out = torch.zeros(H, T, T, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(T):
                out[h, i, j] = fire_entry(w1, b1, w2, b2, c, L, i, j, h if j <= i else H + h)
    return out


def differentiable(pos, T: int):
    i = torch.arange(T, dtype=torch.float64)
    c = pos.c.double().abs()
    L = pos.threshold_multiplier.double().abs() * pos.options.fire_threshold
    r = torch.log(c * (i[:, None] - i[None, :]).abs() + 1) / (torch.log(c * torch.maximum(i, L) + 1) + 1e-6)[:, None]
    hidden = torch.relu(r[..., None] * pos.mlp_in_weight.double() + pos.mlp_in_bias.double())  # (T, T, W)
    out = hidden @ pos.mlp_out_weight.double().T + pos.mlp_out_bias.double()  # (T, T, 2H)
    H = pos.num_heads
    left = (i[None, :] <= i[:, None])[..., None]
    return torch.where(left, out[..., :H], out[..., H:]).permute(2, 0, 1)


layer0_logits = content_plus(SCALE, positional)
position_map = positional


def against_source(encoder):
    """The paper's appendix pseudo-code: c starts at 0.1, L at 512 (a learned multiplier 1 times 512), an MLP
    1 -> 32 -> heads drawn by nn.Linear's defaults (here 2 x heads: a set per direction); one module for every
    layer; nothing is added to the words."""
    pos = encoder.positions
    H = pos.num_heads
    assert float(pos.c.detach()) == float(torch.tensor(0.1)) and float(pos.threshold_multiplier.detach()) == 1.0
    assert pos.options.fire_threshold == 512.0 and pos.options.fire_mlp_width == 32
    assert pos.mlp_in_weight.shape == pos.mlp_in_bias.shape == (32,)
    assert pos.mlp_out_weight.shape == (2 * H, 32) and pos.mlp_out_bias.shape == (2 * H,)
    assert float(pos.mlp_in_weight.abs().max()) <= 1 and float(pos.mlp_in_bias.abs().max()) <= 1
    assert float(pos.mlp_out_weight.abs().max()) <= 32 ** -0.5 and float(pos.mlp_out_bias.abs().max()) <= 32 ** -0.5
    assert float(pos.mlp_in_weight.std()) > 0.3  # nn.Linear's U(-1, 1), not fairseq's N(0, 0.02)
    assert sorted(name for name, _ in pos.named_parameters()) == [
        "c", "mlp_in_bias", "mlp_in_weight", "mlp_out_bias", "mlp_out_weight", "threshold_multiplier"]
    assert not any("mlp_in_weight" in name for layer in encoder.layers for name, _ in layer.named_parameters())
    assert encoder.embed_positions is None
