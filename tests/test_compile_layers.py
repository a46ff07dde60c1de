"""``--compile-layers``: every encoder layer (an ELECTRA generator's too) ``torch.compile``'d at the first training
forward, computing what the plain layers compute; evaluation never compiles. (Inductor on CPU: the first call
compiles C++, tens of seconds; whether it pays on a GPU is measured by ``bench/bench_train_step.py --compile``.)"""
from __future__ import annotations

import argparse

import torch

from model_utils import PAD, build, tokens
from tupe_plugin.models.electra import ElectraModel
from tupe_plugin.models.tupe_roberta import TupeRobertaModel

NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)


def electra(compile_layers: bool) -> ElectraModel:
    return ElectraModel.from_discriminator(build("tupe_r_tiny", seed=3, compile_layers=compile_layers, **NO_DROPOUT), 0)


def encoders(model):
    return [model.encoder.sentence_encoder, model.generator.sentence_encoder]


def test_compiled_layers_train_as_the_plain_ones(starts_process):  # inductor runs the C++ compiler
    x = tokens(2, 20, seed=1)
    x[1, 15:] = PAD
    targets = torch.full_like(x, PAD)
    targets[:, 3:6] = x[:, 3:6]  # three masked tokens a row
    out = {}
    for compiled in (False, True):
        model = electra(compiled).train()
        torch.manual_seed(5)  # the generator's samples
        o = model(x, targets=targets)
        (o.gen_logits.float().logsumexp(-1).sum() + o.disc_logits.float().sum()).backward()
        assert all(e.layers_compiled == compiled for e in encoders(model))
        assert all((layer._compiled_call_impl is not None) == compiled for e in encoders(model) for layer in e.layers)
        out[compiled] = (o.gen_logits.detach(), o.disc_logits.detach(),
                         {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, list(model.state_dict()))
    (g0, d0, grads0, keys0), (g1, d1, grads1, keys1) = out[False], out[True]
    torch.testing.assert_close(g1, g0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d1, d0, rtol=1e-5, atol=1e-5)
    assert grads1.keys() == grads0.keys()
    for name in grads0:
        torch.testing.assert_close(grads1[name], grads0[name], rtol=1e-4, atol=1e-6, msg=name)
    # the compiled model's state_dict keeps its names (nn.Module.compile wraps in place: no _orig_mod), so its
    # checkpoints load as any other
    assert keys1 == keys0


def test_evaluation_never_compiles_and_the_option_defaults_off():
    model = electra(True).eval()
    with torch.no_grad():
        model(tokens(2, 12, seed=1), features_only=True)
    assert not any(e.layers_compiled for e in encoders(model))
    parser = argparse.ArgumentParser()
    TupeRobertaModel.add_args(parser)
    assert parser.parse_args([]).compile_layers is False and parser.parse_args(["--compile-layers"]).compile_layers
    assert build("tupe_r_tiny").args.compile_layers is False


def test_eager_checks_run_eagerly_under_compile_and_importing_the_plugin_loads_no_dynamo(starts_process):
    """tupe_core.attend.run_eagerly (the Triton path's first-use check and its fallback): outside a compiled graph
    the function runs as it is; called from a torch.compile'd function it runs eagerly (not traced: its Python side
    effect happens at every call, it sees no compilation), as torch.compiler.disable did. And what that decorator
    cost every process that reads the registry without training (pretrain.sh's launcher, the exports): importing
    the plugin loads no torch._dynamo (~1 s; a training's torch.optim loads it when it builds the optimizer)."""
    import subprocess
    import sys

    from tupe_core.attend import run_eagerly

    seen = []

    @run_eagerly
    def check(x: torch.Tensor) -> bool:
        seen.append(torch.compiler.is_compiling())
        return float(x.sum().item()) > 0  # a data-dependent Python branch: not traceable without a break

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        return y + 1 if check(y) else y - 1

    compiled = torch.compile(f, backend="eager")
    x = torch.ones(3)
    assert torch.equal(compiled(x), x * 3) and torch.equal(compiled(-x), -x * 3)
    assert seen == [False, False] and check(x) and seen == [False, False, False]
    p = subprocess.run([sys.executable, "-c", "import sys, tupe_plugin; print('torch._dynamo' in sys.modules)"],
                       capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "False", p.stderr[-2000:]
