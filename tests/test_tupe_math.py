"""The positional math of every variant against plain loop references written here from the formulas of
docs/positional_encodings.md (TUPE's recipe, T5 buckets, L&S priors, ALiBi, RoPE, DeBERTa)."""
import math

import pytest
import torch
import torch.nn.functional as F

from model_utils import build, tokens
from tupe_plugin.positional.masks import attention_mask
from tupe_plugin.models import VARIANTS, VariantMismatchError
from tupe_plugin.positional.t5_relative import relative_position_bucket
from tupe_plugin.positional.t5_relative import relative_buckets

ALL = list(VARIANTS)
# variants whose layer-0 logits the loop reference below knows (PAM blocks have theirs in test_pam.py)
FORMULA = [name for name, v in VARIANTS.items() if v.attention_block in ("standard", "rope", "deberta")]


def paper_bucket(delta: int) -> int:
    """docs/positional_encodings.md, T5 buckets: keys left/self 0..15, right 16 + same."""
    d = abs(delta)
    if d < 8:
        b = d
    else:
        edges = [(11, 8), (15, 9), (22, 10), (31, 11), (45, 12), (63, 13), (90, 14)]
        b = next((bucket for top, bucket in edges if d <= top), 15)
    return b + (16 if delta > 0 else 0)


def reference_positional(model, T: int, layer: int = 0) -> torch.Tensor:
    """(H, T, T) content-free logits of ``layer``, entry by entry, as the recipe's steps 2-4
    describe (docs/positional_encodings.md; also the L&S distance priors and ALiBi)."""
    pos = model.encoder.sentence_encoder.positions
    v = model.positional_variant
    H, dh = pos.num_heads, pos.head_dim
    out = torch.zeros(H, T, T, dtype=torch.float64)
    if v.untied_pos:
        P = F.layer_norm(pos.pos.weight[: T + 1], (pos.pos.weight.size(1),), pos.pos_ln.weight, pos.pos_ln.bias)
        q = (P @ pos.pos_q_linear.weight.T + pos.pos_q_linear.bias).double()
        k = (P @ pos.pos_k_linear.weight.T + pos.pos_k_linear.bias).double()
        scale = 1 / math.sqrt(2 * dh)
        for h in range(H):
            s = slice(h * dh, (h + 1) * dh)
            theta1 = float(q[0, s] @ k[0, s]) * scale
            theta2 = float(q[1, s] @ k[1, s]) * scale
            for i in range(T):
                for j in range(T):
                    if v.untie_cls and i == 0:
                        out[h, i, j] = theta1
                    elif v.untie_cls and j == 0:
                        out[h, i, j] = theta2
                    else:
                        out[h, i, j] = float(q[i + 1, s] @ k[j + 1, s]) * scale
    if v.rel_pos:
        table = pos.relative_attention_bias.weight.double()  # (33, H)
        for i in range(T):
            for j in range(T):
                b = paper_bucket(j - i)
                if v.untie_cls and i == 0:
                    b = 16
                elif v.untie_cls and j == 0:
                    b = 32
                out[:, i, j] += table[b]
    if v.distance_prior == "gaussian":
        for i in range(T):  # normalised over all max_positions keys (padding-independent)
            row = [math.exp(-0.5 * (j - i) ** 2) for j in range(pos.max_positions)]
            for j in range(T):
                out[:, i, j] += row[j] / sum(row)
    elif v.distance_prior == "learned_gaussian":
        table = pos.distance_bias.double()  # (L, H, max_positions)
        for i in range(T):
            for j in range(T):
                out[:, i, j] += table[layer, :, abs(i - j)]
    if v.alibi:
        for h in range(H):  # power-of-2 head count: m_h = 2^(-8 h / H), h = 1..H
            for i in range(T):
                for j in range(T):
                    out[h, i, j] += -(2.0 ** (-8.0 * (h + 1) / H)) * abs(j - i)
    return out


def rope_reference(x: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation of (..., T, dh), pairs (m, m + dh/2), angle t * 10000^(-2m/dh), by loops."""
    out = x.clone()
    dh = x.size(-1)
    for t in range(x.size(-2)):
        for m in range(dh // 2):
            a = t * 10000.0 ** (-2.0 * m / dh)
            x1, x2 = x[..., t, m], x[..., t, m + dh // 2]
            out[..., t, m] = x1 * math.cos(a) - x2 * math.sin(a)
            out[..., t, m + dh // 2] = x2 * math.cos(a) + x1 * math.sin(a)
    return out


def deberta_reference(model, attn, q, k, h, T):
    """c2p + p2c of head h for one layer: q_i . K^r[delta(i,j)] + k_j . Q^r[delta(i,j)],
    delta(i,j) = clamp(i - j + k, 0, 2k - 1) (p2c indexed as the official DeBERTa code; the paper's
    Eq. 4 writes delta(j,i): docs/positional_encodings.md); (B, T, T), unscaled."""
    kk = model.positional_variant.max_rel_pos
    rel = model.encoder.sentence_encoder.positions.rel_embeddings.weight.double()  # (2k, d)
    s = slice(h * attn.head_dim, (h + 1) * attn.head_dim)
    k_r = (rel @ attn.pos_key_proj.weight.double().T)[:, s]
    q_r = (rel @ attn.pos_query_proj.weight.double().T + attn.pos_query_proj.bias.double())[:, s]
    out = torch.zeros(q.size(0), T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(T):
            d_ij = min(max(i - j + kk, 0), 2 * kk - 1)
            out[:, i, j] = q[:, i] @ k_r[d_ij] + k[:, j] @ q_r[d_ij]
    return out


@pytest.mark.parametrize("delta", [0, 1, 7, 8, 11, 12, 15, 16, 22, 23, 31, 32, 45, 46, 63, 64, 90, 91, 127, 128, 300])
def test_bucket_ids_match_paper_table(delta):
    for d in (delta, -delta):
        got = int(relative_position_bucket(torch.tensor(d)))
        assert got == paper_bucket(d), (d, got)


def test_bucket_16_unused_and_cls_buckets():
    bkt = relative_buckets(VARIANTS["tupe_r"], 64)
    assert (bkt[0, :] == 16).all() and (bkt[1:, 0] == 32).all()
    assert not (bkt[1:, 1:] == 16).any() and not (bkt[1:, 1:] == 32).any()
    plain = relative_buckets(VARIANTS["bert_r"], 64)
    assert plain[0, 0] == 0 and plain[3, 0] == paper_bucket(-3) and plain[0, 5] == paper_bucket(5)
    # the model reads one bucket per distance, not a (P, P) table
    positions = build("tupe_r_tiny", max_positions=64).encoder.sentence_encoder.positions
    assert not hasattr(positions, "rp_bucket") and positions.rp_bucket_by_distance.shape == (127,)


@pytest.mark.parametrize("variant", ["tupe_a", "tupe_r", "tupe_a_tie_cls", "bert_r"])
def test_positional_term_equals_reference(variant):
    model = build(f"{variant}_tiny", max_positions=48)
    T = 40
    with torch.no_grad():
        got = model.encoder.sentence_encoder.positions(T).bias
        want = reference_positional(model, T)
    assert got.shape == (4, T, T)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def obvious_positional(pos, v, T: int) -> torch.Tensor:
    """(H, T, T) in float64, differentiable, written the obvious way: the whole absolute term, one
    bucket lookup per (i, j), the [CLS] reset by torch.where."""
    H, dh = pos.num_heads, pos.head_dim
    bias = torch.zeros(H, T, T, dtype=torch.float64)
    cls = torch.zeros(T, T, dtype=torch.bool)
    cls[0, :] = True
    if v.untied_pos:
        P = F.layer_norm(pos.pos.weight[: T + 1].double(), (pos.pos.weight.size(1),), pos.pos_ln.weight.double(),
                         pos.pos_ln.bias.double())
        q = (P @ pos.pos_q_linear.weight.double().T + pos.pos_q_linear.bias.double()).view(T + 1, H, dh)
        k = (P @ pos.pos_k_linear.weight.double().T + pos.pos_k_linear.bias.double()).view(T + 1, H, dh)
        full = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(2 * dh)  # (H, T+1, T+1)
        bias = full[:, 1:, 1:]
        if v.untie_cls:
            bias = torch.where(cls, full[:, 0, 0, None, None], torch.where(cls.T, full[:, 1, 1, None, None], bias))
    if v.rel_pos:
        idx = torch.arange(T)
        bucket = relative_position_bucket(idx[None, :] - idx[:, None])
        if v.untie_cls:
            bucket = torch.where(cls, 16, torch.where(cls.T, 32, bucket))
        bias = bias + pos.relative_attention_bias.weight.double()[bucket].permute(2, 0, 1)
    return bias


@pytest.mark.parametrize("variant", ["tupe_a", "tupe_r", "bert_r", "t5_rel"])
def test_positional_term_gradient_equals_obvious_reference(variant):
    """The Toeplitz relative bias and the in-place [CLS] reset give the gradients of the obvious form."""
    model = build(f"{variant}_tiny", max_positions=48)
    pos, T = model.encoder.sentence_encoder.positions, 40
    upstream = torch.randn(pos.num_heads, T, T, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    params = [p for p in pos.parameters() if p.requires_grad]
    got = torch.autograd.grad((pos(T).bias.double() * upstream).sum(), params, allow_unused=True)
    want = torch.autograd.grad((obvious_positional(pos, model.positional_variant, T) * upstream).sum(), params,
                               allow_unused=True)
    assert any(g is not None for g in want)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g.double(), w.double(), atol=1e-5, rtol=1e-5)


def test_theta_placement():
    """theta1 fills row 0 incl. [0,0]; theta2 fills column 0 below; the rest is positional."""
    model = build("tupe_a_tiny")
    pos = model.encoder.sentence_encoder.positions
    with torch.no_grad():
        A = pos(10).bias
    for h in range(A.size(0)):
        assert torch.all(A[h, 0, :] == A[h, 0, 0])
        assert torch.all(A[h, 1:, 0] == A[h, 1, 0])
        assert A[h, 0, 0] != A[h, 1, 0]
        assert A[h, 1, 1] != A[h, 1, 0]  # token 1 uses table row 2, not row 1 (theta2's)


def test_bert_a_has_no_positional_term_and_bert_ad_returns_qk():
    m = build("bert_a_tiny")
    assert m.encoder.sentence_encoder.positions(8).bias is None
    assert m.encoder.sentence_encoder.embed_positions is not None
    for name in ["tupe_a_tiny", "tupe_r_tiny", "bert_ad_tiny", "tupe_a_tie_cls_tiny"]:
        assert build(name).encoder.sentence_encoder.embed_positions is None  # no input PE
    ad = build("bert_ad_tiny")
    term = ad.encoder.sentence_encoder.positions(8)
    assert term.bias is None and term.query.shape == (4, 8, 16) and term.key.shape == (4, 8, 16)


def layer0_reference_weights(model, x_tokens):
    """softmax over keys of layer 0's logits for every head, with plain loops over heads."""
    enc = model.encoder.sentence_encoder
    attn = enc.layers[0].self_attn
    v = model.positional_variant
    with torch.no_grad():
        x, _ = enc.forward_embedding(x_tokens)  # (B, T, C)
        T = x.size(1)
        H, dh = attn.num_heads, attn.head_dim
        q = attn.q_proj(x).double()
        k = attn.k_proj(x).double()
        term = enc.positions(T)
        deberta = v.attention_block == "deberta"
        factor = 4 if v.pos_mixed_terms else 2 if v.untied_pos else 3 if deberta else 1
        out = torch.zeros(x.size(0), H, T, T, dtype=torch.float64)
        for h in range(H):
            s = slice(h * dh, (h + 1) * dh)
            qh, kh = q[..., s], k[..., s]
            if v.pos_mixed_terms:
                qh, kh = qh + term.query[h].double(), kh + term.key[h].double()
            if v.attention_block == "rope":
                qh, kh = rope_reference(qh), rope_reference(kh)
            logits = qh @ kh.transpose(-1, -2) / math.sqrt(factor * dh)
            if deberta:
                logits = logits + deberta_reference(model, attn, qh, kh, h, T) / math.sqrt(factor * dh)
            if not v.pos_mixed_terms and (v.untied_pos or v.rel_pos or v.distance_prior != "none" or v.alibi):
                logits = logits + reference_positional(model, T)[h]
            out[:, h] = torch.softmax(logits, dim=-1)
    return out


@pytest.mark.parametrize("variant", FORMULA)
def test_layer0_attention_equals_formula(variant):
    model = build(f"{variant}_tiny", tupe_attention="explicit")
    x_tokens = tokens(2, 12)
    enc = model.encoder.sentence_encoder
    with torch.no_grad():
        x, _ = enc.forward_embedding(x_tokens)
        term = enc.positions(12)
        bias = term.bias if term.bias is None or term.bias.dim() == 3 else term.bias[0]  # layer 0
        _, weights = enc.layers[0].self_attn(x.transpose(0, 1), attention_mask(bias, None, x.dtype), term,
                                             need_weights=True)
    torch.testing.assert_close(weights.double(), layer0_reference_weights(model, x_tokens), atol=1e-5, rtol=1e-4)


def test_positional_term_computed_once_and_shared_by_layers():
    model = build("tupe_r_tiny", encoder_layers=3)
    enc = model.encoder.sentence_encoder
    calls, masks = [], []
    enc.positions.register_forward_hook(lambda m, i, o: calls.append(o))
    for layer in enc.layers:
        layer.register_forward_pre_hook(lambda m, args: masks.append(args[1]))
    with torch.no_grad():
        model(tokens(2, 9))
    assert len(calls) == 1 and len(masks) == 3
    assert all(m is masks[0] for m in masks)
    assert masks[0].bias is calls[0].bias and masks[0].key_padding is None  # the one term, for every layer
    additive = masks[0].additive  # what sdpa and explicit read
    assert additive.shape == (1, 4, 9, 9)  # (1, H, T, T): not expanded per batch element
    assert additive.data_ptr() == calls[0].bias.data_ptr()  # a view of the one term, no copy


@pytest.mark.parametrize("variant", ALL)
def test_sdpa_equals_reference_path(variant):
    sdpa = build(f"{variant}_tiny", seed=3, tupe_attention="sdpa")
    ref = build(f"{variant}_tiny", seed=3, tupe_attention="explicit")
    ref.load_state_dict(sdpa.state_dict())
    x = tokens(3, 20, seed=1)
    x[1, 15:] = 1  # right padding
    with torch.no_grad():
        a, _ = sdpa(x, features_only=True)
        b, _ = ref(x, features_only=True)
    keep = x.ne(1)
    assert (a[keep] - b[keep]).abs().max() <= 1e-5


@pytest.mark.parametrize("variant", ALL)
def test_output_independent_of_batch_and_right_padding(variant):
    model = build(f"{variant}_tiny", seed=5)
    short = tokens(1, 7, seed=2)
    batch = tokens(3, 16, seed=4)
    batch[1, :7] = short[0]
    batch[1, 7:] = 1  # pad
    with torch.no_grad():
        alone, _ = model(short)
        together, _ = model(batch)
    assert (together[1, :7] - alone[0]).abs().max() <= 1e-5


def test_overlong_sequence_is_a_clear_error():
    model = build("tupe_r_tiny", max_positions=16)
    with pytest.raises(ValueError, match="longer than the model's 16 positions"):
        model(tokens(1, 17))


def test_parameter_overhead_matches_paper_t2():
    """TUPE-R base adds U^Q/U^K (+biases), pos LayerNorm, a 513-row table, 33x12 relative
    scalars, and drops BERT's input PE (514 rows incl. fairseq's padding offset)."""
    tupe = sum(p.numel() for p in build("tupe_r_base", max_positions=512).parameters())
    bert = sum(p.numel() for p in build("bert_a_base", max_positions=512).parameters())
    d = 768
    expected = 2 * (d * d + d) + 2 * d + 513 * d + 33 * 12 - 514 * d
    assert tupe - bert == expected


@pytest.mark.parametrize(
    "saved,loaded,flag",
    [("tupe_r", "tupe_a", "--rel-pos"), ("tupe_a", "tupe_a_tie_cls", "--untie-cls"), ("tupe_a_tie_cls", "bert_ad", "--no-pos-mixed-terms")],
)
def test_variant_mismatch_is_refused_with_the_flag_to_set(saved, loaded, flag):
    src = build(f"{saved}_tiny")
    dst = build(f"{loaded}_tiny")
    with pytest.raises(VariantMismatchError) as err:
        dst.load_state_dict(src.state_dict(), strict=False)
    assert f"'{saved}'" in str(err.value) and flag in str(err.value) and f"{saved}_base" in str(err.value)


def test_same_variant_loads():
    src, dst = build("tupe_r_tiny", seed=1), build("tupe_r_tiny", seed=2)
    dst.load_state_dict(src.state_dict())
    x = tokens(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(src(x)[0], dst(x)[0])


@pytest.mark.parametrize("variant", ["gaussian_prior", "learned_gaussian"])
def test_distance_prior_equals_reference(variant):
    model = build(f"{variant}_tiny", max_positions=48)
    positions = model.encoder.sentence_encoder.positions
    with torch.no_grad():
        if variant == "learned_gaussian":
            positions.distance_bias.normal_()  # every layer/head/distance differs from the others
        bias = positions(30).bias
    layers = bias if bias.dim() == 4 else bias.unsqueeze(0)
    for layer in range(layers.size(0)):
        torch.testing.assert_close(layers[layer].double(), reference_positional(model, 30, layer), atol=1e-6, rtol=1e-6)


def test_learned_gaussian_init_and_one_table_per_layer():
    """attenuated_l.py: exp(-0.5 d^2) / sum_{d<512} exp(-0.5 d^2) = .570, .346, .077, .006 for d=0..3."""
    model = build("learned_gaussian_base", max_positions=512)
    table = model.encoder.sentence_encoder.positions.distance_bias  # (L, H, 512)
    assert table.shape == (12, 12, 512)
    torch.testing.assert_close(table[3, 5, :4], torch.tensor([0.5704, 0.3460, 0.0772, 0.0063]), atol=1e-4, rtol=0)
    tiny = build("learned_gaussian_tiny", seed=1)
    with torch.no_grad():
        tiny.encoder.sentence_encoder.positions.distance_bias[1] += 1.0  # layer 1 differs from layer 0
    masks = []
    for layer in tiny.encoder.sentence_encoder.layers:
        layer.register_forward_pre_hook(lambda m, args: masks.append(args[1].additive))
    with torch.no_grad():
        tiny(tokens(1, 6))
    assert masks[0].shape == (1, 4, 6, 6) and torch.allclose(masks[1] - masks[0], torch.ones(1, 4, 6, 6))
