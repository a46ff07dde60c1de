"""bench/kernel_sass.py: the Triton attention kernels compiled for an H100 (sm_90) on this CPU, what attention
dropout costs in the code the GPU would run (SASS instructions per inner-loop step), and the realistic time of
TUPE-R's training layer.

Budgets, for every biased configuration (shared, per-sequence, T5's and TUPE-A's views, with and without key
padding): dropout 0.1 adds at most 222 / 112 / 158 instructions per step to the forward / dQ / dK-dV loops
(TUPE-R's padded configuration when set, +5%); in TUPE-R's configuration (shared learned bias, padding) at most
1.35x / 1.25x / 1.25x; the forward draws one Philox call per 16 weights and the backward none; no kernel spills.
Every tile of the autotune lists compiles without spilling and leaves 8 registers of the 255. TUPE-R's layer
(dropout 0.1, base shape) has a realistic time of at most 0.74 ms (SDPA's with a bias that needs no gradient).

The table is compiled once per module, at the base shape (B32 H12 T512 D64: the times need it; compiling takes
the same time at any shape): 27 distinct kernels (T5's and TUPE-A's views reach the kernels in the shared bias's
layout, so Triton's cache answers them). With an empty Triton cache on 2 busy cores this module took 76 s (42 s
of CPU), the former one (a T=128 table of 6 kernels) 41 s (22 s of CPU).
"""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("triton", reason="needs triton (pip install -e '.[test]')")
BIASED = ("shared", "per_sequence", "t5", "tupe_a")
OVERHEAD = {"forward": 222, "dq": 112, "dkdv": 158}  # instructions per step that dropout 0.1 may add
TUPE_R_RATIO = {"forward": 1.35, "dq": 1.25, "dkdv": 1.25}
REGISTER_MARGIN = 8
TARGET_LAYER_MS = 0.74  # SDPA, a bias that needs no gradient, dropout 0.1, H100 (docs/benchmarks.md: 0.738)


def _bench(*args: str):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, str(REPO / "bench" / "kernel_sass.py"), "--csv", *args], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return list(csv.DictReader(io.StringIO(p.stdout)))


@pytest.fixture(scope="module")
def table(starts_process):
    """(kernel, dropout, bias, padding) -> the bench's row, every biased configuration at the base shape."""
    found = _bench("--bias", *BIASED, "--padding", "0", "1")
    return {(r["kernel"], float(r["dropout"]), r["bias"], r["padding"] == "True"): r for r in found}


def _steps(table, kernel, dropout, bias, padding) -> int:
    return int(table[(kernel, dropout, bias, padding)]["instr_per_step"])


def test_dropout_costs_what_the_budget_allows(table):
    assert {(b, p) for _, _, b, p in table} == {(b, p) for b in BIASED for p in (False, True)}
    for (kernel, dropout, _, _), r in table.items():
        if kernel == "layer":
            continue
        assert int(r["spill_bytes"]) == 0 and int(r["blocks_per_sm"]) >= 1, r
        if dropout:
            philox = float(r["philox_per_weight"])
            assert 0 < philox <= 1 / 16 if kernel == "forward" else philox == 0, r  # the backward draws nothing
    ratio = {k: _steps(table, k, 0.1, "shared", True) / _steps(table, k, 0.0, "shared", True) for k in OVERHEAD}
    assert all(ratio[k] <= TUPE_R_RATIO[k] for k in ratio), (ratio, TUPE_R_RATIO)


@pytest.mark.xfail(strict=True, reason="the forward without padding: dropout adds 227 instructions a step today "
                                       "(docs/gpu.md)")
def test_dropout_adds_at_most_the_budgeted_instructions_in_every_biased_configuration(table):
    overheads = {(kernel, bias, padding): _steps(table, kernel, 0.1, bias, padding)
                 - _steps(table, kernel, 0.0, bias, padding)
                 for kernel, dropout, bias, padding in table if kernel != "layer" and dropout}
    over = {k: n for k, n in overheads.items() if n > OVERHEAD[k[0]]}
    assert not over, f"dropout adds more instructions per step than {OVERHEAD}: {over}"


@pytest.mark.xfail(strict=True, reason="TUPE-R's realistic layer time misses 0.74 ms today (docs/gpu.md: by how "
                                       "much and why)")
def test_tupe_r_layer_is_realistically_within_the_target(table):
    r = table[("layer", 0.1, "shared", True)]
    ms = float(r["realistic_ms"])
    assert ms <= TARGET_LAYER_MS, (f"realistic {ms:.3f} ms misses {TARGET_LAYER_MS} ms by {ms - TARGET_LAYER_MS:.3f} "
                                   f"ms ({ms / TARGET_LAYER_MS - 1:.0%}); floor {r['floor_ms']} ms: issue "
                                   f"{r['issue_ms']}, outside {r['outside_ms']}, memory {r['memory_ms']} ms")


@pytest.fixture(scope="module")
def candidates(starts_process):
    return _bench("--candidates")


def test_every_autotune_candidate_compiles_for_sm90_without_spills(candidates):
    from tupe_core.kernels import triton_attention

    sizes = {"forward": triton_attention.FORWARD_TILES, "dq": triton_attention.DQ_TILES,
             "dkdv": triton_attention.DKDV_TILES}
    assert [(r["kernel"], r["tiles"]) for r in candidates] == [
        (kernel, f"{t[0]}x{t[1]} w{t[2]}") for kernel, tiles in sizes.items() for t in tiles]
    for r in candidates:
        assert int(r["spill_bytes"]) == 0 and int(r["blocks_per_sm"]) >= 1, r
    per_sm = {f"{m}x{n} w{w}": k for m, n, w, k in triton_attention.DKDV_TILES}
    for r in candidates:  # the programs per SM the bias-gradient grouping assumes are what fits
        if r["kernel"] == "dkdv":
            assert int(r["blocks_per_sm"]) == per_sm[r["tiles"]], r


@pytest.mark.xfail(strict=True, reason="dK/dV 32x64 and forward 128x128 compile to 255 registers today (docs/gpu.md)")
def test_every_autotune_candidate_leaves_a_register_margin(candidates):
    tight = {f"{r['kernel']} {r['tiles']}": int(r["registers"]) for r in candidates
             if int(r["registers"]) > 255 - REGISTER_MARGIN}
    assert not tight, f"registers above {255 - REGISTER_MARGIN}: {tight}"


@pytest.mark.parametrize("shape", [("0", "0", "0", "0"), ("32", "12", "-1", "64"), ("32", "x", "128", "64")])
def test_a_shape_that_is_not_positive_is_a_usage_line(shape, capsys):
    """argparse's one line and exit 2, before any compilation (a zero was a ZeroDivisionError's traceback)."""
    sys.path.insert(0, str(REPO / "bench"))
    import kernel_sass

    with pytest.raises(SystemExit) as exited:
        kernel_sass.main(["--shape", *shape])
    bad = next(x for x in shape if x not in ("32", "12", "128", "64"))
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"python bench/kernel_sass.py: error: argument --shape: {bad!r} "
                                                         "is not a positive whole number")
