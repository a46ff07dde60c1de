"""The variant registry and the PEs of common encoders (sinusoidal, nope, t5_rel, alibi, rope, deberta_rel):
formulas against loop references written from docs/positional_encodings.md (tests/references/, one file per
variant), checkpoint records (including records of the old, shorter layout), refusals, maps, and LayerDrop with
per-layer priors."""
import argparse
import math
import re

import numpy as np
import pytest
import torch

from model_utils import build, tokens
from references import having, layer0_reference_weights, reference
from references._shared import deberta_reference, paper_bucket
from tupe_tools.analysis.checkpoint_maps import ContentDependentPositions, content_free_map, load_checkpoint
from tupe_tools.commands import checkpoint_info as checkpoint_info_main
from tupe_core import legacy_record
from tupe_core.registry import VARIANTS, flag_values, flags_of, from_flags, from_record
from tupe_plugin.models import VariantMismatchError
from tupe_core.facts import VARIANT_KEY
from tupe_core.rope import rotate
from tupe_core.alibi import alibi_slopes
from tupe_core.registry import build as build_encodings


def test_every_variant_round_trips_and_has_all_sizes():
    from fairseq.models import ARCH_MODEL_REGISTRY

    from tupe_core.facts import SIZE_FIELDS, SIZES

    assert list(SIZES) == ["base", "large", "tiny"] and all(set(s.args()) == set(SIZE_FIELDS) for s in SIZES.values())
    for name, v in VARIANTS.items():
        assert from_record(v.to_tensor()) == v and v.name == name
        for size in SIZES:
            assert ARCH_MODEL_REGISTRY[f"{name}_{size}"].__name__ == "TupeRobertaModel"
    tiny = build("bert_a_tiny").args
    assert {f: getattr(tiny, f) for f in SIZE_FIELDS} == SIZES["tiny"].args() == dict(
        encoder_layers=2, encoder_embed_dim=64, encoder_attention_heads=4, encoder_ffn_embed_dim=128)
    for arch in ["tupe_roberta_base", "tupe_roberta_large", "tupe_roberta_tiny", "bert_a_base", "gaussian_prior_tiny",
                 "learned_gaussian_base", "tupe_a_tie_cls_tiny", "bert_ad_base"]:
        assert arch in ARCH_MODEL_REGISTRY


def test_a_model_size_gives_its_flags_and_takes_the_size_flags_of_a_command_line():
    from tupe_core.facts import SIZES, ModelSize

    small = ModelSize(layers=4, embed_dim=128, heads=4, ffn_dim=512)
    assert small.fairseq_args() == ["--encoder-layers", "4", "--encoder-embed-dim", "128",
                                    "--encoder-attention-heads", "4", "--encoder-ffn-embed-dim", "512"]
    preset = "--encoder-layers 4 --encoder-embed-dim 128 --encoder-ffn-embed-dim 512 --encoder-attention-heads 4"
    assert SIZES["base"].with_flags(f"{preset} --tupe-attention sdpa".split()) == (small, ["--tupe-attention", "sdpa"])
    assert SIZES["base"].with_flags(["--encoder-layers", "4"]) == (ModelSize(4, 768, 12, 3072), [])
    assert SIZES["tiny"].with_flags(small.fairseq_args())[0] == small and SIZES["tiny"].with_flags([]) == (SIZES["tiny"], [])


@pytest.mark.parametrize("record,name", [
    ([0, 1, 1, 1, 0, 32, 128, 0], "tupe_r"),  # the 8-field layout of the first checkpoints
    ([1, 0, 0, 0, 0, 32, 128], "bert_a"),  # before --distance-prior existed
    ([0, 0, 0, 0, 0, 32, 128, 2], "learned_gaussian"),
])
def test_old_shorter_records_decode_with_defaults_and_load(record, name):
    old = torch.tensor(record, dtype=torch.long)
    assert from_record(old) == VARIANTS[name]
    src = build(f"{name}_tiny", seed=1)
    state = src.state_dict()
    state[VARIANT_KEY] = old
    dst = build(f"{name}_tiny", seed=2)
    dst.load_state_dict(state)  # same variant: loads, and the buffer takes the current encoding
    assert torch.equal(dst.variant_record, VARIANTS[name].to_tensor())
    with pytest.raises(VariantMismatchError, match=f"'{name}'"):
        build("t5_rel_tiny").load_state_dict(state, strict=False)


@pytest.mark.parametrize("saved", list(VARIANTS))
def test_every_variant_refuses_to_load_as_another_and_names_flags_and_arch(saved):
    loaded = next(name for name in VARIANTS if name != saved)
    with pytest.raises(VariantMismatchError) as err:
        build(f"{loaded}_tiny").load_state_dict(build(f"{saved}_tiny").state_dict(), strict=False)
    msg = str(err.value)
    assert f"'{saved}'" in msg and f"--arch {saved}_base" in msg and f"--arch {loaded}_tiny" in msg
    if reference(saved).ARCH_ONLY:
        assert "flags" not in msg  # only the arch reaches it (NoPE, an encoding without flags of its own)
    else:
        assert flags_of(VARIANTS[saved]) in msg


def test_nope_only_through_its_arch():
    none = dict(input_pe=False, untied_pos=False, untie_cls=False, rel_pos=False)
    with pytest.raises(ValueError, match="--arch nope_base"):
        build("tupe_roberta_tiny", **none)
    with pytest.raises(ValueError, match="nope_"):
        build("nope_tiny", rel_pos=True)
    model = build("nope_tiny", seed=3)
    enc = model.encoder.sentence_encoder
    assert enc.embed_positions is None and all(field is None for field in enc.positions(8))
    x = tokens(1, 9, seed=3)
    perm = torch.tensor([0, 5, 3, 8, 1, 2, 7, 6, 4])  # keeps <s> first
    with torch.no_grad():
        a, _ = model(x, features_only=True)
        b, _ = model(x[:, perm], features_only=True)
    torch.testing.assert_close(b, a[:, perm], atol=1e-5, rtol=1e-5)  # no position information at all


@pytest.mark.parametrize("flags, named", [
    (dict(alibi=True), "--alibi cannot be combined with --untied-pos, --rel-pos"),
    (dict(distance_prior="gaussian", untie_cls=False, rel_pos=False), "--distance-prior cannot be combined with --untied-pos"),
    (dict(attention_block="rope", alibi=True), "--alibi cannot be combined with --untied-pos, --rel-pos, --attention-block"),
])
def test_terms_that_do_not_combine_are_refused_by_their_flags(flags, named):
    """One encoding at the attention: a signal that is its variant's only one, added to another, is refused when
    the model is built or the registry reads the flags, naming the flags, instead of one replacing the other (a
    variant made otherwise is checked by its encodings: tests/test_variant_record.py)."""
    with pytest.raises(ValueError, match=re.escape(named)):
        build("tupe_r_tiny", **flags)
    with pytest.raises(ValueError, match=re.escape(named)):
        from_flags({**flag_values(VARIANTS["tupe_r"]), **flags})


def test_the_tupe_term_is_the_sum_of_its_parts():
    """TUPE-R's bias = TUPE-A's untied term + the T5 bias (both outside the [CLS] row and column)."""
    r = build("tupe_r_tiny", max_positions=16, seed=1).encoder.sentence_encoder.positions
    a = build_encodings(VARIANTS["tupe_a"], 64, 4, 16, 1)[1]
    t5 = build_encodings(VARIANTS["t5_rel"], 64, 4, 16, 1)[1]
    a.load_state_dict(r.state_dict(), strict=False)
    t5.load_state_dict(r.state_dict(), strict=False)
    with torch.no_grad():
        got, want = r(12).bias, a(12).bias + t5(12).bias
    torch.testing.assert_close(got[:, 1:, 1:], want[:, 1:, 1:])
    assert not torch.allclose(got[:, 1:, 1:], a(12).bias[:, 1:, 1:])


def test_sinusoidal_table_is_vaswani_and_added_to_the_words():
    model = build("sinusoidal_tiny", seed=1)
    enc = model.encoder.sentence_encoder
    d, T = 64, 20
    want = torch.zeros(T, d, dtype=torch.float64)
    for p in range(T):
        for i in range(d // 2):
            want[p, 2 * i] = math.sin(p / 10000 ** (2 * i / d))
            want[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / d))
    x = tokens(2, T)
    got = enc.embed_positions(x)
    assert got.shape == (1, T, d) and not list(enc.embed_positions.parameters())
    torch.testing.assert_close(got[0].double(), 0.02 * want, atol=1e-8, rtol=0)  # scaled: words' init std
    with torch.no_grad():
        emb, _ = enc.forward_embedding(x)
        ref = enc.layernorm_embedding(enc.embed_tokens(x) + 0.02 * want.float())
    torch.testing.assert_close(emb, ref)
    assert not any("embed_positions" in k for k in model.state_dict())
    with pytest.raises(ValueError, match="longer than the model's 64 positions"):
        model(tokens(1, 65))


@pytest.mark.parametrize("width", [64, 128, 768])
def test_sinusoidal_words_and_positions_stand_as_in_vaswani_at_initialisation(width):
    """At the embedding LayerNorm the positions' RMS over the words' is Vaswani's 1/sqrt(2) : 1 (his words:
    N(0, 1/d) times sqrt(d), RMS 1; the table's RMS 1/sqrt(2)) at every width, not the 35:1 of the table added
    unscaled to RoBERTa's N(0, 0.02) words."""
    model = build("sinusoidal_tiny", max_positions=512, seed=1, encoder_embed_dim=width)
    enc = model.encoder.sentence_encoder
    words = enc.embed_tokens.weight[4:]  # the real words (the specials' rows include the zero pad row)
    positions = enc.embed_positions.table
    ratio = float(positions.pow(2).mean().sqrt() / words.pow(2).mean().sqrt())
    assert ratio == pytest.approx(2 ** -0.5, rel=0.15)
    unscaled = build("sinusoidal_tiny", max_positions=512, seed=1, encoder_embed_dim=width, sinusoidal_scaled=False)
    table = unscaled.encoder.sentence_encoder.embed_positions.table
    assert float(table.pow(2).mean().sqrt() / words.pow(2).mean().sqrt()) == pytest.approx(35.4, rel=0.15)


# the variants besides sinusoidal whose checkpoints were written before the record had sinusoidal_scaled (2026-11-26):
# a fixed list of that time (a later variant has no such record)
BEFORE_SINUSOIDAL_SCALED = ["bert_a", "bert_r", "tupe_a", "tupe_r", "tupe_a_tie_cls", "bert_ad", "gaussian_prior",
                            "learned_gaussian", "nope", "t5_rel", "alibi", "rope", "deberta_rel", "pam_concat",
                            "pam_sequential", "pam_window"]


def test_an_unscaled_sinusoidal_checkpoint_loads_as_trained_or_is_refused():
    """A record written before --sinusoidal-scaled existed decodes as the unscaled table it was trained with:
    loading it into today's sinusoidal arch is refused naming --no-sinusoidal-scaled, and with that flag it gives
    the old model's outputs. Older records of other variants still decode as their registered variant."""
    def record_before(name):  # the integer record of a variant written before --sinusoidal-scaled existed
        values = {**{n: d for n, d, _ in legacy_record.FIELDS}, **legacy_record.VARIANT_FIELDS[name]}
        return torch.tensor([c.index(values[n]) if c else int(values[n]) for n, _, c in legacy_record.FIELDS
                             ][: legacy_record.NAMES.index("sinusoidal_scaled")])

    old_record = record_before("sinusoidal")
    old = from_record(old_record)
    assert old.names() == ("sinusoidal",) and not old.options("sinusoidal").sinusoidal_scaled and old.name == "custom"
    for name in BEFORE_SINUSOIDAL_SCALED:  # the same short record of every other variant of that time: itself
        assert from_record(record_before(name)) == VARIANTS[name]
    trained = build("sinusoidal_tiny", seed=1, sinusoidal_scaled=False)
    state = trained.state_dict()
    state[VARIANT_KEY] = old_record
    with pytest.raises(VariantMismatchError, match="--no-sinusoidal-scaled"):
        build("sinusoidal_tiny", seed=2).load_state_dict(state)
    again = build("sinusoidal_tiny", seed=2, sinusoidal_scaled=False)
    again.load_state_dict(state)
    x = tokens(2, 12)
    with torch.no_grad():
        torch.testing.assert_close(again(x)[0], trained(x)[0])
        assert not torch.allclose(build("sinusoidal_tiny", seed=1)(x)[0], trained(x)[0], atol=1e-3)
    with pytest.raises(ValueError, match="--no-sinusoidal-scaled is a setting of --sinusoidal-pe"):
        build("tupe_r_tiny", sinusoidal_scaled=False)


def test_alibi_slopes_follow_press_et_al():
    assert alibi_slopes(4) == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]
    assert alibi_slopes(8) == [2.0 ** -h for h in range(1, 9)]
    # not a power of 2: the 8 slopes of 8 heads, then every other slope of 16 heads (2^-0.5 h)
    assert alibi_slopes(12) == pytest.approx([2.0 ** -h for h in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5])
    assert alibi_slopes(6) == pytest.approx([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
    model = build("alibi_tiny", max_positions=16, encoder_embed_dim=96, encoder_attention_heads=12)
    bias = model.encoder.sentence_encoder.positions(10).bias
    for h, m in enumerate(alibi_slopes(12)):
        for i in range(10):
            for j in range(10):
                assert abs(float(bias[h, i, j]) + m * abs(j - i)) < 1e-6


def test_t5_rel_is_the_plain_bucketed_bias():
    model = build("t5_rel_tiny", max_positions=200)
    pos = model.encoder.sentence_encoder.positions
    assert not hasattr(pos, "pos") and model.encoder.sentence_encoder.embed_positions is None
    with torch.no_grad():
        pos.relative_attention_bias.weight.normal_()
        bias = pos(150).bias
    table = pos.relative_attention_bias.weight
    for i in range(0, 150, 7):
        for j in range(0, 150, 5):
            torch.testing.assert_close(bias[:, i, j], table[paper_bucket(j - i)])  # no [CLS] buckets


def test_rope_logits_depend_on_relative_position_only():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)
    model = build("rope_tiny", max_positions=64)
    cos, sin = model.encoder.sentence_encoder.positions(40).payload

    def logit(t, s):
        return float(rotate(q, cos[t].double(), sin[t].double()) @ rotate(k, cos[s].double(), sin[s].double()))

    assert logit(3, 10) == pytest.approx(logit(20, 27), abs=1e-5)  # float32 tables
    assert logit(3, 10) != pytest.approx(logit(10, 3), abs=1e-3)  # direction matters
    assert logit(5, 5) == pytest.approx(float(q @ k), abs=1e-5)


def test_deberta_clips_at_k_and_equals_the_formula_with_large_relative_terms():
    model = build("deberta_rel_tiny", max_rel_pos=4, tupe_attention="explicit", seed=2)  # k = 4 < T
    enc = model.encoder.sentence_encoder
    with torch.no_grad():
        enc.positions.rel_embeddings.weight.normal_()  # make c2p/p2c as large as the content term
    term = enc.positions(12)
    assert term.payload.embeddings.shape == (8, 64)  # 2k rows
    index = term.payload.index
    assert int(index[11, 0]) == 7 and int(index[0, 11]) == 0 and int(index[3, 3]) == 4
    x = tokens(2, 12)
    with torch.no_grad():
        emb, _ = enc.forward_embedding(x)
        _, w = enc.layers[0].self_attn(emb.transpose(0, 1), None, term, need_weights=True)
    torch.testing.assert_close(w.double(), layer0_reference_weights(model, "deberta_rel", x), atol=1e-5, rtol=1e-4)
    assert model.positional_variant.name == "custom" and enc.layers[0].self_attn.scaling == (3 * 16) ** -0.5


@pytest.mark.parametrize("k", [4, 128])  # clipped (k < T) and not
def test_deberta_gradients_equal_the_loop_reference(k):
    """c2p + p2c and their gradients (q, k, the shared table, both projections) against the float64 loops of
    deberta_reference: the column selection (TakeColumns) has its own backward."""
    model = build("deberta_rel_tiny", max_rel_pos=k, seed=3).double()
    enc, T, B = model.encoder.sentence_encoder, 12, 2
    attn = enc.layers[0].self_attn
    H, dh = attn.num_heads, attn.head_dim
    g = torch.Generator().manual_seed(0)
    q, kk = (torch.randn(B, H, T, dh, dtype=torch.float64, generator=g).requires_grad_() for _ in range(2))
    w = torch.randn(B, H, T, T, dtype=torch.float64, generator=g)
    params = [enc.positions.rel_embeddings.weight, attn.pos_key_proj.weight, attn.pos_query_proj.weight,
              attn.pos_query_proj.bias]

    def grads(bias):
        return torch.autograd.grad((bias * w).sum(), [q, kk, *params])

    bias = attn.positional_qk(q, kk, None, enc.positions(T))[2].additive
    want = torch.stack([deberta_reference(model, attn, q[:, h], kk[:, h], h, T) for h in range(H)], 1) * attn.scaling
    torch.testing.assert_close(bias, want, atol=1e-10, rtol=1e-10)
    for got, ref in zip(grads(bias), grads(want)):
        torch.testing.assert_close(got, ref, atol=1e-10, rtol=1e-10)


def save_checkpoint(model, path, arch):
    args = argparse.Namespace(arch=arch, max_positions=model.args.max_positions, encoder_layers=model.args.encoder_layers,
                              encoder_embed_dim=model.args.encoder_embed_dim,
                              encoder_attention_heads=model.args.encoder_attention_heads,
                              encoder_ffn_embed_dim=model.args.encoder_ffn_embed_dim)
    torch.save({"model": model.state_dict(), "args": args}, path)


@pytest.mark.parametrize("variant", having("position_map"))
def test_position_maps_equal_the_references(variant, tmp_path):
    """tupe-pos-maps from a checkpoint: the map of the variant's reference, or the refusal of a position signal
    that depends on content."""
    model = build(f"{variant}_tiny", seed=4)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(model, path, f"{variant}_tiny")
    T = 12
    want = reference(variant).position_map(model, T)
    if want is None:
        with pytest.raises(ContentDependentPositions, match="depends on content.*tupe-locality"):
            content_free_map(*load_checkpoint(str(path)), T)
        return
    found = content_free_map(*load_checkpoint(str(path)), T)
    assert not found.weights  # logits: tupe-locality takes their softmax
    np.testing.assert_allclose(found.values.double().numpy(), want.numpy(), atol=1e-5)


def test_layerdrop_gives_each_running_layer_its_own_prior():
    """10.6: with --encoder-layerdrop a dropped layer must not shift later layers' per-layer masks."""
    model = build("learned_gaussian_tiny", encoder_layers=4, encoder_layerdrop=0.5, seed=7)
    enc = model.encoder.sentence_encoder
    with torch.no_grad():
        for layer in range(4):
            enc.positions.distance_bias[layer] += layer  # layer l's mask = l + the init
    seen = []
    for index, layer in enumerate(torch.nn.ModuleList.__iter__(enc.layers)):
        layer.register_forward_pre_hook(lambda m, args, index=index: seen.append((index, args[1].additive)))
    model.train()
    torch.manual_seed(0)
    shifted = 0
    for _ in range(12):
        seen.clear()
        model(tokens(1, 6))
        ran = [i for i, _ in seen]
        shifted += ran != list(range(len(ran)))  # a dropped layer before a running one
        for index, mask in seen:
            want = enc.positions.distance_bias[index][:, enc.positions.distance[:6, :6]].unsqueeze(0)
            torch.testing.assert_close(mask, want)
    assert shifted > 0  # the draws did drop a layer that others followed


def test_checkpoint_info_lists_the_registry(capsys):
    assert checkpoint_info_main(["--list-variants"]) == 0
    names = capsys.readouterr().out.split()
    assert names == [n.replace("_", "-") for n in VARIANTS]
    assert {"tupe-r", "bert-a", "sinusoidal", "nope", "t5-rel", "alibi", "rope", "deberta-rel"} <= set(names)


@pytest.mark.parametrize("variant", ["rope", "deberta_rel"])
def test_real_attention_maps_of_content_dependent_variants(variant):
    """tupe-locality --text measures rope/deberta_rel on real maps: layer 0's equal the formula."""
    from tupe_tools.analysis.attention_maps import attention_probs

    model = build(f"{variant}_tiny", seed=6)
    x = tokens(1, 11, seed=6)
    probs = attention_probs(model, x[0])  # (L, H, T, T)
    assert probs.shape == (2, 4, 11, 11)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 11))
    torch.testing.assert_close(probs[0].double(), layer0_reference_weights(model, variant, x)[0], atol=1e-5, rtol=1e-4)
    assert all(layer.self_attn.attention_path == "auto" for layer in model.encoder.sentence_encoder.layers)  # restored


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_bf16_weights_follow_fp32(variant):
    """bf16 (fairseq --bf16 casts the model, buffers included) stays close to fp32 for every variant."""
    model = build(f"{variant}_tiny", seed=8)
    x = tokens(2, 16, seed=8)
    x[1, 12:] = 1  # right padding
    with torch.no_grad():
        want, _ = model(x, features_only=True)
        got, _ = model.to(torch.bfloat16)(x, features_only=True)
    assert got.dtype == torch.bfloat16
    keep = x.ne(1)
    assert (got.float()[keep] - want[keep]).abs().max() < 0.1
