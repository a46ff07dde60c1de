"""The sdpa section: every registered variant in fp32, bf16 and fp16, with right padding and an unaligned length:
the SDPA path's output and gradients against the explicit path's, both measured against a float64 reference; which
SDPA kernel each call took, with and without padding; and the GPU pitfalls: every mask handed to SDPA in q's dtype
with aligned strides (also under autocast), and a sequence without real tokens giving finite outputs and gradients
on both paths."""
from __future__ import annotations

import contextlib
import copy
from typing import Dict, Tuple

import torch

from .probes import masks_aligned_on, masks_ok, sdpa_backends, sdpa_calls
from .report import Result
from .settings import Settings

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Largest relative error of the SDPA path: twice the explicit path's (both against float64) plus this floor.
ERROR_FLOOR = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 3e-3}


def set_path(model, path: str) -> None:
    for layer in model.encoder.sentence_encoder.layers:
        layer.self_attn.attention_path = path


def batch(s: Settings, with_empty: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B, T) tokens, <s> first, the second sequence right-padded; ``with_empty`` adds one of padding only."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, 1000, (3, s.sdpa_length), generator=g)
    x[:, 0] = 0
    x[1, s.sdpa_length * 2 // 3:] = 1
    if with_empty:
        x = torch.cat([x, torch.ones(1, s.sdpa_length, dtype=x.dtype)])
    return x.to(s.device), x.ne(1).to(s.device)


def forward_backward(model, x, keep, weight) -> Tuple[torch.Tensor, torch.Tensor]:
    """(features of the real tokens, all gradients flattened), in float64, of ``sum(features * weight)``."""
    model.zero_grad(set_to_none=True)
    features = model(x, features_only=True)[0][keep]
    (features.float() * weight.to(features.device, torch.float32)).sum().backward()
    grads = torch.cat([p.grad.reshape(-1).double() for p in model.parameters() if p.grad is not None])
    return features.detach().double(), grads


def relative(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_dtype(model, fp32_model, reference, s: Settings, name: str, weight) -> Dict[str, object]:
    """``model`` (a copy in dtype ``name``) on both paths against the float64 ``reference`` (features, gradients);
    the backends, the masks SDPA gets (also from ``fp32_model`` under autocast) and the all-padding row."""
    x, keep = batch(s)
    errors = {}
    for path in ("sdpa", "explicit"):
        set_path(model, path)
        out, grad = forward_backward(model, x, keep, weight)
        errors[path] = (relative(out, reference[0]), relative(grad, reference[1]))
    set_path(model, "sdpa")
    with sdpa_calls() as seen:
        padded = sdpa_backends(lambda: forward_backward(model, x, keep, weight))
    dtype = DTYPES[name]
    with sdpa_calls() as seen_autocast, torch.autocast(s.device, dtype=dtype, enabled=dtype != torch.float32):
        forward_backward(fp32_model, x, keep, weight)  # float32 weights under autocast (fairseq --amp)
    same_dtype, aligned = masks_ok(seen + seen_autocast)
    unpadded = x[[0, 2]]  # no padding: no mask for the variants without a positional bias
    ones = torch.ones(int(unpadded.ne(1).sum()), weight.size(1))
    plain = sdpa_backends(lambda: forward_backward(model, unpadded, unpadded.ne(1), ones))
    x_empty, _ = batch(s, with_empty=True)
    finite = True
    for path in ("sdpa", "explicit"):
        set_path(model, path)
        model.zero_grad(set_to_none=True)
        out = model(x_empty, features_only=True)[0]
        out.float().sum().backward()
        finite &= bool(torch.isfinite(out).all()) and all(
            bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    floor = ERROR_FLOOR[name]
    accurate = all(errors["sdpa"][i] <= 2 * errors["explicit"][i] + floor for i in (0, 1))
    return {"errors": errors, "backend_padded": padded, "backend_no_padding": plain, "mask_in_q_dtype": same_dtype,
            "mask_aligned": aligned, "all_padding_row_finite": finite,
            "ok": accurate and same_dtype and aligned and finite}


def run(r: Result, s: Settings, args) -> None:
    # the dry run on CPU gets the alignment CUDA gets
    with masks_aligned_on("cpu") if s.device == "cpu" else contextlib.nullcontext():
        check_variants(r, s, args.variants)


def check_variants(r: Result, s: Settings, variants) -> None:
    from bench_train_step import build

    no_dropout = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    x, keep = batch(s)
    r.say(f"{s.sdpa_size} size with {s.sdpa_layers} layers, {x.size(0)} sequences of T={s.sdpa_length} (one right-padded); relative error "
          "= ||a - ref|| / ||ref|| against the explicit path in float64, of the real tokens' features and of all "
          "gradients; pass: SDPA's error <= 2 x the explicit path's + a floor (fp32 1e-5, bf16 2e-2, fp16 3e-3).\n")
    r.say("| variant | dtype | features: SDPA / explicit | gradients: SDPA / explicit | backend, padded | "
          "backend, no padding | mask in q's dtype | mask aligned | all-padding row finite | result |")
    r.say("|---|---|---|---|---|---|---|---|---|---|")
    failures = []
    for variant in variants:
        ref_model = build(f"{variant}_{s.sdpa_size}", s.sdpa_size, s.sdpa_length, s.device,
                          encoder_layers=s.sdpa_layers, **no_dropout)
        weight = torch.randn(int(keep.sum()), ref_model.encoder.sentence_encoder.embed_tokens.embedding_dim,
                             generator=torch.Generator().manual_seed(1))
        fp64 = copy.deepcopy(ref_model).double()
        set_path(fp64, "explicit")
        ref_out, ref_grad = forward_backward(fp64, x, keep, weight)
        del fp64
        for name, dtype in DTYPES.items():
            found = check_dtype(copy.deepcopy(ref_model).to(dtype), ref_model, (ref_out, ref_grad), s, name, weight)
            failures += [] if found["ok"] else [f"{variant} {name}"]
            e = found["errors"]
            r.say(f"| {variant} | {name} | {e['sdpa'][0]:.1e} / {e['explicit'][0]:.1e} | {e['sdpa'][1]:.1e} / "
                  f"{e['explicit'][1]:.1e} | {found['backend_padded']} | {found['backend_no_padding']} | "
                  f"{found['mask_in_q_dtype']} | {found['mask_aligned']} | {found['all_padding_row_finite']} | "
                  f"{'ok' if found['ok'] else 'FAILED'} |")
            r.record(variant, name, **{f"{part}_rel_error_{path}": e[path][i] for path in ("sdpa", "explicit")
                                       for i, part in enumerate(("features", "grads"))})
            r.record(variant, name, **{metric: found[metric] for metric in (
                "backend_padded", "backend_no_padding", "mask_in_q_dtype", "mask_aligned", "all_padding_row_finite",
                "ok")})
        del ref_model
        if s.device == "cuda":
            torch.cuda.empty_cache()
    if failures:
        r.fail(", ".join(failures))
