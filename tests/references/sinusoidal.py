"""Vaswani's sin/cos table added to the words; plain content logits. Its map: layer 1's position-position term."""
import torch

from references._shared import content_plus
from tupe_core.base import NONE

ENTERS, INPUT, SCALE = NONE, "Sinusoidal", 1
BEYOND = None  # a fixed function of the position
ARCH_ONLY = False

positional = None
layer0_logits = content_plus(SCALE, positional)


def position_map(model, T: int):
    """Layer 1's position-position term of the sin/cos rows, after the embedding LayerNorm."""
    enc = model.encoder.sentence_encoder
    p = enc.layernorm_embedding(enc.embed_positions.rows(T)).double().detach()
    attn = enc.layers[0].self_attn
    q = (p @ attn.q_proj.weight.double().T + attn.q_proj.bias.double()).detach()
    k = (p @ attn.k_proj.weight.double().T + attn.k_proj.bias.double()).detach()
    H, dh = attn.num_heads, attn.head_dim
    want = torch.zeros(H, T, T, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(T):
                want[h, i, j] = float(q[i, dh * h:dh * (h + 1)] @ k[j, dh * h:dh * (h + 1)]) / dh ** 0.5
    return want
