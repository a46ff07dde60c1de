"""The position-position maps read from a checkpoint (tupe_tools.analysis.checkpoint_maps), against a plain
per-head reference written here."""
import torch

from model_utils import build
from tupe_tools.analysis.checkpoint_maps import content_free_map


def test_bert_ad_checkpoint_map_is_the_scaled_position_position_term():
    """(LN(p_i) U^Q + b)(LN(p_j) U^K + b)^T / sqrt(4 d_head) per head, token i on table row i + 1."""
    model, T = build("bert_ad_tiny"), 10
    sd = model.state_dict()
    args = model.args
    info = {"encoder_embed_dim": args.encoder_embed_dim, "encoder_attention_heads": args.encoder_attention_heads,
            "max_positions": args.max_positions, "encoder_layers": args.encoder_layers}
    found = content_free_map(sd, info, T)
    assert not found.weights
    got = found.values.double().numpy()
    pos = model.encoder.sentence_encoder.positions
    d, H = args.encoder_embed_dim, args.encoder_attention_heads
    dh = d // H
    with torch.no_grad():
        p = torch.nn.functional.layer_norm(pos.pos.weight[1: T + 1], (d,), pos.pos_ln.weight, pos.pos_ln.bias).double()
        q = p @ pos.pos_q_linear.weight.double().t() + pos.pos_q_linear.bias.double()
        k = p @ pos.pos_k_linear.weight.double().t() + pos.pos_k_linear.bias.double()
    for h in range(H):
        want = q[:, h * dh:(h + 1) * dh] @ k[:, h * dh:(h + 1) * dh].t() / (4 * dh) ** 0.5
        torch.testing.assert_close(torch.from_numpy(got[h]), want, rtol=1e-5, atol=1e-6)
