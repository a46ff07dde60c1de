"""``--tupe-attention auto|sdpa|explicit``: every path against a float64 loop reference written here, the
choice ``auto`` makes, whole models equal on both paths, the positional mask built once per forward in
the compute dtype, and the option's way through a checkpoint."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import torch
from fairseq.modules.fairseq_dropout import FairseqDropout

from model_utils import build, tokens
from tupe_plugin.models import TupeRobertaModel
from tupe_core.registry import VARIANTS
from tupe_core import masks as masks_module
from tupe_core import attend as attend_module
from tupe_core.attend import Dropout, attend, choose_attention_path
from tupe_core.attention import SelfAttention
from tupe_core.masks import align_strides, attention_mask, padding_value
from tupe_core.base import PositionalTerm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from gpu_check.probes import sdpa_calls  # noqa: E402  (the SDPA spy the GPU check uses)

B, H, T, DH = 2, 2, 6, 4
SCALE = (2 * DH) ** -0.5  # TUPE's (2 dh)^-0.5; any scale would do


def loop_attention(q, k, v, bias: Optional[torch.Tensor], lengths: List[int], scale: float) -> torch.Tensor:
    """(B, H, T, dh), entry by entry: ``s_ij = scale q_i . k_j + bias[h, i, j]`` over the real keys
    ``j < lengths[b]`` only (padded keys are left out, not masked), ``p = exp(s - max) / sum``,
    ``out_i = sum_j p_ij v_j``."""
    rows = []
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            for i in range(q.size(2)):
                s = torch.stack([scale * torch.dot(q[b, h, i], k[b, h, j]) + (0 if bias is None else bias[h, i, j])
                                 for j in range(lengths[b])])
                e = torch.exp(s - s.max())
                p = e / e.sum()
                rows.append(sum(p[j] * v[b, h, j] for j in range(lengths[b])))
    return torch.stack(rows).view(q.shape)


def padding_mask(lengths: List[int], length: int) -> torch.Tensor:
    return torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T) True at padding


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("lengths", [[T, T], [T, 4]], ids=["no_padding", "padding"])
@pytest.mark.parametrize("path", ["sdpa", "explicit"])
def test_attend_equals_the_loop_reference_with_gradients(path, lengths, with_bias):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, DH, generator=g, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(H, T, T, generator=g, dtype=torch.float64) if with_bias else None
    weight = torch.randn(B, H, T, DH, generator=g, dtype=torch.float64)  # loss = sum(out * weight)
    leaves = [q, k, v] + ([bias] if with_bias else [])

    ref_in = [t.clone().requires_grad_() for t in leaves]
    ref = loop_attention(*ref_in[:3], ref_in[3] if with_bias else None, lengths, SCALE)
    (ref * weight).sum().backward()

    got_in = [t.float().requires_grad_() for t in leaves]
    pad = padding_mask(lengths, T) if lengths != [T, T] else None
    mask = attention_mask(got_in[3] if with_bias else None, pad, torch.float32)
    out, weights = attend(*got_in[:3], mask, SCALE, FairseqDropout(0.0), path)
    (out * weight.float()).sum().backward()

    assert (out.double() - ref.detach()).abs().max() <= 1e-5
    for name, a, b in zip("qkv" + "b", got_in, ref_in):
        assert (a.grad.double() - b.grad).abs().max() <= 1e-5, name
    assert (weights is None) == (path == "sdpa")  # the explicit path returns its probabilities
    if weights is not None:
        assert weights[1, :, :, lengths[1]:].abs().sum() == 0  # padded keys: weight 0
        torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T))


@pytest.mark.parametrize("path", ["sdpa", "explicit"])
def test_attention_dropout_is_applied_and_unbiased_on_both_paths(path):
    """Dropout cannot be compared draw by draw (SDPA draws its own mask); every draw must differ from
    the no-dropout output and their mean must approach it (scaled by 1 / (1 - p))."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 4, 2, generator=g) for _ in range(3))
    want, _ = attend(q, k, v, None, 1.0, FairseqDropout(0.0), path)
    dropout = FairseqDropout(0.5).train()
    torch.manual_seed(0)
    draws = torch.stack([attend(q, k, v, None, 1.0, dropout, path)[0] for _ in range(4000)])
    assert all(not torch.allclose(d, want) for d in draws[:20])
    assert (draws.mean(0) - want).abs().max() < 0.05
    dropout.eval()  # eval: no dropout
    torch.testing.assert_close(attend(q, k, v, None, 1.0, dropout, path)[0], want)


def test_choose_attention_path():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert choose_attention_path(cpu, training=True, dropout=0.1)[0] == "explicit"
    assert choose_attention_path(cpu, training=False, dropout=0.1)[0] == "sdpa"
    assert choose_attention_path(cpu, training=True, dropout=0.0)[0] == "sdpa"
    assert choose_attention_path(cuda, training=True, dropout=0.1)[0] == "sdpa"
    assert choose_attention_path(cuda, training=False, dropout=0.0)[0] == "sdpa"
    # a learned bias: triton where it runs (CUDA, half precision), today's paths elsewhere
    assert choose_attention_path(cpu, True, 0.1, torch.bfloat16, learned_bias=True)[0] == "explicit"
    assert choose_attention_path(cuda, True, 0.1, torch.float32, learned_bias=True)[0] == "sdpa"  # fp32: IEEE
    trusted = attend_module.triton_runs(cuda) and attend_module.triton_failure(cuda, torch.bfloat16, dropout=True) is None
    want = "triton" if trusted else "sdpa"
    assert choose_attention_path(cuda, True, 0.1, torch.bfloat16, learned_bias=True)[0] == want


def test_auto_keeps_sdpa_for_heads_wider_than_the_kernels_tiles(monkeypatch):
    """Heads wider than the Triton kernel's MAX_HEAD_DIM (its tiles) take SDPA, not a kernel that refuses them."""
    pytest.importorskip("triton")
    from tupe_core.kernels import triton_attention

    monkeypatch.setattr(triton_attention, "triton_available", lambda device: True)  # as on a GPU with Triton
    config = attend_module.triton_config("cuda", torch.bfloat16, per_sequence=False, dropout=True)
    monkeypatch.setitem(attend_module._TRITON_FAILURE, config, None)  # ... where it passed its check
    cuda, widest = torch.device("cuda"), triton_attention.MAX_HEAD_DIM
    assert choose_attention_path(cuda, True, 0.1, torch.bfloat16, True, head_dim=widest)[0] == "triton"
    assert choose_attention_path(cuda, True, 0.1, torch.bfloat16, True, head_dim=widest + 1) == ("sdpa", "the default")
    with pytest.raises(ValueError, match=f"head dim {widest + 1} > {widest}"):  # what auto steers clear of
        q = torch.zeros(1, 1, 4, widest + 1)
        triton_attention.biased_attention(q, q, q, None, None, 1.0, 0.0)


def test_a_forwards_bias_is_laid_out_for_the_kernel_once_for_all_layers():
    """T5's permuted bias with T = 20 (rows not a multiple of 16): the mask copies it into the kernel's layout the
    first time a layer asks, and every later layer of the forward gets that same tensor."""
    from tupe_core.kernels.triton_attention import kernel_layout

    H, T = 2, 20
    bias = torch.randn(T, T, H).permute(2, 0, 1)
    mask = attention_mask(bias, None, torch.float32)
    first = mask.kernel_bias(kernel_layout)
    assert first is not bias and torch.equal(first, bias) and first.stride() == (T * 32, 32, 1)
    assert all(mask.kernel_bias(kernel_layout) is first for _ in range(11))
    assert attention_mask(None, None, torch.float32).kernel_bias(kernel_layout) is None


def test_auto_keeps_sdpa_when_the_kernel_failed_its_first_use_check(monkeypatch):
    """On a GPU where our kernel fails its check (a compile error, a wrong result), auto takes SDPA and says why in
    its one log line; an explicit --tupe-attention triton still runs the kernel (and fails loudly)."""
    pytest.importorskip("triton")
    from tupe_core.kernels import triton_attention

    monkeypatch.setattr(triton_attention, "triton_available", lambda device: True)
    config = attend_module.triton_config("cuda", torch.bfloat16, per_sequence=False, dropout=True)
    monkeypatch.setitem(attend_module._TRITON_FAILURE, config, "its first-use check failed (CompilationError: out of "
                        "resources)")
    path, why = choose_attention_path(torch.device("cuda"), True, 0.1, torch.bfloat16, learned_bias=True)
    assert path == "sdpa" and why == ("not our Triton kernel for cuda bfloat16, shared bias, dropout on: its "
                                      "first-use check failed (CompilationError: out of resources)")
    # the other configurations are checked apart: without dropout, this one is not known to fail
    monkeypatch.setitem(attend_module._TRITON_FAILURE, attend_module.triton_config("cuda", torch.bfloat16, False, False),
                        None)
    assert choose_attention_path(torch.device("cuda"), True, 0.0, torch.bfloat16, learned_bias=True)[0] == "triton"


def test_block_path_per_forward_and_bad_names():
    x = torch.randn(T, B, 8)
    attn = SelfAttention(8, 2, dropout=0.1, attention_path="auto")
    assert attn.train().forward_path(x) == "explicit"
    assert attn.eval().forward_path(x) == "sdpa"
    assert attn.forward_path(x, need_weights=True) == "explicit"
    fixed = SelfAttention(8, 2, dropout=0.1, attention_path="sdpa").train()
    assert fixed.forward_path(x) == "sdpa"
    _, weights = fixed(x, None, PositionalTerm(None), need_weights=True)
    assert weights is not None and weights.shape == (B, 2, T, T)
    with pytest.raises(ValueError, match="--tupe-attention"):
        SelfAttention(8, 2, attention_path="fast")
    assert SelfAttention(8, 2, attention_path="reference").attention_path == "explicit"  # the older name loads
    with pytest.raises(ValueError, match="attention path must be one of"):
        attend(x, x, x, None, 1.0, FairseqDropout(0.0), "auto")


@pytest.mark.parametrize("variant", ["tupe_r", "deberta_rel", "pam_concat", "pam_window"])
def test_the_fairseq_layer_puts_fairseqs_dropout_and_quant_noise_on_the_plain_torch_blocks(variant):
    """The blocks are plain torch (tupe-export-hf ships them); in fairseq every Dropout of a block is a
    FairseqDropout (--retain-dropout reaches it) and, with --quant-noise-pq, every Linear has its hook."""
    for q_noise in (0.0, 0.25):
        model = build(f"{variant}_tiny", attention_dropout=0.1, quant_noise_pq=q_noise, quant_noise_pq_block_size=8)
        for layer in model.encoder.sentence_encoder.layers:
            children = dict(layer.self_attn.named_children())
            dropouts = [m for m in children.values() if isinstance(m, (Dropout, FairseqDropout))]
            linears = [m for m in children.values() if isinstance(m, torch.nn.Linear)]
            assert dropouts and all(type(m) is FairseqDropout and m.p == 0.1 for m in dropouts)
            assert len(linears) >= 4 and all(bool(m._forward_pre_hooks) == (q_noise > 0) for m in linears)


def paths_taken(model, x) -> List[str]:
    """The path every layer took in one real forward: the explicit path returns the weights, SDPA None."""
    taken: List[str] = []
    hooks = [layer.self_attn.register_forward_hook(
        lambda m, i, out: taken.append("sdpa" if out[1] is None else "explicit"))
        for layer in model.encoder.sentence_encoder.layers]
    try:
        model(x, features_only=True)
    finally:
        for hook in hooks:
            hook.remove()
    return taken


def test_auto_takes_explicit_when_training_on_cpu_with_dropout_and_sdpa_in_eval():
    model = build("tupe_r_tiny")  # attention dropout 0.1, as RoBERTa
    layers = model.encoder.sentence_encoder.layers
    assert all(layer.self_attn.attention_path == "auto" for layer in layers)
    assert layers[0].self_attn.dropout_module.p == 0.1
    x = tokens(2, 9)
    assert paths_taken(model.train(), x) == ["explicit"] * len(layers)
    with torch.no_grad():
        assert paths_taken(model.eval(), x) == ["sdpa"] * len(layers)
    fixed = build("tupe_r_tiny", tupe_attention="sdpa").train()
    assert paths_taken(fixed, x) == ["sdpa"] * len(layers)


NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)


@pytest.mark.parametrize("variant", ["tupe_r", "alibi", "learned_gaussian", "rope", "deberta_rel", "pam_concat"])
def test_model_forward_and_backward_equal_on_every_path(variant):
    x = tokens(3, 14, seed=2)
    x[1, 9:] = 1  # right padding
    keep = x.ne(1)
    weight = torch.randn(int(keep.sum()), 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    results = {}
    for path in ("sdpa", "explicit", "auto"):  # float64: the paths differ by rounding only
        model = build(f"{variant}_tiny", seed=7, tupe_attention=path, **NO_DROPOUT).double().train()  # p = 0
        features, _ = model(x, features_only=True)
        (features[keep] * weight).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        results[path] = (features[keep].detach(), grads)
    want, want_grads = results["explicit"]
    assert len(want_grads) > 10
    for path in ("sdpa", "auto"):
        got, grads = results[path]
        assert (got - want).abs().max() <= 1e-5, path
        assert grads.keys() == want_grads.keys()
        worst = max((grads[n] - want_grads[n]).abs().max().item() for n in grads)
        assert worst <= 1e-5, (path, worst)


def masks_seen(model, x) -> List[torch.Tensor]:
    """The additive mask every layer's attention block was handed in one forward (what sdpa and explicit read)."""
    seen: List[torch.Tensor] = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda m, args: seen.append(args[1].additive))
             for layer in model.encoder.sentence_encoder.layers]
    try:
        with torch.no_grad():
            model(x, features_only=True)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("variant", ["tupe_r", "alibi", "t5_rel"])
def test_bf16_model_gets_one_bf16_mask_shared_by_all_layers(variant):
    model = build(f"{variant}_tiny").to(torch.bfloat16)
    layers = len(model.encoder.sentence_encoder.layers)
    x = tokens(3, 10)
    masks = masks_seen(model, x)  # no padding: the (H, T, T) bias viewed as (1, H, T, T)
    assert len(masks) == layers and all(m is masks[0] for m in masks)
    assert masks[0].dtype == torch.bfloat16 and masks[0].shape == (1, 4, 10, 10)
    assert masks[0].stride(-1) == 1  # rows contiguous (t5_rel's bias is a permuted view of its table)
    x[2, 6:] = 1  # padding folded in once per forward: (B, H, T, T), still one tensor for all layers
    masks = masks_seen(model, x)
    assert all(m is masks[0] for m in masks)
    assert masks[0].dtype == torch.bfloat16 and masks[0].shape == (3, 4, 10, 10)
    assert torch.isfinite(masks[0]).all()  # padded keys: a finite logit far below any other (padding_value)
    assert (masks[0][2, :, :, 6:] == padding_value(torch.bfloat16)).all()
    assert torch.equal(masks[0][2, :, :, :6], masks[0][0, :, :, :6])  # real keys: the bias alone


def test_autocast_mask_is_cast_once_to_the_compute_dtype():
    """Under autocast (--amp) the model stays float32 but q and k are half: the encoder casts the mask
    once, so no layer casts it again (its dtype already equals q's)."""
    model = build("tupe_r_tiny")
    q_dtypes: List[torch.dtype] = []
    hook = model.encoder.sentence_encoder.layers[0].self_attn.q_proj.register_forward_hook(
        lambda m, i, out: q_dtypes.append(out.dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        masks = masks_seen(model, tokens(2, 8))
    hook.remove()
    assert q_dtypes == [torch.bfloat16]
    assert all(m is masks[0] for m in masks) and masks[0].dtype == torch.bfloat16


def test_per_layer_prior_gets_one_mask_per_layer():
    model = build("learned_gaussian_tiny")
    masks = masks_seen(model, tokens(2, 8))
    assert len({id(m) for m in masks}) == len(masks) == 2
    bias = model.encoder.sentence_encoder.positions(8).bias  # (L, H, T, T)
    for layer, m in enumerate(masks):
        torch.testing.assert_close(m, bias[layer].unsqueeze(0))


def test_align_strides_copies_only_an_unaligned_mask_and_keeps_values_and_gradients():
    aligned = torch.randn(1, 4, 8, 8)
    assert align_strides(aligned) is aligned
    source = torch.randn(4, 10, 10, requires_grad=True)
    view = source[:, 1:, 1:].unsqueeze(0)  # (1, 4, 9, 9), row stride 10: unaligned
    out = align_strides(view)
    assert out.shape == view.shape and torch.equal(out, view)
    assert all(s % 8 == 0 for s in out.stride()[:-1]) and out.stride(-1) == 1
    (out * torch.arange(81.0).view(9, 9)).sum().backward()
    assert torch.equal(source.grad[0, 1:, 1:], torch.arange(81.0).view(9, 9))
    assert source.grad[:, 0].abs().sum() == 0
    permuted = torch.randn(9, 9, 4).permute(2, 0, 1).unsqueeze(0)  # (1, 4, 9, 9), heads innermost (as T5's bias)
    out = align_strides(permuted)
    assert torch.equal(out, permuted) and out.stride() == (4 * 9 * 16, 9 * 16, 16, 1)


# --- GPU pitfalls, checked on CPU (bench/gpu_check/ checks them again on CUDA) -------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_masks_reaching_sdpa_have_qs_dtype_and_aligned_strides_under_autocast(variant, monkeypatch):
    """What CUDA gets, forced on CPU: under autocast every mask SDPA sees (the shared one and DeBERTa's per-layer
    bias) has q's dtype and every stride but the last a multiple of 8, at a length (10) and a padding that
    leave them unaligned; the values are those of the unaligned run."""
    model = build(f"{variant}_tiny", tupe_attention="sdpa")
    x = tokens(3, 10)
    x[1, 7:] = 1
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x, features_only=True)[0]
        monkeypatch.setattr(masks_module, "ALIGNED_DEVICES", {"cuda", "cpu"})
        with sdpa_calls() as seen:
            got = model(x, features_only=True)[0]
    assert len(seen) == len(model.encoder.sentence_encoder.layers)
    for q_dtype, mask in seen:
        assert q_dtype == torch.bfloat16 and mask.dtype == q_dtype
        assert mask.shape[-1] == 10 and all(s % 8 == 0 for s in mask.stride()[:-1]) and mask.stride(-1) == 1
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_sequence_without_real_tokens_gives_no_nan_and_leaves_the_others_unchanged(variant):
    """A batch row that is all padding: every query of it has all keys masked. Forward and backward stay finite
    on both paths, and the other sequences' features are those of the batch without it."""
    x = tokens(2, 9, seed=4)
    x[1, 6:] = 1
    empty = torch.cat([x, torch.ones(1, 9, dtype=x.dtype)])  # the third sequence: padding only
    keep = x.ne(1)
    for path in ("sdpa", "explicit"):
        model = build(f"{variant}_tiny", seed=5, tupe_attention=path, **NO_DROPOUT).double().train()
        want = model(x, features_only=True)[0]
        got = model(empty, features_only=True)[0]
        assert torch.isfinite(got).all(), path
        got.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None), path
        assert (got[:2][keep] - want[keep]).abs().max() <= 1e-10, path


# --- the option through a checkpoint --------------------------------------------------------------------


def fairseq_args(data_dir: str, *extra: str) -> argparse.Namespace:
    from fairseq import options

    argv = [data_dir, "--task", "masked_lm", "--criterion", "masked_lm", "--arch", "tupe_r_tiny",
            "--max-positions", "32", "--tokens-per-sample", "32", *extra]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


def save_checkpoint(args: argparse.Namespace, path, drop_option: bool = False) -> None:
    """A checkpoint as fairseq-train writes it (cfg + model); ``drop_option``: one written before
    ``--tupe-attention`` existed (its cfg has the older ``attention_impl`` instead)."""
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    cfg = convert_namespace_to_omegaconf(args)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    if drop_option:
        del container["model"].tupe_attention  # fairseq keeps a legacy model's args as a Namespace
        container["model"].attention_impl = "sdpa"
    torch.save({"args": None, "cfg": container, "model": model.state_dict(), "criterion": None,
                "optimizer_history": [{"criterion_name": "MaskedLmLoss", "optimizer_name": "none",
                                       "lr_scheduler_state": {"best": None}, "num_updates": 0}],
                "task_state": {}, "extra_state": {}}, path)


@pytest.mark.parametrize("flag, saved, want", [
    (["--tupe-attention", "explicit"], "explicit", "explicit"),
    ([], "auto", "auto"),  # the default
    ([], None, "auto"),  # an old checkpoint without the option
])
def test_option_round_trips_through_a_checkpoint(tmp_path, flag, saved, want):
    from fairseq import checkpoint_utils

    from tupe_plugin.build_task import numbered_dictionary

    numbered_dictionary(44).save(str(tmp_path / "dict.txt"))
    args = fairseq_args(str(tmp_path), *flag)
    assert args.tupe_attention == (saved or "auto")
    save_checkpoint(args, tmp_path / "model.pt", drop_option=saved is None)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "model.pt"))
    assert getattr(state["cfg"].model, "tupe_attention", None) == saved
    hub = TupeRobertaModel.from_pretrained(str(tmp_path), checkpoint_file="model.pt",
                                           data_name_or_path=str(tmp_path), bpe=None)
    assert hub.cfg.model.tupe_attention == want
    assert all(layer.self_attn.attention_path == want for layer in hub.model.encoder.sentence_encoder.layers)



def test_a_block_records_the_path_its_forward_took():
    """What benchmarks read to name the path auto took (bench/bench_train_step.py)."""
    model = build("tupe_r_tiny")
    x = tokens(2, 9)
    model.train()(x, features_only=True)
    assert [layer.self_attn.last_path for layer in model.encoder.sentence_encoder.layers] == ["explicit", "explicit"]
    with torch.no_grad():
        model.eval()(x, features_only=True)
    assert model.encoder.sentence_encoder.layers[0].self_attn.last_path == "sdpa"


def test_auto_says_its_path_once_per_process_and_reason(caplog, monkeypatch):
    """One log line per (path, reason), however many layers and forwards take it; a new reason (evaluation
    after training) is a new line."""
    monkeypatch.setattr(attend_module, "_SAID", set())
    model = build("tupe_r_tiny", attention_dropout=0.1, tupe_attention="auto")
    x = tokens(2, 12)
    with caplog.at_level(logging.INFO, logger="tupe_core.attend"):
        for _ in range(3):
            model.train()(x, features_only=True)
        with torch.no_grad():
            model.eval()(x, features_only=True)
            model.eval()(x, features_only=True)
    said = [r.getMessage() for r in caplog.records if r.name == "tupe_core.attend"]
    assert said == ["--tupe-attention auto: explicit (CPU training with attention dropout)",
                    "--tupe-attention auto: sdpa (the default)"]


def test_the_path_table_says_what_each_path_does():
    """attend's paths are the rows of attend.PATHS: what a row declares (weights, dropout, fused) is what the path
    does, and --tupe-attention's choices are the table's names."""
    from tupe_core.attend import ATTENTION_PATHS, PATHS

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    want = torch.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1) @ v  # the plain formula
    for name in ("sdpa", "explicit"):  # the paths every CPU runs
        out, weights = attend(q, k, v, None, 0.5, Dropout(0.0), name)
        torch.testing.assert_close(out, want)
        assert (weights is not None) == PATHS[name].weights
    for name, path in PATHS.items():
        if path.dropout:
            assert SelfAttention(8, 2, dropout=0.1, attention_path=name).attention_path == name
        else:
            with pytest.raises(ValueError, match=f"--tupe-attention {name} has no attention dropout"):
                SelfAttention(8, 2, dropout=0.1, attention_path=name)
    assert ATTENTION_PATHS == ("auto", *PATHS)
    assert {name for name, path in PATHS.items() if path.fused} == {"triton", "flex"}  # the kernels' paths
    with pytest.raises(ValueError, match=r"attention path must be one of \('sdpa', 'explicit', 'triton', 'flex'\)"):
        attend(q, k, v, None, 0.5, Dropout(0.0), "cudnn")


# --- auto's fallback from our Triton kernel to SDPA at run time (fake kernels; no Triton needed) -------------


@pytest.fixture
def fresh_switches(monkeypatch):
    """This process's record of auto's Triton configurations, empty for the test (and restored after)."""
    pytest.importorskip("triton")
    monkeypatch.setattr(attend_module, "_TRITON_FAILURE", {})
    monkeypatch.setattr(attend_module, "_FINITE_SEEN", set())
    return attend_module._TRITON_FAILURE


def attention_inputs(nan: bool = False):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=g) for _ in range(3))
    if nan:
        q[0, 0, 0, 0] = float("nan")
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    return q, k, v, attention_mask(torch.randn(2, 6, 6, generator=g, requires_grad=True), pad, torch.float32)


def test_auto_recomputes_a_failing_kernel_call_on_sdpa_and_records_the_switch(fresh_switches, monkeypatch, caplog,
                                                                              tmp_path):
    """A kernel that raises at run time (as a compile, tune or launch error would): auto's call is computed again on
    SDPA (equal to SDPA's output without dropout), the configuration is switched for the process with one warning
    line, later calls go to SDPA without trying the kernel; an explicit triton still raises. The switch travels in
    the model's state dict: a fresh process state loading it takes SDPA for that configuration at once."""
    from tupe_core.kernels import triton_attention

    calls = []

    def raising(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("triton.runtime.errors.OutOfResources: shared memory\nmore lines")

    monkeypatch.setattr(triton_attention, "biased_attention", raising)
    q, k, v, mask = attention_inputs()
    want, _ = attend(q, k, v, mask, SCALE, Dropout(0.0), "sdpa")
    with caplog.at_level(logging.INFO, logger="tupe_core.attend"):
        for _ in range(3):
            got, weights = attend(q, k, v, mask, SCALE, Dropout(0.0), "triton", fall_back=True)
            assert torch.equal(got, want) and weights is None
    assert len(calls) == 1
    config = attend_module.triton_config("cpu", torch.float32, per_sequence=False, dropout=False)
    why = "it failed at run time (RuntimeError: triton.runtime.errors.OutOfResources: shared memory); this call ran again on SDPA"
    assert fresh_switches == {config: why}
    assert [r.getMessage() for r in caplog.records] == [
        f"--tupe-attention auto: SDPA from now on for cpu float32, shared bias, dropout off: {why}"]
    with pytest.raises(RuntimeError, match="OutOfResources"):
        attend(q, k, v, mask, SCALE, Dropout(0.0), "triton")

    dropout = Dropout(0.1).train()  # dropout on: another configuration, its recomputation's mask drawn anew
    attend(q, k, v, mask, SCALE, dropout, "triton", fall_back=True)
    assert fresh_switches[attend_module.triton_config("cpu", torch.float32, False, True)].endswith(
        "this call ran again on SDPA (its dropout mask drawn anew)")

    model = build("tupe_r_tiny")
    state = model.state_dict()
    record = attend_module.fallback_record()
    assert [entry["why"] for entry in record] == [why, fresh_switches[attend_module.triton_config(
        "cpu", torch.float32, False, True)]]
    monkeypatch.setattr(attend_module, "_TRITON_FAILURE", {})  # as a new process that resumes from the checkpoint
    assert "attention_fallback" not in build("tupe_r_tiny").state_dict()  # nothing switched, nothing recorded
    fresh = build("tupe_r_tiny")
    fresh.load_state_dict(state)  # fairseq's load (upgrade_state_dict_named takes the record)
    assert attend_module._TRITON_FAILURE[config] == f"the checkpoint recorded: {why}"
    calls.clear()
    assert torch.equal(attend(q, k, v, mask, SCALE, Dropout(0.0), "triton", fall_back=True)[0], want)
    assert calls == []  # SDPA at once
    assert [e["why"] for e in attend_module.fallback_record()][0] == f"the checkpoint recorded: {why}"


def test_auto_switches_on_a_non_finite_kernel_output_only_where_sdpas_is_finite(fresh_switches, monkeypatch):
    """A kernel that returns NaN where SDPA on the same inputs is finite: the call is SDPA's, the configuration
    switched. Inputs that make SDPA's output NaN too are not the kernel's fault: no switch."""
    from tupe_core.kernels import triton_attention

    monkeypatch.setattr(triton_attention, "biased_attention", lambda q, *args, **kwargs: torch.full_like(q, float("nan")))
    q, k, v, mask = attention_inputs(nan=True)
    got, _ = attend(q, k, v, mask, SCALE, Dropout(0.0), "triton", fall_back=True)
    assert got.isnan().all() and fresh_switches == {}
    q, k, v, mask = attention_inputs()
    got, _ = attend(q, k, v, mask, SCALE, Dropout(0.0), "triton", fall_back=True)
    assert torch.equal(got, attend(q, k, v, mask, SCALE, Dropout(0.0), "sdpa")[0])
    assert list(fresh_switches.values()) == ["its output was not finite where SDPA's is; this call ran again on SDPA"]


def test_data_parallel_ranks_take_every_switch_any_of_them_made(fresh_switches):
    """What the ranks all-reduce at each update (tupe_roberta.agree_on_fallbacks): one flag per configuration auto can
    take the kernel for; after the max, a rank that saw no failure switches too, and its choice then says why."""
    rank0 = attend_module.fallback_flags(torch.device("cpu"))
    attend_module.switch_to_sdpa(attend_module.triton_config("cuda", torch.bfloat16, True, True), "it failed")
    rank1 = attend_module.fallback_flags(torch.device("cpu"))
    assert rank0.tolist() == [0] * 8 and rank1.sum() == 1
    fresh_switches.clear()  # rank 0's view
    attend_module.take_fallback_flags(torch.maximum(rank0, rank1))
    (config, why), = fresh_switches.items()
    assert str(config) == "cuda bfloat16, per-sequence bias, dropout on" and why.startswith("another data-parallel")
