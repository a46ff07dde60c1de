"""What the generic per-variant tests do not reach of FIRE and of RoPE's scaling options: FIRE's progressive
interpolation (a threshold L below the length), its options and refusals, its gradient through the Triton kernel
(Triton's interpreter) down to the MLP; RoPE's rotation under each scaling against the loops of
tests/references/rope.py, its options in the record and its refusals, and the longer-inputs measure's rescaling.
(FIRE's bias, gradient, export, fairseq-train run and Triton run at L = 512 are the per-variant tests'.)"""
from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
import torch

from conftest import run
from model_utils import build
from references import reference
from references._shared import rope_reference
from references.rope import scaled_rotation
from tupe_core.registry import VARIANTS, from_entries, from_flags
from tupe_core.rope import Rope, RopeOptions, rotate


# --- FIRE ----------------------------------------------------------------------------------------------------------

def fire_below_its_threshold(T: int = 20, L: float = 5.0):
    """fire_tiny with every parameter moved off its start and the threshold L at ``L`` < T, so that queries before L
    divide by psi(L) and those after by psi(i)."""
    model = build("fire_tiny", max_positions=24)
    pos = model.encoder.sentence_encoder.positions
    with torch.no_grad():
        for p in pos.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        pos.threshold_multiplier.fill_(L / pos.options.fire_threshold)
    return model, pos


def test_fire_progressive_interpolation_equals_the_reference():
    model, pos = fire_below_its_threshold()
    T = 20
    bias = pos(T).bias
    torch.testing.assert_close(bias.double(), reference("fire").positional(model, T), atol=1e-6, rtol=1e-6)
    # the left half (j <= i) is the paper's causal FIRE: each row's divisor psi(max(L, i)) maps distance i to 1
    r = pos.normalised_distance(T)
    assert torch.allclose(r[torch.arange(6, T), 0], torch.ones(T - 6), atol=1e-5)
    assert (r[:5, 0] < 1).all() and not torch.allclose(bias[:, 3, 5], bias[:, 5, 3])  # two-sided: left != right
    # the gradient of every parameter, L's multiplier through max(L, i) included
    upstream = torch.randn(pos.num_heads, T, T, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    names, params = zip(*pos.named_parameters())
    got = torch.autograd.grad((pos(T).bias.double() * upstream).sum(), params)
    want = torch.autograd.grad((reference("fire").differentiable(pos, T) * upstream).sum(), params)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w.double(), atol=1e-5, rtol=1e-5)
    assert float(got[names.index("threshold_multiplier")].abs()) > 0


def test_fire_options_are_its_flags_recorded_and_checked():
    model = build("fire_tiny", fire_mlp_width=8, fire_threshold=64.0)
    pos = model.encoder.sentence_encoder.positions
    assert pos.mlp_in_weight.shape == (8,) and pos.mlp_out_weight.shape == (2 * pos.num_heads, 8)
    assert model.positional_variant.entries() == [{"encoding": "fire", "fire_mlp_width": 8, "fire_threshold": 64.0}]
    assert from_entries([{"encoding": "fire"}]) == VARIANTS["fire"]  # a record without them: the defaults
    with pytest.raises(ValueError, match="--fire-threshold must be positive"):
        from_flags({"fire": True, "fire_threshold": 0.0})
    with pytest.raises(ValueError, match="--fire-mlp-width must be at least 1"):
        from_flags({"fire": True, "fire_mlp_width": 0})
    with pytest.raises(ValueError, match="--alibi cannot be combined with --fire"):
        from_flags({"fire": True, "alibi": True})


TRITON_GRADIENTS = r"""
import json, sys, torch
sys.path.insert(0, "tests")
from model_utils import build, tokens
x = tokens(2, 20, seed=2)
x[1, 13:] = 1  # right padding, T not a multiple of the interpreter's block
grads = {}
for path in ("triton", "explicit"):
    model = build("fire_tiny", seed=7, tupe_attention=path, dropout=0.0, attention_dropout=0.0,
                  activation_dropout=0.0, encoder_layers=1).train()
    pos = model.encoder.sentence_encoder.positions
    with torch.no_grad():
        pos.threshold_multiplier.fill_(8 / 512)  # L = 8 < T: both branches of max(L, i)
    features, _ = model(x, features_only=True)
    weight = torch.randn(int(x.ne(1).sum()), 64, generator=torch.Generator().manual_seed(3))
    (features[x.ne(1)] * weight).sum().backward()  # (a sum of squares of LayerNorm'd features has no gradient)
    grads[path] = {n: p.grad for n, p in pos.named_parameters()}
out = {n: {"norm": float(g.norm()), "rel": float((g - grads["explicit"][n]).abs().max()
                                                  / grads["explicit"][n].abs().max())}
       for n, g in grads["triton"].items()}
print(json.dumps(out))
"""


def test_fire_on_the_triton_kernel_sends_its_gradient_to_the_mlp(starts_process):
    """The kernel takes FIRE's (H, T, T) bias and returns its gradient, summed over the batch, down to the MLP,
    c and L (Triton's interpreter, tiny T)."""
    pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]')")
    from test_triton_models import interpreted_env

    p = run([sys.executable, "-c", TRITON_GRADIENTS], env=interpreted_env())
    grads = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(grads) == {"mlp_in_weight", "mlp_in_bias", "mlp_out_weight", "mlp_out_bias", "c", "threshold_multiplier"}
    for name, g in grads.items():
        assert g["norm"] > 0 and g["rel"] <= 1e-4, (name, g)


# --- RoPE scaling --------------------------------------------------------------------------------------------------

def rope(**options) -> Rope:
    return Rope(RopeOptions(**options), embed_dim=64, num_heads=4, max_positions=64)  # dh 16


@pytest.mark.parametrize("scaling, trained", [("linear", 0), ("ntk", 0), ("yarn", 256), ("yarn", 16)])
def test_each_rope_scaling_rotates_as_its_formula(scaling, trained):
    """q of 64 positions rotated by the tables of ``--rope-scaling`` (factor 4) against the loops written from
    the papers' formulas; YaRN at a trained length whose ramp holds pairs on both ends and between (256), and at one
    where most pairs are interpolated (16)."""
    x = torch.randn(2, 64, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    pos = rope(rope_scaling=scaling, rope_scaling_factor=4.0, rope_scaling_length=trained)
    got = rotate(x, pos.rope_cos.double(), pos.rope_sin.double())
    torch.testing.assert_close(got, scaled_rotation(x, scaling, 4.0, trained), atol=2e-6, rtol=1e-5)
    plain = rotate(x, rope().rope_cos.double(), rope().rope_sin.double())
    assert not torch.allclose(got, plain, atol=1e-3)  # each scaling changes the rotation
    torch.testing.assert_close(plain, rope_reference(x), atol=2e-6, rtol=1e-5)


def test_a_factor_of_1_is_rope_itself():
    plain = rope()
    for scaling in ("linear", "ntk", "yarn"):
        same = rope(rope_scaling=scaling, rope_scaling_length=128 if scaling == "yarn" else 0)
        torch.testing.assert_close(same.rope_cos, plain.rope_cos, atol=1e-6, rtol=0)
        torch.testing.assert_close(same.rope_sin, plain.rope_sin, atol=1e-6, rtol=0)


def test_rope_scaling_options_are_recorded_and_checked():
    assert from_entries([{"encoding": "rope"}]) == VARIANTS["rope"]  # a record before the options: none
    assert VARIANTS["rope"].options("rope") == RopeOptions()
    model = build("rope_tiny", rope_scaling="yarn", rope_scaling_factor=2.0, rope_scaling_length=16)
    assert model.positional_variant.entries() == [
        {"encoding": "rope", "rope_scaling": "yarn", "rope_scaling_factor": 2.0, "rope_scaling_length": 16}]
    assert model.positional_variant.name == "custom"
    refusals = [({"rope_scaling_factor": 2.0}, "read with --rope-scaling linear, ntk or yarn only"),
                ({"rope_scaling": "yarn", "rope_scaling_factor": 2.0}, "needs it"),
                ({"rope_scaling": "linear", "rope_scaling_factor": 2.0, "rope_scaling_length": 16}, "yarn only"),
                ({"rope_scaling": "ntk", "rope_scaling_factor": 0.5}, "at least 1"),
                ({"rope_scaling": "dynamic"}, "must be one of")]
    for options, message in refusals:
        with pytest.raises(ValueError, match=message):
            from_flags({"attention_block": "rope", **options})


def test_the_longer_inputs_measure_rescales_rope_beyond_t_only():
    from tupe_study.longer_inputs import rescale_rope

    model = build("rope_tiny", max_positions=64)
    pos = model.encoder.sentence_encoder.positions
    trained = (pos.rope_cos.clone(), pos.options)
    rescale_rope(model, "yarn", 16, 16)  # at T: as trained
    assert torch.equal(pos.rope_cos, trained[0]) and pos.options == trained[1]
    for scaling in ("linear", "ntk", "yarn"):
        rescale_rope(model, scaling, 64, 16)
        want = rope(rope_scaling=scaling, rope_scaling_factor=4.0, rope_scaling_length=16 if scaling == "yarn" else 0)
        assert pos.options == want.options and torch.equal(pos.rope_cos, want.rope_cos)
        assert torch.equal(pos.rope_sin, want.rope_sin)
    assert model.positional_variant == VARIANTS["rope"]  # the record keeps what it was trained with
    with pytest.raises(ValueError, match="applies to a RoPE model; this one is alibi"):
        rescale_rope(build("alibi_tiny"), "linear", 64, 16)
    with pytest.raises(ValueError, match="must be one of"):
        rescale_rope(model, "dynamic", 64, 16)
    rescale_rope(model, "none", 64, 16)  # none: as the model was left
    assert pos.options == replace(RopeOptions(), rope_scaling="yarn", rope_scaling_factor=4.0, rope_scaling_length=16)
