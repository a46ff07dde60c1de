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


def _layer_one_logits(model, T):
    """What layer 1's attention computes for position alone: its q.k^T at its own scale, the word embeddings
    zeroed (hooks on its projections), plus the content-free bias of an encoding in the attention."""
    enc = model.encoder.sentence_encoder
    attn, seen = enc.layers[0].self_attn, {}
    with torch.no_grad():
        enc.embed_tokens.weight.zero_()
        hooks = [attn.q_proj.register_forward_hook(lambda m, i, o: seen.__setitem__("q", o)),
                 attn.k_proj.register_forward_hook(lambda m, i, o: seen.__setitem__("k", o))]
        model(torch.tensor([[0] + [5] * (T - 1)]), features_only=True)
        for hook in hooks:
            hook.remove()
        H = model.args.encoder_attention_heads
        q, k = (seen[n][:, 0].view(T, H, -1).transpose(0, 1) for n in "qk")
        found = enc.positions(T)
        bias = None if found is None else found.bias
        return q @ k.transpose(1, 2) * attn.scaling + (0 if bias is None else bias)


def test_an_input_encodings_map_is_layer_ones_position_term_pre_ln_and_at_its_layers_scale():
    """BERT-A with Pre-LN (layer 1 normalizes its input first: the map left that LayerNorm out) and an input PE
    beside an untied TUPE term (the layers' scale is 1/sqrt(2 d_head): the map used 1/sqrt(d_head), sqrt(2) too
    large) give the map of what layer 1 computes."""
    for model, pre_ln in ((build("bert_a_tiny", encoder_normalize_before=True), True),
                          (build("tupe_roberta_tiny", input_pe=True, untied_pos=True, untie_cls=True, rel_pos=False),
                           False)):
        T, args = 10, model.args
        ln = model.encoder.sentence_encoder.layers[0].self_attn_layer_norm
        with torch.no_grad():  # a trained LayerNorm, not the identity it starts as
            g = torch.Generator().manual_seed(1)
            ln.weight.copy_(torch.rand(ln.weight.shape, generator=g) * 2)
            ln.bias.copy_(torch.randn(ln.bias.shape, generator=g) * 0.5)
        info = {"encoder_embed_dim": args.encoder_embed_dim, "encoder_attention_heads": args.encoder_attention_heads,
                "max_positions": args.max_positions, "encoder_layers": args.encoder_layers,
                "encoder_normalize_before": pre_ln}
        got = content_free_map(model.state_dict(), info, T).values
        torch.testing.assert_close(got, _layer_one_logits(model, T), rtol=1e-5, atol=1e-6)
