"""The positional math of every variant against plain loop references written from the formulas of
docs/positional_encodings.md, one file per variant in tests/references/ (TUPE's recipe, T5 buckets, L&S priors,
ALiBi, RoPE, DeBERTa, ...): the tests here loop over the variants whose reference declares what they check."""
import pytest
import torch

from model_utils import build, tokens
from references import having, layer0_reference_weights, reference
from references._shared import paper_bucket
from tupe_core.masks import attention_mask
from tupe_core.registry import VARIANTS
from tupe_plugin.models import VariantMismatchError
from tupe_core.t5_relative import relative_position_bucket
from tupe_core.t5_relative import relative_buckets

ALL = list(VARIANTS)


@pytest.mark.parametrize("delta", [0, 1, 7, 8, 11, 12, 15, 16, 22, 23, 31, 32, 45, 46, 63, 64, 90, 91, 127, 128, 300])
def test_bucket_ids_match_paper_table(delta):
    for d in (delta, -delta):
        got = int(relative_position_bucket(torch.tensor(d)))
        assert got == paper_bucket(d), (d, got)


def test_bucket_16_unused_and_cls_buckets():
    bkt = relative_buckets(VARIANTS["tupe_r"].options("tupe"), 64)
    assert (bkt[0, :] == 16).all() and (bkt[1:, 0] == 32).all()
    assert not (bkt[1:, 1:] == 16).any() and not (bkt[1:, 1:] == 32).any()
    plain = relative_buckets(VARIANTS["bert_r"].options("t5_relative"), 64)
    assert plain[0, 0] == 0 and plain[3, 0] == paper_bucket(-3) and plain[0, 5] == paper_bucket(5)
    # the model reads one bucket per distance, not a (P, P) table
    positions = build("tupe_r_tiny", max_positions=64).encoder.sentence_encoder.positions
    assert not hasattr(positions, "rp_bucket") and positions.rp_bucket_by_distance.shape == (127,)


@pytest.mark.parametrize("variant", having("positional"))
def test_positional_term_equals_reference(variant):
    """The (H, T, T) bias of every layer, with every parameter of the encoding moved off its init (so that each
    layer, head and distance differs), against the loops of the variant's reference."""
    model = build(f"{variant}_tiny", max_positions=48)
    positions, T = model.encoder.sentence_encoder.positions, 40
    with torch.no_grad():
        for p in positions.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        bias = positions(T).bias
    layers = bias if bias.dim() == 4 else bias.unsqueeze(0)
    assert layers.shape[1:] == (4, T, T)
    for layer in range(layers.size(0)):
        want = reference(variant).positional(model, T, layer)
        torch.testing.assert_close(layers[layer].double(), want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("variant", having("differentiable"))
def test_positional_term_gradient_equals_obvious_reference(variant):
    """The bias gives the gradients of the obvious torch form in its reference (``differentiable``): the Toeplitz
    relative bias, the in-place [CLS] reset, KERPLE's softplus, ..."""
    model = build(f"{variant}_tiny", max_positions=48)
    pos, T = model.encoder.sentence_encoder.positions, 40
    upstream = torch.randn(pos.num_heads, T, T, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    params = [p for p in pos.parameters() if p.requires_grad]
    got = torch.autograd.grad((pos(T).bias.double() * upstream).sum(), params, allow_unused=True)
    want = torch.autograd.grad((reference(variant).differentiable(pos, T) * upstream).sum(), params,
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
    assert term.bias is None and term.payload.query.shape == (4, 8, 16) and term.payload.key.shape == (4, 8, 16)


@pytest.mark.parametrize("variant", having("layer0_logits"))
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
    torch.testing.assert_close(weights.double(), layer0_reference_weights(model, variant, x_tokens), atol=1e-5, rtol=1e-4)


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
