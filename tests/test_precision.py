"""Half precision: bf16 weights, autocast (fairseq --amp) and CUDA fp16 (skipped without a GPU)."""
import pytest
import torch

from model_utils import build, tokens

VARIANTS = ["tupe_r_tiny", "bert_a_tiny", "bert_ad_tiny"]


def padded_batch():
    x = tokens(2, 16, seed=3)
    x[1, 10:] = 1
    return x, x.ne(1)


def fp32_features(arch: str, seed: int = 2, **overrides):
    """The model in fp32, a padded batch, its real tokens and their features (the reference)."""
    model = build(arch, seed=seed, **overrides)
    x, keep = padded_batch()
    with torch.no_grad():
        return model, x, keep, model(x, features_only=True)[0]


@pytest.mark.parametrize("arch", VARIANTS)
def test_bf16_weights_match_fp32(arch):
    model, x, keep, ref = fp32_features(arch)
    with torch.no_grad():
        out = model.to(torch.bfloat16)(x, features_only=True)[0]
    assert out.dtype == torch.bfloat16
    err = (out.float()[keep] - ref[keep]).abs().max()
    assert err < 0.1, err  # LayerNorm-scale features, bf16 has ~3 significant digits


@pytest.mark.parametrize("arch", VARIANTS)
def test_autocast_matches_fp32(arch):
    """fairseq --amp: autocast runs q/k in half precision beside an fp32 positional term."""
    model, x, keep, ref = fp32_features(arch)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, features_only=True)[0]
    assert torch.isfinite(out.float()).all()
    assert (out.float()[keep] - ref[keep]).abs().max() < 0.15


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (fused SDPA kernels, fp16)")
@pytest.mark.parametrize("arch", VARIANTS)
def test_cuda_fp16_sdpa_matches_the_fp32_reference(arch):
    _, x, keep, ref = fp32_features(arch, seed=4, tupe_attention="explicit")
    with torch.no_grad():
        fast = build(arch, seed=4).cuda().half()
        out = fast(x.cuda(), features_only=True)[0].float().cpu()
    assert (out[keep] - ref[keep]).abs().max() < 2e-2
