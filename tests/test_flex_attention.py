"""``flex_biased_attention`` (tupe_core/kernels/flex_attention.py) against a float64 reference written here, on
CPU (eager FlexAttention; torch 2.13 has no backward for q, k, v there, so on CPU only the bias gets a
gradient, and the q, k, v gradients are checked on CUDA, compiled): batch-shared, permuted and per-sequence
biases, right padding, a sequence without real keys (zeros), and the refusal of attention dropout."""
from __future__ import annotations

import pytest
import torch

from tupe_core.kernels.flex_attention import flex_biased_attention

SCALE = 0.3
B, H, T, D = 2, 2, 20, 8


def reference(q, k, v, bias, padding):
    """float64: the explicit path's ops on the rows with a real key (padded keys weigh 0), zeros on a row
    without one (FlexAttention computes none of its blocks)."""
    logits = torch.matmul(q.double() * SCALE, k.double().transpose(-1, -2))  # (B, H, T, T)
    if bias is not None:
        logits = logits + bias.double()
    if padding is None:
        return torch.matmul(torch.softmax(logits, dim=-1), v.double())
    logits = logits.masked_fill(padding[:, None, None, :], torch.finfo(torch.float64).min)
    has_real_key = (~padding).any(dim=1).double()[:, None, None, None]  # (B, 1, 1, 1)
    return torch.matmul(torch.softmax(logits, dim=-1), v.double()) * has_real_key


def make_bias(kind: str, generator: torch.Generator, device="cpu"):
    """(leaf, view): the tensor that gets the gradient and the function that makes the bias from it."""
    leaf_shape, view = {
        "shared": ((H, T, T), lambda w: w),
        "permuted": ((T, T, H), lambda w: w.permute(2, 0, 1)),  # T5's layout
        "per_sequence": ((B, H, T, T), lambda w: w),
    }[kind]
    return torch.randn(leaf_shape, generator=generator).to(device).requires_grad_(), view


def padding_mask(kind: str, device="cpu"):
    if kind == "none":
        return None
    padding = torch.zeros(B, T, dtype=torch.bool, device=device)
    padding[0, T - 6:] = True
    if kind == "full":
        padding[1] = True  # a sequence without a real key
    return padding


def relative_error(x, ref) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("bias_kind, padding", [("shared", "none"), ("shared", "full"), ("permuted", "right"),
                                               ("per_sequence", "full")])
def test_output_and_bias_gradient_match_reference(bias_kind, padding):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    leaf, view = make_bias(bias_kind, g)
    pad = padding_mask(padding)
    grad_out = torch.randn(B, H, T, D, generator=g)
    out = flex_biased_attention(q, k, v, view(leaf), pad, SCALE, 0.0)
    out.backward(grad_out)
    ref_leaf = leaf.detach().double().requires_grad_()
    ref = reference(q, k, v, view(ref_leaf), pad)
    ref.backward(grad_out.double())
    assert relative_error(out, ref) < 1e-5
    assert relative_error(leaf.grad, ref_leaf.grad) < 1e-5
    if padding == "full":
        assert torch.equal(out[1], torch.zeros_like(out[1]))  # no real key: zeros, not NaN


def test_without_bias():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    pad = padding_mask("right")
    assert relative_error(flex_biased_attention(q, k, v, None, pad, SCALE, 0.0), reference(q, k, v, None, pad)) < 1e-5


def test_attention_dropout_is_refused_naming_the_triton_path():
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="--tupe-attention triton"):
        flex_biased_attention(q, q, q, None, None, 1.0, 0.1)


def test_bad_shapes_are_named():
    q = torch.zeros(B, H, T, D)
    with pytest.raises(ValueError, match=r"bias must be \(H, T, T\)"):
        flex_biased_attention(q, q, q, torch.zeros(H, T, T + 1), None, 1.0, 0.0)
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        flex_biased_attention(q, q, q, None, torch.zeros(B, T), 1.0, 0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (FlexAttention's backward for q, k, v)")
@pytest.mark.parametrize("bias_kind", ["permuted", "per_sequence"])
def test_all_gradients_match_reference_compiled_cuda(bias_kind):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g).cuda().requires_grad_() for _ in range(3))
    leaf, view = make_bias(bias_kind, g, device="cuda")
    pad = padding_mask("full", device="cuda")
    grad_out = torch.randn(B, H, T, D, generator=g).cuda()
    out = flex_biased_attention(q, k, v, view(leaf), pad, SCALE, 0.0)
    out.backward(grad_out)
    ref_leaves = [x.detach().double().requires_grad_() for x in (q, k, v, leaf)]
    ref = reference(*ref_leaves[:3], view(ref_leaves[3]), pad)
    ref.backward(grad_out.double())
    assert relative_error(out, ref) < 1e-4
    for x, r in zip((q, k, v, leaf), ref_leaves):
        assert relative_error(x.grad, r.grad) < 1e-4


@pytest.mark.parametrize("variant", ["tupe_r", "t5_rel", "learned_gaussian", "alibi", "deberta_rel"])
def test_whole_models_on_flex_equal_the_explicit_path(variant):
    """A tiny model of each bias kind (shared, per layer, fixed, DeBERTa's per sequence) built with
    --tupe-attention flex gives the explicit path's features, right padding included (forward only: eager
    FlexAttention on CPU has no backward for q, k, v)."""
    from model_utils import PAD, build, tokens

    x = tokens(2, 20, seed=2)
    x[1, 13:] = PAD
    keep = x.ne(PAD)
    features = {}
    for path in ("flex", "explicit"):
        model = build(f"{variant}_tiny", seed=7, tupe_attention=path, attention_dropout=0.0)
        with torch.no_grad():
            features[path] = model(x, features_only=True)[0][keep]
    assert relative_error(features["flex"], features["explicit"].double()) < 1e-5


def test_a_model_with_attention_dropout_refuses_flex_when_built():
    from model_utils import build

    with pytest.raises(ValueError, match=r"--tupe-attention flex has no attention dropout .* model's is 0\.1: use "
                                         r"--tupe-attention triton"):
        build("tupe_r_tiny", tupe_attention="flex", attention_dropout=0.1)
    assert build("tupe_r_tiny", tupe_attention="flex", attention_dropout=0.0) is not None
