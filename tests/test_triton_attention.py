"""``biased_attention`` (tupe_core/kernels): our Triton kernels against a float64 reference written here
(matmul, + bias, padded keys at the padding value, softmax, dropout, matmul), in Triton's interpreter on CPU
tensors: outputs, dq, dk, dv and the bias gradient; right padding, a sequence without a real key, T not a
multiple of the block (16 in the interpreter), batch-shared, permuted, overlapping and per-sequence biases,
fp16/bf16, and the in-kernel dropout (reproducible, keeps 1 - p, unbiased, the same mask in the backward).

Triton reads TRITON_INTERPRET when it is first imported, so this module sets it before anything imports triton.
If triton was imported earlier in this process (another test module compiled something; on a CUDA machine the
variable is left alone, as it would turn torch.compile's kernels into interpreted ones), the cases skip here and
``test_cases_in_a_fresh_process`` runs them in a new interpreter. On CUDA, ``test_kernel_matches_reference_cuda``
runs the compiled kernels at a realistic size.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
from dataclasses import replace

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (by triton_attention below)

from torch.utils import _pytree as pytree  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tupe_core.kernels import triton_attention  # noqa: E402
from tupe_core.kernels.triton_attention import (  # noqa: E402
    Blocks,
    biased_attention,
    draw_dropout_seed,
    dropout_keep_mask,
    effective_dropout,
    kernel_layout,
)

HAS_TRITON = triton_attention.triton is not None
INTERPRETED = HAS_TRITON and triton_attention.triton_available("cpu")
interpreted = pytest.mark.skipif(
    not INTERPRETED,
    reason="triton is not installed (pip install -e '.[test]')" if not HAS_TRITON else
    "triton was imported before TRITON_INTERPRET=1 in this process: test_cases_in_a_fresh_process runs these",
)

# masks.padding_value(torch.float32): the logit of a padded key in the kernels' fp32 logits
PADDING_VALUE = torch.finfo(torch.float32).min / 2
SCALE = 0.3


def reference(q, k, v, bias, padding, keep=None, dropout_p=0.0):
    """float64 attention, the explicit path's ops. A padded key's logit becomes the padding value: the explicit
    path adds the padding value in fp32, where the sum rounds to it (the logit is absorbed; added in float64 the
    logit would survive, and a row without a real key would not be uniform), and its gradient flows as through
    that addition."""
    logits = torch.matmul(q.double() * SCALE, k.double().transpose(-1, -2))  # (B, H, T, T)
    if bias is not None:
        logits = logits + bias.double()
    if padding is not None:
        logits = logits + torch.where(padding[:, None, None, :], PADDING_VALUE - logits.detach(), 0.0)
    weights = torch.softmax(logits, dim=-1)
    if keep is not None:
        weights = weights * keep / (1 - dropout_p)
    return torch.matmul(weights, v.double())


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


@dataclass
class Case:
    B: int
    H: int
    T: int
    D: int
    bias: str  # none | shared (H, T, T) | permuted (T5's (T, T, H) storage) | overlapping (a Hankel view) | per_sequence
    # none | right (sequence 0 ends 5 keys early) | full (and the last sequence has no real key) | left (sequence
    # 0 starts 5 keys before the end: its first key blocks are all padding, then the online softmax restarts)
    padding: str = "none"
    bias_grad: bool = True


def make_bias(case: Case, dtype: torch.dtype, generator: torch.Generator):
    """(leaf, view): the tensor that gets the gradient and the function that makes the bias from it."""
    B, H, T = case.B, case.H, case.T
    if case.bias == "none":
        return None, None
    leaf_shape, view = {
        "shared": ((H, T, T), lambda w: w),
        "permuted": ((T, T, H), lambda w: w.permute(2, 0, 1)),  # strides (1, T * H, H)
        "overlapping": ((H, 2 * T - 1), lambda w: w.unfold(-1, T, 1)),  # bias[h, i, j] = w[h, i + j]
        "per_sequence": ((B, H, T, T), lambda w: w),
    }[case.bias]
    leaf = torch.randn(leaf_shape, generator=generator).to(dtype).requires_grad_(case.bias_grad)
    return leaf, view


def make_padding(case: Case) -> torch.Tensor | None:
    if case.padding == "none":
        return None
    padding = torch.zeros(case.B, case.T, dtype=torch.bool)
    if case.padding == "left":
        padding[0, :case.T - 5] = True
        return padding
    padding[0, case.T - 5:] = True
    if case.padding == "full":
        padding[-1] = True
    return padding


class Allocations(TorchDispatchMode):
    """The element counts (and dtypes) of the new tensors torch ops make while it is active (views and in-place
    writes, e.g. the interpreter's copies into existing storage, make none)."""

    def __init__(self):
        super().__init__()
        self.numels, self.tensors = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func._schema.is_mutable:
            return out
        made = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.numels += [t.numel() for t in made]
        self.tensors += [(t.numel(), t.dtype) for t in made]
        return out


def compare(case: Case, dtype=torch.float32, dropout_p=0.0, device="cpu"):
    """Relative errors of the kernel's output and gradients against the reference, and the tensors made during
    its forward and backward (``Allocations``)."""
    g = torch.Generator().manual_seed(0)
    B, H, T, D = case.B, case.H, case.T, case.D
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    leaf, view = make_bias(case, dtype, g)
    leaf = None if leaf is None else leaf.detach().to(device).requires_grad_(case.bias_grad)
    padding = make_padding(case)
    padding = None if padding is None else padding.to(device)
    grad_out = torch.randn(B, H, T, D, generator=g).to(device, dtype)
    keep = None
    if dropout_p:  # the reference applies the kernel's own mask: the seed biased_attention will draw
        torch.manual_seed(1)
        keep = dropout_keep_mask(draw_dropout_seed(), B, H, T, dropout_p, device)
        torch.manual_seed(1)
    with Allocations() as allocations:
        out = biased_attention(q, k, v, None if leaf is None else view(leaf), padding, SCALE, dropout_p)
        out.backward(grad_out)
    assert out.dtype == dtype and out.shape == q.shape

    ref_leaves = [x.detach().double().requires_grad_(x.requires_grad) for x in (q, k, v)]
    ref_leaf = None if leaf is None else leaf.detach().double().requires_grad_(case.bias_grad)
    ref = reference(*ref_leaves, None if ref_leaf is None else view(ref_leaf), padding, keep, dropout_p)
    ref.backward(grad_out.double())
    errors = {"out": relative_error(out, ref)}
    errors.update({name: relative_error(x.grad, r.grad) for name, x, r in zip("qkv", (q, k, v), ref_leaves)})
    if leaf is not None and case.bias_grad:
        assert leaf.grad.dtype == leaf.dtype and leaf.grad.shape == leaf.shape
        errors["bias"] = relative_error(leaf.grad, ref_leaf.grad)
    elif leaf is not None:
        assert leaf.grad is None
    for name, x in [("out", out), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
        assert torch.isfinite(x).all(), name
    return errors, allocations


CASES = {
    # with tiles of 16 (the interpreter's): T = 12 is one ragged tile, T = 20 and 40 are two and three, ragged
    "shared_bias_right_padding": Case(B=2, H=1, T=20, D=16, bias="shared", padding="right"),
    "left_padding": Case(B=2, H=1, T=20, D=16, bias="shared", padding="left"),
    "no_bias_no_padding": Case(B=2, H=1, T=40, D=8, bias="none"),
    "permuted_bias_sequence_without_keys": Case(B=2, H=2, T=12, D=8, bias="permuted", padding="full"),
    "overlapping_bias_view": Case(B=2, H=1, T=12, D=8, bias="overlapping", padding="right"),
    "per_sequence_bias": Case(B=2, H=2, T=12, D=16, bias="per_sequence", padding="full"),
    "bias_without_grad": Case(B=2, H=1, T=12, D=32, bias="shared", padding="right", bias_grad=False),
    "one_block": Case(B=1, H=1, T=16, D=16, bias="shared"),
}


@interpreted
@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_gradients_match_float64_reference(name):
    case = CASES[name]
    errors, made = compare(case)
    assert max(errors.values()) <= 1e-4, errors
    numels = made.numels
    B, H, T, D = case.B, case.H, case.T, case.D
    if case.bias != "per_sequence" and B > 1 and D < T:
        # nothing (B, H, T, T), forward or backward: the largest new tensors are q's gradient and one (H, T, T) sum
        assert max(numels) <= max(B * H * T * D, H * T * T) < B * H * T * T


@interpreted
def test_bias_gradient_summed_over_groups_of_sequences(monkeypatch):
    """Large batches split the bias-gradient sum over groups of sequences (one set of programs each, summing
    its sequences inside the kernel; the G partial (H, T, T) sums added after): two sequences per group here,
    so the two-group path runs at B = 4, and nothing as large as (B, H, T, T) is made."""
    monkeypatch.setattr(triton_attention, "BIAS_GRAD_SEQUENCES", 2)
    B, H, T, D = 4, 1, 20, 16
    errors, made = compare(Case(B=B, H=H, T=T, D=D, bias="shared", padding="right"))
    numels = made.numels
    assert max(errors.values()) <= 1e-4, errors
    groups, padded = 2, 32  # keys-major, each key's queries padded to a multiple of 16
    assert groups * H * T * padded in numels  # the group sums, made
    assert max(numels) <= max(B * H * T * D, groups * H * T * padded) < B * H * T * T


@interpreted
def test_per_sequence_bias_gradient_is_written_in_the_bias_dtype():
    """DeBERTa's per-sequence terms: their gradient is written by the kernel in the bias's dtype, never through
    a (B, H, T, T) fp32 buffer."""
    case = Case(B=2, H=2, T=20, D=16, bias="per_sequence", padding="right")
    errors, made = compare(case, dtype=torch.float16)
    assert max(errors.values()) <= 5e-3, errors
    full = case.B * case.H * case.T * case.T
    assert (full, torch.float16) in made.tensors and (full, torch.float32) not in made.tensors


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (pip install -e '.[test]')")
def test_bias_gradient_groups_fill_two_waves_of_an_h100():
    """B32 H12 T512 on 132 SMs (2 dK/dV programs each): 6 sequences a group, 6 groups, 576 programs = 2.2 waves
    (8 a group gave 384 = 1.45); a small batch is not split past one sequence a group; without an SM count (the
    interpreter) groups of 8."""
    B, H, T, D = 32, 12, 512, 64
    meta = lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, device="meta", dtype=dtype)  # noqa: E731
    q, bias, stats = meta(B, H, T, D), meta(H, T, T), meta(B * H, T, dtype=torch.float32)
    blocks = triton_attention.HALF_BLOCKS
    (_, dkdv), _ = triton_attention.backward_launches(q, q, q, bias, None, q, q, stats, stats, None, 0.125, 0.0,
                                                      True, blocks, sms=132)
    programs = dkdv.grid[0] * dkdv.grid[1] * dkdv.grid[2]
    assert dkdv.grid == (T // blocks.dkdv_n, H, 6) and programs >= 2 * 2 * 132
    assert triton_attention.sequences_per_program(B, 96, 132) == 6
    assert triton_attention.sequences_per_program(4, 96, 132) == 1
    assert triton_attention.sequences_per_program(B, 96, 0) == 8


@interpreted
def test_first_use_check_passes_the_kernel_and_catches_a_wrong_or_failing_one():
    """self_check: our kernel passes; one that reads the bias transposed is named by what differs; one that raises is named
    by its error, in one line (what auto then logs before keeping SDPA)."""
    assert triton_attention.self_check("cpu", torch.float32) is None

    def transposed_bias(q, k, v, bias, pad, scale, p, **options):
        return biased_attention(q, k, v, bias.transpose(-1, -2), pad, scale, p, **options)

    def failing(*args, **options):
        raise RuntimeError("PassManager::run failed\nmore lines")

    assert triton_attention.self_check("cpu", torch.float32, transposed_bias).startswith("its output differs from")
    assert triton_attention.self_check("cpu", torch.float32, failing) == "RuntimeError: PassManager::run failed"


# the training call the check copies: 4 sequences of 3 heads, T = 48 (a ragged key block of 64), head dim 16
TRAINING_Q = torch.zeros(4, 3, 48, 16)


def training_like(per_sequence: bool):
    return TRAINING_Q, torch.zeros((4, 3, 48, 48) if per_sequence else (3, 48, 48))


@interpreted
@pytest.mark.parametrize("per_sequence", [False, True], ids=["shared", "per_sequence"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.1], ids=["no_dropout", "dropout"])
def test_first_use_check_runs_the_configuration_training_runs(per_sequence, dropout_p, monkeypatch):
    """The check of each (bias kind, dropout) configuration passes our kernel, at the training call's T and head dim,
    its shared bias's gradient summed 2 sequences a dK/dV program (a last group of one); a kernel wrong only in that
    configuration's part fails it: dropout drawn from another seed than the one the reference re-draws, or the
    per-sequence biases handed to the wrong sequences."""
    launched = []
    real_backward = triton_attention.backward_launches

    def spy(*args, **kwargs):
        launches, grads = real_backward(*args, **kwargs)
        launched.append((launches[1].grid, launches[1].args[-1]))  # the dK/dV grid and its sequences per program
        return launches, grads

    monkeypatch.setattr(triton_attention, "backward_launches", spy)
    check = dict(per_sequence=per_sequence, dropout_p=dropout_p, like=training_like(per_sequence))
    assert triton_attention.self_check("cpu", torch.float32, **check) is None
    (grid, per_program), = launched
    # T 48: one key block; 2 heads; the 3 sequences in 2 groups (2 + 1), or one program each for a per-sequence bias
    assert grid == (1, 2, 3 if per_sequence else 2) and per_program == (1 if per_sequence else 2)

    def other_seed(*args, **options):
        draw_dropout_seed()  # the kernel draws the next seed, not the one the check re-draws for its reference
        return biased_attention(*args, **options)

    def sequences_swapped(q, k, v, bias, pad, scale, p, **options):
        return biased_attention(q, k, v, bias.flip(0), pad, scale, p, **options)

    if dropout_p and not per_sequence:
        assert triton_attention.self_check("cpu", torch.float32, other_seed, **check).startswith("its output differs")
    if per_sequence and not dropout_p:
        assert triton_attention.self_check("cpu", torch.float32, sequences_swapped, **check).startswith(
            "its output differs")


@interpreted
def test_first_use_check_takes_the_tiles_the_tuner_chose_for_the_training_call(monkeypatch):
    """The check first asks the tuner for the tiles at the training call's full shape (so that the tuner, which keeps
    one choice per T, never tunes at the check's small batch), then runs with the tiles it gave; a tuner that
    raises fails the check, in one line."""
    asked, chosen = [], replace(triton_attention.INTERPRETER_BLOCKS, forward_m=32, dq_m=32, dkdv_m=32)
    ran_with = []
    real_forward = triton_attention.forward_launch

    def tuner(q, k, v, bias, pad, scale, dropout_p, bias_grad):
        asked.append((tuple(q.shape), tuple(bias.shape), pad is not None, bias_grad))
        return chosen

    def forward(q, k, v, bias, pad, scale, dropout_p, seed, blocks):
        ran_with.append(blocks)
        return real_forward(q, k, v, bias, pad, scale, dropout_p, seed, blocks)

    monkeypatch.setattr(triton_attention, "tuned_blocks", tuner)
    monkeypatch.setattr(triton_attention, "forward_launch", forward)
    assert triton_attention.self_check("cpu", torch.float32, like=training_like(False)) is None
    assert asked == [((4, 3, 48, 16), (3, 48, 48), True, True), ((3, 2, 48, 16), (2, 48, 48), True, True)]
    assert ran_with == [chosen]

    def raising_tuner(*args):
        raise RuntimeError("autotune: no candidate compiled\nmore")

    monkeypatch.setattr(triton_attention, "tuned_blocks", raising_tuner)
    assert triton_attention.self_check("cpu", torch.float32, like=training_like(False)) == (
        "RuntimeError: autotune: no candidate compiled")


@interpreted
def test_a_configuration_whose_check_fails_runs_on_sdpa_with_the_reason(monkeypatch):
    """auto's kernel call for a configuration that failed its check (a kernel reading the bias transposed) is never
    made: the call runs on SDPA; a configuration that passed runs the kernel (the real one here)."""
    from tupe_core import attend as attend_module
    from tupe_core.attend import Dropout, attend, triton_failure
    from tupe_core.masks import attention_mask

    monkeypatch.setattr(attend_module, "_TRITON_FAILURE", {})
    monkeypatch.setattr(attend_module, "_FINITE_SEEN", set())
    calls = []

    def transposed_bias(q, k, v, bias, pad, scale, p, **options):
        calls.append(q.shape)
        return biased_attention(q, k, v, bias.transpose(-1, -2), pad, scale, p, **options)

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 48, 16, generator=g) for _ in range(3))
    mask = attention_mask(torch.randn(3, 48, 48, generator=g, requires_grad=True), None, torch.float32)
    want, _ = attend(q, k, v, mask, SCALE, Dropout(0.0), "sdpa")
    kernel, _ = attend(q, k, v, mask, SCALE, Dropout(0.0), "triton")
    assert not torch.equal(kernel, want)  # the kernel's sums differ from SDPA's in their last bits
    monkeypatch.setattr(triton_attention, "biased_attention", transposed_bias)
    why = triton_failure(torch.device("cpu"), torch.float32, like=(q, mask.bias))
    assert why.startswith("its first-use check failed (its output differs from the same math in fp32 torch by")
    calls.clear()
    got, _ = attend(q, k, v, mask, SCALE, Dropout(0.0), "triton", fall_back=True)
    assert calls == [] and torch.equal(got, want)
    with pytest.raises(AssertionError):  # an explicit --tupe-attention triton runs the kernel: here a wrong one
        torch.testing.assert_close(attend(q, k, v, mask, SCALE, Dropout(0.0), "triton")[0], want)


@interpreted
def test_fp16_matches_reference():
    """fp16 inputs and bias, fp32 sums: within fp16's rounding of the inputs and outputs. (bf16 runs on CUDA
    only: Triton 3.9's interpreter multiplies bf16 tl.dot operands as their raw 16-bit integers.)"""
    errors, _ = compare(Case(B=2, H=1, T=12, D=16, bias="shared", padding="full"), dtype=torch.float16)
    assert max(errors.values()) <= 5e-3, errors


@interpreted
def test_sequence_without_real_keys_averages_values():
    """A row whose keys are all padding: uniform weights (the explicit path's fp32 result), never NaN."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 20, 16, generator=g) * 10 for _ in range(3))
    bias = torch.randn(1, 20, 20, generator=g) * 10
    out = biased_attention(q, k, v, bias, torch.ones(1, 20, dtype=torch.bool), SCALE, 0.0)
    torch.testing.assert_close(out, v.mean(dim=2, keepdim=True).expand_as(out))


@interpreted
@pytest.mark.parametrize("T", [20, 100])  # one key block; two, the second ragged (64-key blocks)
def test_dropout_gradients_match_reference_with_the_same_mask(T):
    errors, _ = compare(Case(B=2, H=2, T=T, D=16, bias="shared", padding="right"), dropout_p=0.25)
    assert max(errors.values()) <= 1e-4, errors


def identity_attention(B, H, T, dropout_p, seed):
    """With q = 0 every weight is 1 / T, and with v = I (D = T) the output is the dropped weight matrix itself:
    out[b, h, i, j] = keep[b, h, i, j] / (T (1 - p))."""
    q = torch.zeros(B, H, T, T)
    v = torch.eye(T).expand(B, H, T, T)
    torch.manual_seed(seed)
    return biased_attention(q, q, v, None, None, 1.0, dropout_p)


@interpreted
@pytest.mark.parametrize("p", [0.25, 0.1])
def test_dropout_is_reproducible_and_keeps_one_minus_p(p):
    """0.25 is 64/256 exactly; 0.1 is drawn as 26/256 = 0.1016 (8-bit thresholds), and scaled for that."""
    B, H, T = 1, 2, 32
    p_eff = round(p * 256) / 256
    assert effective_dropout(p) == p_eff
    out = identity_attention(B, H, T, p, seed=0)
    torch.testing.assert_close(identity_attention(B, H, T, p, seed=0), out, rtol=0, atol=0)  # same seed, same mask
    assert not torch.equal(identity_attention(B, H, T, p, seed=1), out)
    kept = out > 0
    torch.manual_seed(0)
    assert torch.equal(kept, dropout_keep_mask(draw_dropout_seed(), B, H, T, p, "cpu"))  # the helper's mask
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (T * (1 - p_eff))))  # 1 / (1 - p_eff)
    # kept fraction over B * H * T * T = 2048 draws: 1 - p within 4 standard deviations (0.038)
    assert abs(kept.float().mean().item() - (1 - p_eff)) < 4 * (p_eff * (1 - p_eff) / kept.numel()) ** 0.5


MASK32 = 0xFFFFFFFF


def philox4x32(key: int, counter, rounds: int = 7):
    """Philox-4x32 (Salmon et al., SC 2011; Random123's philox4x32_R), written from its definition: a round maps
    the counter (c0, c1, c2, c3) to (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)), and the key
    (k0, k1) is bumped by the Weyl constants between rounds."""
    c0, c1, c2, c3 = counter
    k0, k1 = key & MASK32, key >> 32
    for _ in range(rounds):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


@interpreted
def test_dropout_mask_is_the_documented_philox_draw():
    """Every weight's keep decision, recomputed here from Philox's definition and the documented grouping: weight
    (r, c) of sequence b, head h belongs to group ((r // 16 * 8 + r % 8) * ceil(T / 64) + c // 64) * 8 + c % 8,
    drawn with key ``seed`` and counter (group, b * H + h, 0, 0); it is kept when byte (r // 8 % 2) * 8 + c // 8 % 8
    of the draw (the four words in order, each little-endian) is >= round(256 p). T = 80: a ragged second group
    of rows and of keys."""
    B, H, T, p, seed = 1, 2, 80, 0.3, 1234
    threshold = round(256 * p)
    keep = dropout_keep_mask(seed, B, H, T, p, "cpu")
    expected = torch.zeros(B, H, T, T, dtype=torch.bool)
    draws = {}
    for h in range(H):
        for r in range(T):
            for c in range(T):
                group = ((r // 16 * 8 + r % 8) * -(-T // 64) + c // 64) * 8 + c % 8
                words = draws.setdefault((h, group), philox4x32(seed, (group, h, 0, 0)))
                n = (r // 8 % 2) * 8 + c // 8 % 8
                expected[0, h, r, c] = (words[n // 4] >> (8 * (n % 4))) & 0xFF >= threshold
    assert torch.equal(keep, expected)


@interpreted
def test_dropout_decisions_are_uncorrelated():
    """Correlations between keep decisions that share a group, sit side by side, or belong to another head or
    seed: each within 4 standard errors of 0 (1 / sqrt(n) for n pairs), over 2 x 128 x 128 draws."""
    B, H, T, p = 1, 2, 128, 0.1
    keep = dropout_keep_mask(7, B, H, T, p, "cpu").double()
    other_seed = dropout_keep_mask(8, B, H, T, p, "cpu").double()

    def correlation(x, y):
        x, y = x.flatten() - x.mean(), y.flatten() - y.mean()
        return ((x * y).sum() / (x.norm() * y.norm())).item(), x.numel()

    pairs = {
        "next key": (keep[..., :-1], keep[..., 1:]),
        "key + 8 (same group)": (keep[..., :-8], keep[..., 8:]),
        "next query": (keep[..., :-1, :], keep[..., 1:, :]),
        "query + 8 (same group)": (keep[..., :-8, :], keep[..., 8:, :]),
        "other head": (keep[:, 0], keep[:, 1]),
        "other seed": (keep, other_seed),
    }
    for name, (x, y) in pairs.items():
        rho, n = correlation(x, y)
        assert abs(rho) < 4 / n ** 0.5, (name, rho)


def run_kernels(blocks, q, k, v, bias, pad, dout, p=0.2, seed=99):
    """The forward and both backward kernels with these tiles: out, the keep mask and dq, dk, dv, dbias."""
    launch, (out, row_max, row_sum, keep) = triton_attention.forward_launch(q, k, v, bias, pad, SCALE, p, seed, blocks)
    launch()
    launches, grads = triton_attention.backward_launches(q, k, v, bias, pad, out, dout, row_max, row_sum, keep, SCALE,
                                                         p, True, blocks)
    for launch in launches:
        launch()
    return out, keep, grads


@interpreted
def test_tiles_change_neither_the_dropout_mask_nor_the_result():
    """Two tilings (16 or 32 queries a block, 64 or 128 keys): the same keep mask bit for bit, the same output and
    gradients up to the order of fp32 sums. What lets the autotuner pick tiles freely."""
    g = torch.Generator().manual_seed(3)
    B, H, T, D = 2, 2, 100, 16
    q, k, v, dout = (torch.randn(B, H, T, D, generator=g) for _ in range(4))
    bias = torch.randn(H, T, T, generator=g)
    pad = torch.zeros(B, T, dtype=torch.uint8)
    pad[0, 70:] = 1
    small = triton_attention.INTERPRETER_BLOCKS
    large = replace(small, forward_m=32, forward_n=128, dq_m=32, dq_n=128, dkdv_m=32, dkdv_n=128)
    out_a, keep_a, grads_a = run_kernels(small, q, k, v, kernel_layout(bias), pad, dout)
    out_b, keep_b, grads_b = run_kernels(large, q, k, v, kernel_layout(bias), pad, dout)
    assert torch.equal(keep_a, keep_b)
    torch.testing.assert_close(out_a, out_b, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_a, grads_b):  # dq, dk, dv, and the bias gradient's group sums (one group of 2 here)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@interpreted
def test_tune_takes_each_kernels_fastest_tiles_and_skips_failing_ones():
    """tune times each kernel's candidates in turn with the timer it is given (here: a made-up time per tile
    size, so the answer is known; on CUDA, CUDA events), skips a candidate whose launch fails, and keeps the
    start's tiles for a kernel where every candidate failed."""
    kernels = triton_attention._kernels()
    prefer = {kernels.attention_forward_kernel: 32, kernels.attention_backward_dq_kernel: 16,
              kernels.attention_backward_dkdv_kernel: 32}
    timed = []

    def timer(launch):
        m = launch.constexprs["BLOCK_M"]
        timed.append((launch.kernel, m))
        if m == 48:
            raise RuntimeError("out of resources")
        launch()
        return abs(m - prefer[launch.kernel])

    B, H, T, D = 2, 1, 40, 16
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    bias = kernel_layout(torch.randn(H, T, T))
    start = triton_attention.INTERPRETER_BLOCKS
    tiles = ((16, 64, 1), (32, 64, 1), (48, 64, 1))
    chosen = triton_attention.tune(q, k, v, bias, None, SCALE, 0.1, True, start, tiles, tiles,
                                   [(m, n, w, 1) for m, n, w in tiles], timer)
    assert (chosen.forward_m, chosen.dq_m, chosen.dkdv_m) == (32, 16, 32)
    assert len(timed) == 9 and {m for _, m in timed} == {16, 32, 48}
    failing = triton_attention.tune(q, k, v, bias, None, SCALE, 0.1, True, start, ((48, 64, 1),), ((48, 64, 1),),
                                    ((48, 64, 1, 1),), timer)
    assert failing == start


def test_tiles_hold_whole_dropout_groups():
    with pytest.raises(ValueError, match="16 queries x 64 keys"):
        Blocks(forward_m=128, forward_n=32, forward_warps=8, dq_m=128, dq_n=64, dq_warps=8, dkdv_m=32, dkdv_n=64,
               dkdv_warps=4)


def test_bias_reaches_the_kernel_as_aligned_rows():
    """T5's permuted view, an offset view (TUPE-A's [CLS] reset) and T not a multiple of 16 are copied once into
    rows padded to 16 elements (same values, gradient flowing back); a bias already laid out so is not copied."""
    H, T = 2, 20
    permuted = torch.randn(T, T, H, requires_grad=True)
    offset = torch.randn(H, T + 1, T + 1)[:, 1:, 1:]
    for bias in (permuted.permute(2, 0, 1), offset):
        laid = kernel_layout(bias)
        assert laid.stride(-1) == 1 and all(s % 16 == 0 for s in laid.stride()[:-1]), laid.stride()
        assert torch.equal(laid, bias)
    kernel_layout(permuted.permute(2, 0, 1)).sum().backward()
    assert torch.equal(permuted.grad, torch.ones_like(permuted))
    aligned = torch.randn(H, 32, 32)
    assert kernel_layout(aligned) is aligned


@interpreted
def test_dropout_mean_over_seeds_is_the_output_without_dropout():
    """Unbiased: each entry of the mean over N seeds is within a few of its standard deviations,
    out * sqrt(p / ((1 - p) N)), of the no-dropout output, and on average within 0.3 of one."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 1, 16, 16, generator=g) for _ in range(2))
    v = torch.eye(16)[None, None]  # the output is the weight matrix, all entries positive
    p, n = 0.1, 16
    exact = biased_attention(q, k, v, None, None, SCALE, 0.0)
    outs = []
    for seed in range(n):
        torch.manual_seed(seed)
        outs.append(biased_attention(q, k, v, None, None, SCALE, p))
    z = (torch.stack(outs).mean(0) - exact) / (exact * (p / ((1 - p) * n)) ** 0.5)
    assert z.abs().max() < 5 and abs(z.mean().item()) < 0.3, (z.abs().max(), z.mean())


@interpreted
def test_no_dropout_outside_training():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 20, 16, generator=g) for _ in range(3))
    exact = biased_attention(q, k, v, None, None, SCALE, 0.0)
    torch.testing.assert_close(biased_attention(q, k, v, None, None, SCALE, 0.5, training=False), exact,
                               rtol=0, atol=0)


@interpreted
def test_bad_arguments_name_the_shapes():
    q = torch.zeros(2, 2, 8, 16)
    with pytest.raises(ValueError, match=r"bias must be \(H, T, T\)"):
        biased_attention(q, q, q, torch.zeros(2, 8, 9), None, 1.0, 0.0)
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        biased_attention(q, q, q, None, torch.zeros(2, 8), 1.0, 0.0)
    with pytest.raises(ValueError, match="one dtype"):
        biased_attention(q, q.double(), q, None, None, 1.0, 0.0)
    with pytest.raises(ValueError, match="dropout_p"):
        biased_attention(q, q, q, None, None, 1.0, 1.0)


@pytest.mark.skipif(INTERPRETED or not HAS_TRITON, reason="the cases ran in this process (or triton is missing)")
def test_cases_in_a_fresh_process(starts_process):
    """The interpreter cases in a process where TRITON_INTERPRET=1 precedes the first import of triton."""
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not fresh_process and not cuda"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and " skipped" not in p.stdout, p.stdout[-4000:] + p.stderr[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the compiled kernels)")
@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)], ids=["fp32", "bf16"])
def test_kernel_matches_reference_cuda(dtype, tolerance, dropout_p):
    """Compiled kernels at a realistic size: head dim 64, T = 200 (a ragged block of the 128/64 tiles), right
    padding and a sequence without real keys, a learned shared bias, three groups in the bias-gradient sum."""
    case = Case(B=20, H=3, T=200, D=64, bias="permuted", padding="full")
    errors, made = compare(case, dtype=dtype, dropout_p=dropout_p, device="cuda")
    assert max(errors.values()) <= tolerance, errors
    assert max(made.numels) < case.B * case.H * case.T * case.T
