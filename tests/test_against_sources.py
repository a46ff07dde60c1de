"""Every positional variant against the source it names: the facts of the table "Against the sources" in
docs/positional_encodings.md about our code (initialisation, logit scale, where the signal enters, the
position:content ratio at initialisation, fixed constants), checked on models built as training builds them
(``build_model``, then fairseq's ``init_bert_params``), at BERT-base geometry (d = 768, 12 heads, 512 positions).

The expected values are written here from the sources (file and line in the docs' table): the official TUPE
code (guolinke/TUPE 4c64ff7), the Locality & Symmetry code (tigerchen52/locality_symmetry 45bd6e3), DeBERTa v1
(microsoft/DeBERTa ae38d6f), ALiBi's get_slopes and its authors' encoder form, RoFormer's rotation, T5's
buckets, Vaswani's sinusoids, BERT's initializer_range."""
from __future__ import annotations

import functools
import math

import pytest
import torch

from model_utils import build, tokens
from references import having, names, reference
from tupe_core import registry
from tupe_core.base import INPUT
from tupe_core.registry import VARIANTS

D, H, DH, P = 768, 12, 64, 512  # BERT-base width and heads, 512 positions
INIT_STD = 0.02  # BERT's initializer_range; fairseq's init_bert_params; TUPE's, DeBERTa's
CONTENT_STD = {s: D * INIT_STD**2 / math.sqrt(s) for s in (1, 2, 3, 4)}  # q.k (s dh)^-0.5 at init: 0.307 for s=1


@functools.lru_cache(maxsize=None)
def model(variant: str):
    """``variant`` at d = 768, 12 heads, 512 positions, 2 layers (a small FFN: nothing here reads it)."""
    return build(f"{variant}_tiny", max_positions=P, seed=11, encoder_embed_dim=D, encoder_attention_heads=H,
                 encoder_layers=2, encoder_ffn_embed_dim=32)


def encoder(variant: str):
    return model(variant).encoder.sentence_encoder


def std(t: torch.Tensor) -> float:
    return float(t.detach().double().std())


def layer0_content(variant: str, T: int = 128):
    """Layer 1's content logits ``q_i k_j^T (s dh)^-0.5`` on the embedded input, and its q (B, H, T, dh)."""
    enc = encoder(variant)
    attn = enc.layers[0].self_attn
    with torch.no_grad():
        x, _ = enc.forward_embedding(tokens(2, T))
        x = x.transpose(0, 1)
        q, k = attn._heads(attn.q_proj(x)), attn._heads(attn.k_proj(x))
        return q @ k.transpose(-1, -2) * attn.scaling, q


# --- where the signal enters, and the logit scale of every block ------------------------------------------------

def test_every_registered_variant_has_a_reference_file():
    """What the tests below expect of a variant lives in its reference file, tests/references/<name>.py."""
    assert sorted(names()) == sorted(VARIANTS), "add tests/references/<name>.py for a new variant (docs/extending.md)"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_where_each_signal_enters_and_the_scale_of_its_logits(variant):
    """As its reference declares: the encoding at the attention enters as ENTERS, the one at the input is INPUT (a
    class name, or None), and every layer's content logits are scaled by (SCALE dh)^-0.5."""
    ref = reference(variant)
    input_cls, attention_cls = registry.encodings(VARIANTS[variant])
    assert attention_cls.enters == ref.ENTERS
    assert (input_cls.__name__ if input_cls else None) == ref.INPUT
    if input_cls is not None:
        assert input_cls.enters == INPUT
    assert attention_cls.scale_for(registry.options_of(VARIANTS[variant], attention_cls)) == ref.SCALE
    for layer in model(variant).encoder.sentence_encoder.layers:  # every layer's block, at the source's scale
        assert layer.self_attn.scaling == pytest.approx((ref.SCALE * DH) ** -0.5)


@pytest.mark.parametrize("variant", having("against_source"))
def test_initialisation_as_the_source_has_it(variant):
    """The initialisation facts a reference file states about its encoding (``against_source``), at BERT-base
    geometry, on the model as training builds it."""
    reference(variant).against_source(encoder(variant))


def test_words_as_roberta_and_tupe_build_them():
    """N(0, 0.02) words, not multiplied by sqrt(d) (RoBERTa's no_scale_embedding), LayerNorm'd before layer 1
    (RoBERTa; TUPE's --embedding-normalize), Post-LN layers (TUPE's and BERT's default)."""
    enc = encoder("tupe_r")
    assert enc.embed_scale == 1.0 and enc.layernorm_embedding is not None
    assert all(not layer.normalize_before for layer in enc.layers)
    assert std(enc.embed_tokens.weight[4:]) == pytest.approx(INIT_STD, rel=0.05)


# --- BERT-A / BERT-R's input part ----------------------------------------------------------------------------------

def test_bert_a_positions_are_initialised_as_its_words():
    """BERT (modeling.py): word and position tables both from initializer_range 0.02, so positions:words = 1:1."""
    enc = encoder("bert_a")
    table, words = enc.embed_positions.weight.detach(), enc.embed_tokens.weight[4:].detach()
    assert table.shape == (P + 1 + 1, D)  # fairseq's learned positions: P rows after the padding row
    assert float(table[1].detach().abs().max()) == 0.0  # the pad row
    assert std(table[2:]) == pytest.approx(INIT_STD, rel=0.03)
    ratio = float(table[2:].pow(2).mean().sqrt() / words.pow(2).mean().sqrt())
    assert ratio == pytest.approx(1.0, rel=0.1)


def test_sinusoidal_stands_to_the_words_as_in_vaswani():
    """Vaswani: words RMS 1 (N(0, 1/d) times sqrt(d)), the table RMS 1/sqrt(2): 0.71 : 1."""
    enc = encoder("sinusoidal")
    words = enc.embed_tokens.weight[4:].detach()
    ratio = float(enc.embed_positions.table.pow(2).mean().sqrt() / words.pow(2).mean().sqrt())
    assert ratio == pytest.approx(2**-0.5, rel=0.1)


# --- TUPE (official code) ------------------------------------------------------------------------------------------

def test_tupe_modules_and_inits_are_the_official_codes():
    """transformer_sentence_encoder.py: pos = Embedding(max_seq_len + 1, d), pos_q/k_linear = Linear(d, d) with
    bias, pos_ln; relative_attention_bias = Embedding(rel_pos_bins + 1, H); pos_scaling = (d/H * 2)^-0.5;
    models/bert/model.py applies init_bert_params to all of it (N(0, 0.02), biases 0)."""
    pos = encoder("tupe_r").positions
    assert pos.pos.weight.shape == (P + 1, D)
    assert std(pos.pos.weight) == pytest.approx(INIT_STD, rel=0.03)
    for linear in (pos.pos_q_linear, pos.pos_k_linear):
        assert linear.weight.shape == (D, D) and std(linear.weight) == pytest.approx(INIT_STD, rel=0.03)
        assert linear.bias is not None and float(linear.bias.detach().abs().max()) == 0.0
    ln = pos.pos_ln
    assert torch.equal(ln.weight.detach(), torch.ones(D)) and torch.equal(ln.bias.detach(), torch.zeros(D))
    assert pos.relative_attention_bias.weight.shape == (32 + 1, H)
    assert std(pos.relative_attention_bias.weight) == pytest.approx(INIT_STD, rel=0.2)  # 396 draws
    assert pos.scaling == pytest.approx((DH * 2) ** -0.5)


def test_tupe_positional_term_and_content_stand_1_to_1_at_initialisation():
    """Both are LN'd vectors through N(0, 0.02) projections at the same (2 dh)^-0.5: std d 0.02^2 / sqrt(2)."""
    content, _ = layer0_content("tupe_a")
    with torch.no_grad():
        term = encoder("tupe_a").positions(128).bias[:, 1:, 1:]  # without the [CLS] row and column
    assert std(content) == pytest.approx(CONTENT_STD[2], rel=0.1)
    assert std(term) / std(content) == pytest.approx(1.0, rel=0.1)


def test_bert_ad_position_terms_stand_1_to_1_with_the_word_terms():
    content, _ = layer0_content("bert_ad")
    with torch.no_grad():
        term = encoder("bert_ad").positions(128).payload
        pp = term.query @ term.key.transpose(1, 2) * encoder("bert_ad").layers[0].self_attn.scaling
    assert std(pp) / std(content) == pytest.approx(1.0, rel=0.1)


# --- T5's relative bias ----------------------------------------------------------------------------------------------

def test_t5_buckets_are_t5s():
    """T5's bidirectional buckets (mesh-tensorflow _relative_position_bucket, copied by TUPE), 32 buckets, 128:
    exact below 8, then logarithmic, saturating at 91; keys to the right 16 + the same."""
    pos = encoder("t5_rel").positions
    left = {0: 0, 1: 1, 7: 7, 8: 8, 11: 8, 12: 9, 15: 9, 16: 10, 22: 10, 23: 11, 31: 11, 32: 12, 45: 12, 46: 13,
            63: 13, 64: 14, 90: 14, 91: 15, 511: 15}
    by_distance = pos.rp_bucket_by_distance  # index j - i + P - 1
    for distance, bucket in left.items():
        assert int(by_distance[P - 1 - distance]) == bucket  # key on the left: j - i = -distance
        if distance:
            assert int(by_distance[P - 1 + distance]) == 16 + bucket


def test_t5_bias_keeps_tupes_init_and_is_a_small_part_of_the_logits():
    """N(0, 0.02) as the official TUPE code (not HF T5's N(0, d^-0.5) = 0.036, nor mesh-tensorflow's glorot-uniform
    default, std ~0.21 for a (12, 32) table); unscaled: bias:content = 0.02 / 0.307 = 0.065 at initialisation."""
    pos = encoder("t5_rel").positions
    table = pos.relative_attention_bias.weight
    assert table.shape == (33, H) and std(table) == pytest.approx(INIT_STD, rel=0.2)  # HF T5's 0.036 fails this
    content, _ = layer0_content("t5_rel")
    assert std(content) == pytest.approx(CONTENT_STD[1], rel=0.1)
    with torch.no_grad():
        bias = pos(128).bias
    assert std(bias) / std(content) == pytest.approx(INIT_STD / CONTENT_STD[1], rel=0.25)
    assert not hasattr(encoder("t5_rel").layers[0].self_attn, "relative_attention_bias")  # one table for all layers


# --- the L&S priors and PAM ------------------------------------------------------------------------------------------

def gaussian_one_sided(n: int):
    """attenuated_l.py gen_relative_guassian: exp(-0.5 d^2) / sum_{d < max_len} exp(-0.5 d^2)."""
    w = [math.exp(-0.5 * d * d) for d in range(n)]
    return [x / sum(w) for x in w]


def test_gaussian_prior_is_attenuated_py_on_a_padded_row():
    """attenuated.py cal_guassian_att: softmax over the row of the padded length of -0.5 (j - i)^2, added to the
    scaled logits of every head: interior diagonal 1 / sum_{d in Z} exp(-0.5 d^2) = 0.399, first row 0.570."""
    with torch.no_grad():
        bias = encoder("gaussian_prior").positions(P).bias
    row = [math.exp(-0.5 * (j - 256) ** 2) for j in range(P)]
    assert float(bias[0, 256, 256]) == pytest.approx(row[256] / sum(row), abs=1e-6)
    assert float(bias[0, 256, 256]) == pytest.approx(1 / math.sqrt(2 * math.pi), abs=1e-4)
    assert float(bias[0, 0, 0]) == pytest.approx(gaussian_one_sided(P)[0], abs=1e-6)  # 0.570
    assert torch.equal(bias[0], bias[H - 1])  # the same for every head


@pytest.mark.parametrize("variant,name", [("learned_gaussian", "positions.distance_bias"),
                                          ("pam_concat", "layers.0.self_attn.pos_weight"),
                                          ("pam_sequential", "layers.1.self_attn.pos_weight")])
def test_learned_distance_weights_start_as_attenuated_l(variant, name):
    """A parameter per layer, head and distance, Gaussian at first and left alone by init_bert_params."""
    weights = dict(model(variant).encoder.sentence_encoder.named_parameters())[name]
    want = torch.tensor(gaussian_one_sided(P))
    assert weights.shape[-2:] == (H, P) and weights.requires_grad
    torch.testing.assert_close(weights.detach().reshape(-1, H, P), want.expand(weights.numel() // (H * P), H, P),
                               atol=1e-7, rtol=1e-6)
    assert [round(float(w), 3) for w in want[:4]] == [0.570, 0.346, 0.077, 0.006]


def test_pam_projections_are_bert_initialised_linears():
    """concat.py: PosAttention.proj_v = Linear(d, d) (with bias), Block.merge = Linear(2d, d); ours N(0, 0.02)."""
    attn = encoder("pam_concat").layers[0].self_attn
    assert attn.pos_v_proj.weight.shape == (D, D) and attn.pos_v_proj.bias is not None
    assert attn.merge.weight.shape == (D, 2 * D)
    for linear in (attn.pos_v_proj, attn.merge):
        assert std(linear.weight) == pytest.approx(INIT_STD, rel=0.03)
    assert not hasattr(encoder("pam_window").layers[0].self_attn, "pos_v_proj")  # bert.py: the input, unprojected


# --- ALiBi -----------------------------------------------------------------------------------------------------------

def test_alibi_slopes_at_12_heads_and_the_encoder_form():
    """get_slopes(12): the 8 slopes of 8 heads (2^-1 .. 2^-8), then every other one of 16 heads (2^-0.5, 2^-1.5,
    2^-2.5, 2^-3.5); issue #5's encoder form -m |j - i| on both sides."""
    pos = encoder("alibi").positions
    want = [2.0**-h for h in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    assert pos.alibi_slopes.tolist() == pytest.approx(want, rel=1e-6)
    bias = pos(40).bias
    i, j = torch.meshgrid(torch.arange(40), torch.arange(40), indexing="ij")
    for h, m in enumerate(want):
        torch.testing.assert_close(bias[h], -m * (j - i).abs().float())
    assert not list(pos.parameters())


# --- RoPE --------------------------------------------------------------------------------------------------------------

def roformer_rotate(x: torch.Tensor, t: int) -> torch.Tensor:
    """RoFormer (README pseudo-code, HF apply_rotary_position_embeddings): pairs (2m, 2m+1) of a head rotated by
    t * 10000^(-2m/dh)."""
    out = x.clone()
    for m in range(x.numel() // 2):
        angle = t * 10000.0 ** (-2 * m / x.numel())
        c, s = math.cos(angle), math.sin(angle)
        out[2 * m] = x[2 * m] * c - x[2 * m + 1] * s
        out[2 * m + 1] = x[2 * m + 1] * c + x[2 * m] * s
    return out


def test_rope_angles_base_and_layout():
    """Base 10000 over the head size; our pair (m, m + dh/2) is RoFormer's (2m, 2m+1) after a fixed permutation of
    the head dimensions; every layer rotates q and k (not v); no PE at the input."""
    from tupe_core.rope import RotarySelfAttention, rotate

    enc = encoder("rope")
    cos, sin = enc.positions(P).payload
    assert cos.shape == (P, DH)
    for t in (0, 1, 7, 100, 511):
        for m in (0, 1, 15, 31):
            angle = t * 10000.0 ** (-2 * m / DH)
            assert float(cos[t, m]) == pytest.approx(math.cos(angle), abs=1e-6)
            assert float(cos[t, m + DH // 2]) == pytest.approx(math.cos(angle), abs=1e-6)
            assert float(sin[t, m]) == pytest.approx(math.sin(angle), abs=1e-6)
    to_roformer = torch.stack([torch.arange(DH // 2), torch.arange(DH // 2) + DH // 2], dim=1).reshape(-1)
    x = torch.randn(DH, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for t in (3, 200):
        ours = rotate(x, cos[t].double(), sin[t].double())
        torch.testing.assert_close(ours[to_roformer], roformer_rotate(x[to_roformer], t), atol=1e-6, rtol=0)
    assert all(isinstance(layer.self_attn, RotarySelfAttention) for layer in enc.layers)
    assert enc.embed_positions is None and not list(enc.positions.parameters())


# --- DeBERTa (v1 code) -------------------------------------------------------------------------------------------------

def test_deberta_is_v1s_block_with_k_128():
    """v1 (ae38d6f): rel_embeddings = Embedding(2k, d), shared, no LayerNorm on it (v2's norm_rel_ebd); per layer
    pos_proj without bias (K^r) and pos_q_proj with bias (Q^r); init N(0, 0.02); c2p index clamp(i - j + k)."""
    enc = encoder("deberta_rel")
    k = VARIANTS["deberta_rel"].options("deberta").max_rel_pos
    assert k == 128
    rel = enc.positions.rel_embeddings.weight
    assert rel.shape == (2 * k, D) and std(rel) == pytest.approx(INIT_STD, rel=0.03)
    term = enc.positions(P).payload
    torch.testing.assert_close(term.embeddings, rel)  # used as stored: no LayerNorm, no dropout
    i, j = torch.meshgrid(torch.arange(P), torch.arange(P), indexing="ij")
    assert torch.equal(term.index, (i - j + k).clamp(0, 2 * k - 1))
    for layer in enc.layers:
        attn = layer.self_attn
        assert attn.pos_key_proj.bias is None and attn.pos_query_proj.bias is not None
        assert std(attn.pos_key_proj.weight) == pytest.approx(INIT_STD, rel=0.03)
        assert attn.k_proj.bias is not None  # differs from v1's in_proj (q and v biases only): docs
    assert enc.embed_positions is None  # no absolute positions: no enhanced mask decoder (docs)


def test_deberta_relative_terms_are_2_percent_of_the_content_term_at_initialisation():
    """As v1: P ~ N(0, 0.02) against unit-variance layer inputs, so c2p:c2c = 0.02:1 (v2's LayerNorm on P: 1:1)."""
    content, q = layer0_content("deberta_rel")
    attn, term = encoder("deberta_rel").layers[0].self_attn, encoder("deberta_rel").positions(128)
    assert std(content) == pytest.approx(CONTENT_STD[3], rel=0.1)
    with torch.no_grad():
        k_r = attn.pos_key_proj(term.payload.embeddings).view(-1, H, DH).permute(1, 2, 0)  # (H, dh, R)
        c2p = torch.einsum("bhtd,hdr->bhtr", q, k_r) * attn.scaling
    assert std(c2p) / std(content) == pytest.approx(INIT_STD, rel=0.25)
