"""bench/kernel_sass.py: the Triton attention kernels compiled for an H100 (sm_90) on this CPU, and the cost of
attention dropout in the code the GPU would run, measured in SASS instructions per inner-loop step.

Budgets (the shared learned bias with key padding, what TUPE-R trains with): dropout 0.1 against no dropout at
most 1.35x in the forward (one Philox call per 16 weights) and 1.25x in dQ and in dK/dV (the backward reads
the forward's 1-bit mask); the backward draws nothing; no kernel spills. The loops do not depend on the shape,
so a small one compiles the same code in seconds, as long as its batch still gives the dK/dV programs more
than one sequence each (a count of 1 is specialised into a different loop).
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
SHAPE = ("--shape", "32", "12", "128", "64")  # the base batch and heads, a shorter T: 2 sequences per dK/dV program


def test_dropout_costs_what_the_budget_allows(starts_process):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(REPO / "bench" / "kernel_sass.py"), "--csv", *SHAPE, "--bias", "shared", "--padding", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    kernels = {(r["kernel"], float(r["dropout"])): r for r in rows}
    assert {k for k, _ in kernels} == {"forward", "dq", "dkdv", "layer"}
    for (kernel, dropout), r in kernels.items():
        if kernel == "layer":
            assert float(r["est_ms"]) > 0
            continue
        assert int(r["spill_bytes"]) == 0, (kernel, dropout, r)
        assert int(r["registers"]) <= 255 and int(r["blocks_per_sm"]) >= 1 and int(r["instr_per_step"]) > 100
    ratio = {k: int(kernels[(k, 0.1)]["instr_per_step"]) / int(kernels[(k, 0.0)]["instr_per_step"])
             for k in ("forward", "dq", "dkdv")}
    assert ratio["forward"] <= 1.35 and ratio["dq"] <= 1.25 and ratio["dkdv"] <= 1.25, ratio
    assert 0 < float(kernels[("forward", 0.1)]["philox_per_weight"]) <= 1 / 16  # one call per 16 weights
    assert float(kernels[("dq", 0.1)]["philox_per_weight"]) == 0 == float(kernels[("dkdv", 0.1)]["philox_per_weight"])


def test_every_autotune_candidate_compiles_for_sm90_without_spills(starts_process):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(REPO / "bench" / "kernel_sass.py"), "--candidates", "--csv", *SHAPE]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    from tupe_core.kernels import triton_attention

    sizes = {"forward": triton_attention.FORWARD_TILES, "dq": triton_attention.DQ_TILES,
             "dkdv": triton_attention.DKDV_TILES}
    assert [(r["kernel"], r["tiles"]) for r in rows] == [
        (kernel, f"{t[0]}x{t[1]} w{t[2]}") for kernel, tiles in sizes.items() for t in tiles]
    for r in rows:
        assert int(r["spill_bytes"]) == 0 and int(r["blocks_per_sm"]) >= 1, r
    per_sm = {f"{m}x{n} w{w}": k for m, n, w, k in triton_attention.DKDV_TILES}
    for r in rows:  # the programs per SM the bias-gradient grouping assumes are what fits
        if r["kernel"] == "dkdv":
            assert int(r["blocks_per_sm"]) == per_sm[r["tiles"]], r


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
