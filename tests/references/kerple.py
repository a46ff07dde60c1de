"""KERPLE's log kernel (Chi et al., NeurIPS 2022), bidirectional: ``-r1_h log(1 + r2_h |j - i|)``, each r the
softplus of a free parameter (docs/positional_encodings.md, "KERPLE")."""
import math

import torch

from references._shared import content_plus, positions
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, None, 1
BEYOND = None  # a function of the distance with two scalars per head: defined at every distance
ARCH_ONLY = True  # registered without flags of its own (encoding=Kerple)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def positional(model, T: int, layer: int = 0):
    pos = positions(model)
    out = torch.zeros(pos.num_heads, T, T, dtype=torch.float64)
    for h in range(pos.num_heads):
        r1, r2 = softplus(float(pos.r1_free.detach()[h])), softplus(float(pos.r2_free.detach()[h]))
        for i in range(T):
            for j in range(T):
                out[h, i, j] = -r1 * math.log(1 + r2 * abs(j - i))
    return out


def differentiable(pos, T: int):
    idx = torch.arange(T, dtype=torch.float64)
    distance = (idx[None, :] - idx[:, None]).abs()
    r1 = torch.nn.functional.softplus(pos.r1_free.double())[:, None, None]
    r2 = torch.nn.functional.softplus(pos.r2_free.double())[:, None, None]
    return -r1 * torch.log(1 + r2 * distance)


layer0_logits = content_plus(SCALE, positional)
position_map = positional


def against_source(encoder):
    """chijames/KERPLE 73f1ee2 ``megatron/mpu/layers.py`` (``ParallelKerpleLog``): r1 (its ``bias_p``) drawn per head
    from 2 U(0, 1), r2 (``bias_a``) from U(0, 1), none below its eps 0.01; those two are all it learns, one pair for
    every layer; nothing is added to the words."""
    pos = encoder.positions
    H = pos.num_heads
    r1 = torch.nn.functional.softplus(pos.r1_free.detach().double())
    r2 = torch.nn.functional.softplus(pos.r2_free.detach().double())
    assert r1.shape == r2.shape == (H,)
    assert 0.01 - 1e-6 <= float(r1.min()) and float(r1.max()) <= 2 and 0.01 - 1e-6 <= float(r2.min()) <= 1
    assert float(r2.max()) <= 1 and len(set(r1.tolist())) == H and len(set(r2.tolist())) == H  # a draw per head
    assert sorted(name for name, _ in pos.named_parameters()) == ["r1_free", "r2_free"]
    assert not any("r1_free" in name for layer in encoder.layers for name, _ in layer.named_parameters())
    assert encoder.embed_positions is None
