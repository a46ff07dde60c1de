"""Whole models on ``--tupe-attention triton`` (our fused kernel, in Triton's interpreter on CPU) equal the explicit
path at attention dropout 0: every variant whose positional signal is a bias (shared, per layer, or DeBERTa's per
sequence), and two without one; in-process models (features and every parameter's gradient, right padding, T not a
multiple of the kernel's block) and a real ``fairseq-train`` run (the losses it logs).

Triton reads TRITON_INTERPRET when it is first imported, and other test modules may import it first: every case
runs in a fresh process with the variable set."""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import PRETRAIN_ARGS, fairseq_train_in_one_process, run, train_losses
from tupe_tools.errors import last_error
from references import reference
from tupe_core.base import BIAS, LAYER_BIAS
from tupe_core.registry import VARIANTS

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]')")

# every variant whose encoding enters as a bias (shared or per layer, as its reference declares), and DeBERTa's
# per-sequence bias from its own block
BIAS_VARIANTS = [name for name in VARIANTS if reference(name).ENTERS in (BIAS, LAYER_BIAS)] + ["deberta_rel"]
OTHERS = ["bert_a", "rope"]  # no bias: the kernel with bias None

COMPARE = r"""
import json, sys, torch
sys.path.insert(0, "tests")
from model_utils import build, tokens
out = {}
for variant in sys.argv[1:]:
    x = tokens(2, 20, seed=2)
    x[1, 13:] = 1  # right padding; T = 20 is not a multiple of the interpreter's block (16)
    keep = x.ne(1)
    weight = torch.randn(int(keep.sum()), 64, generator=torch.Generator().manual_seed(3))
    got = {}
    for path in ("triton", "explicit"):
        model = build(f"{variant}_tiny", seed=7, tupe_attention=path, dropout=0.0, attention_dropout=0.0,
                      activation_dropout=0.0, encoder_layers=1).train()  # one layer: the interpreter is slow
        features, _ = model(x, features_only=True)
        (features[keep] * weight).sum().backward()
        got[path] = (features[keep].detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    (ft, gt), (fe, ge) = got["triton"], got["explicit"]
    # the largest error over the largest entry; a gradient that is zero up to rounding (k_proj.bias: a constant per
    # row of logits) is measured against a thousandth of the largest gradient instead
    floor = 1e-3 * max(float(g.abs().max()) for g in ge.values())
    rel = lambda a, b, floor=0.0: float((a - b).abs().max()) / max(float(b.abs().max()), floor)
    grads = max(rel(gt[n], ge[n], floor) for n in ge)
    out[variant] = {"features": rel(ft, fe), "grads": grads, "same_grads": gt.keys() == ge.keys()}
print(json.dumps(out))
"""


def interpreted_env() -> dict:
    return dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")


def test_whole_models_on_triton_equal_the_explicit_path():
    p = run([sys.executable, "-c", COMPARE, *BIAS_VARIANTS, *OTHERS], env=interpreted_env())
    errors = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(errors) == set(BIAS_VARIANTS + OTHERS)
    for variant, e in errors.items():
        assert e["same_grads"] and e["features"] <= 1e-4 and e["grads"] <= 1e-4, (variant, e)


def test_fairseq_train_on_triton_logs_the_explicit_paths_losses(lm_bin, tmp_path):
    """Every bias variant as fairseq-train builds and trains it (one layer, two sequences a batch, no validation:
    the interpreter is slow), 2 updates without dropout: the same losses as --tupe-attention explicit (all runs
    in one process)."""
    args = [str(lm_bin), *PRETRAIN_ARGS, "--encoder-layers", "1", "--max-update", "2", "--log-interval", "1",
            "--dropout", "0", "--attention-dropout", "0", "--batch-size", "2", "--disable-validation", "--no-save"]
    logs = fairseq_train_in_one_process(
        {f"{variant}.{path}": [*args, "--arch", f"{variant}_tiny", "--tupe-attention", path]
         for variant in BIAS_VARIANTS for path in ("triton", "explicit")}, tmp_path, env=interpreted_env())
    for name, log in logs.items():
        variant, path = name.split(".")
        assert f"tupe_attention='{path}'" in log and f"arch='{variant}_tiny'" in log  # fairseq's own argument log
    for variant in BIAS_VARIANTS:
        triton, explicit = train_losses(logs[f"{variant}.triton"]), train_losses(logs[f"{variant}.explicit"])
        assert len(triton) == 2, variant
        assert triton == pytest.approx(explicit, abs=2e-3), variant


def test_triton_without_cuda_or_the_interpreter_is_refused_at_model_build(lm_bin, tmp_path):
    """No CUDA device, TRITON_INTERPRET unset: fairseq-train stops at the model's build with one error line that says
    why and what to pass instead, before any step (it was a traceback from the kernel's launch at the first one)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    args = [str(lm_bin), *PRETRAIN_ARGS, "--arch", "tupe_r_tiny", "--encoder-layers", "1", "--max-update", "2",
            "--disable-validation", "--no-save", "--tupe-attention", "triton"]
    log = fairseq_train_in_one_process({"triton": args}, tmp_path, failing=["triton"], env=env)["triton"]
    assert last_error(log) == (
        "error: --tupe-attention triton: our Triton kernel cannot run here (no CUDA device (or --cpu), and not in "
        "Triton's interpreter: TRITON_INTERPRET=1 is not set); it runs on a CUDA device, or on the CPU in Triton's "
        "interpreter (TRITON_INTERPRET=1, slow: for tests). Use --tupe-attention auto (triton where it runs) or sdpa")
    assert "train_inner" not in log and "num. shared model params" not in log
