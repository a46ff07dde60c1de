"""The code an H100 would run for our Triton attention kernels, read on a machine without a GPU.

Triton compiles a kernel for any NVIDIA target without a device (``triton.compile`` of an ``ASTSource`` for
``GPUTarget("cuda", 90, 32)``), and its wheel ships ``cuobjdump``, which prints the machine code (SASS) and
the registers. This script builds every launch ``biased_attention`` makes (``triton_attention.forward_launch``
and ``backward_launches``, so the arguments, their specialisation and the tiles are exactly the real ones) with
meta tensors of the base shape (bf16, B32 H12 T512 D64, q/k/v as the model's (T, B, H, D) views), compiles
each for sm_90, and prints per kernel:

- registers, spilled bytes (the stack frame: the kernels have no local arrays), dynamic shared memory, and the
  blocks that fit on one SM (registers: 64K per SM; shared memory: 227 KiB; at most 64 warps);
- ``instr/step``: SASS instructions per thread in one step of the kernel's inner loop (the largest innermost
  loop of the code; the dK/dV kernel has two copies of it, the first sequence of a group and the later ones that
  also add into the bias gradient: the larger is shown);
- ``philox/weight``: Philox's high-half products in that loop / (2 x 7 rounds) / weights a thread holds per step:
  the Philox calls per attention weight (slightly under the true count where the compiler folds the zero counter
  words of the first round);
- ``est ms``: an issue-bound estimate, warp-steps x instr/step / (4 schedulers x 132 SMs x 1.755 GHz), and per
  (dropout, bias, padding) a ``layer`` row with forward + dQ + dK/dV beside cuDNN's measured 0.566 ms for one
  layer's forward and backward without a bias (H100, bf16, T=512; docs/gpu.md). It counts only the inner loops'
  instructions, not memory stalls: a floor for comparing versions, not a prediction.

    python bench/kernel_sass.py            # the table
    python bench/kernel_sass.py --csv      # kernel,dropout,bias,padding,registers,...,est_ms rows
    python bench/kernel_sass.py --candidates   # each kernel's autotune list (triton_attention.*_TILES)

Needs only triton (and torch); nothing runs on a device. Not a test: tests/test_kernel_sass.py checks the
budget it reports for the dropout path (``--shape 32 12 128 64 --bias shared --padding 1``: the same loops).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tupe_plugin from this checkout

from tupe_core.kernels import triton_attention  # noqa: E402
from tupe_common.tunables import arg_type  # noqa: E402

SMS, SCHEDULERS, CLOCK_HZ = 132, 4, 1.755e9  # H100 SXM: SMs, warp schedulers per SM, a sustained clock
CUDNN_LAYER_MS = 0.566  # cuDNN, one layer forward + backward, no bias, bf16, B32 H12 T512 D64 (docs/gpu.md)
REGISTERS_PER_SM, SHARED_PER_SM, WARPS_PER_SM = 65536, 227 * 1024, 64
PHILOX_MULTIPLIERS = ("-0x2daee0ad", "-0x326172a9")  # 0xD2511F53, 0xCD9E8D57 as SASS prints them
PHILOX_ROUNDS = 7
BASE = dict(B=32, H=12, T=512, D=64)
COLUMNS = ("kernel", "dropout", "bias", "padding", "registers", "spill_bytes", "shared_bytes", "blocks_per_sm",
           "instr_per_step", "philox_per_weight", "est_ms")


@dataclass
class Row:
    kernel: str
    dropout: float
    bias: str
    padding: bool
    registers: Optional[int]
    spill_bytes: Optional[int]
    shared_bytes: Optional[int]
    blocks_per_sm: Optional[int]
    instr_per_step: Optional[int]
    philox_per_weight: Optional[float]
    est_ms: float


def compile_sm90(launch: "triton_attention.Launch"):
    """The launch's kernel compiled for sm_90 with the specialisation Triton's launcher would give these
    arguments (integers equal to 1 become constants, multiples of 16 get an alignment hint; meta tensors count
    as aligned). Uses Triton's own binder (``triton.runtime.jit``; internal, checked on triton 3.9)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    fn = launch.kernel
    kwargs = dict(launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def _cuobjdump(cubin: bytes, flag: str) -> str:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(tool), flag, f.name], capture_output=True, text=True, check=True).stdout


INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
BRANCH_TARGET = re.compile(r"\bBRA\b[^;]*?0x([0-9a-f]+)")


def inner_loop(sass: str) -> List[str]:
    """The instructions of the largest innermost loop: a backward branch's range holding no other backward
    branch."""
    code = [(int(address, 16), text.strip()) for address, text in INSTRUCTION.findall(sass)]
    loops = []
    for address, text in code:
        target = BRANCH_TARGET.search(text)
        if target and int(target.group(1), 16) < address:
            loops.append((int(target.group(1), 16), address))
    innermost = [(lo, hi) for lo, hi in loops if not any(lo <= a < b <= hi and (a, b) != (lo, hi) for a, b in loops)]
    if not innermost:
        return []
    bodies = [[text for address, text in code if lo <= address <= hi] for lo, hi in innermost]
    return max(bodies, key=len)


def read_kernel(compiled, weights_per_thread: int) -> Dict[str, object]:
    sass = _cuobjdump(compiled.asm["cubin"], "-sass")
    usage = _cuobjdump(compiled.asm["cubin"], "-res-usage")
    registers = int(re.search(r"REG:(\d+)", usage).group(1))
    stack = int(re.search(r"STACK:(\d+)", usage).group(1))
    loop = inner_loop(sass)
    multiplies = sum(1 for text in loop if re.match(r"(@!?U?P\w+\s+)?IMAD\.(HI|WIDE)\.U32", text)
                     and any(m in text.lower() for m in PHILOX_MULTIPLIERS))  # the high halves: one per product
    warps = compiled.metadata.num_warps
    shared = compiled.metadata.shared
    per_warp = -(-registers * 32 // 256) * 256  # registers are allocated per warp in units of 256
    blocks = min(REGISTERS_PER_SM // (per_warp * warps), SHARED_PER_SM // max(shared + 1024, 1), WARPS_PER_SM // warps)
    return dict(registers=registers, spill_bytes=stack, shared_bytes=shared, blocks_per_sm=blocks,
                instr_per_step=len(loop), philox_per_weight=round(multiplies / (2 * PHILOX_ROUNDS) / weights_per_thread, 4))


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def launches(dropout: float, bias_kind: str, padding: bool, B: int, H: int, T: int, D: int, blocks=None
             ) -> Iterator[Tuple[str, "triton_attention.Launch", int]]:
    """(name, launch, warp-steps of its inner loop over the whole grid) of the forward, dQ and dK/dV kernels of
    one configuration (tiles: ``blocks``, default the half-precision ones)."""
    blocks = blocks or triton_attention.HALF_BLOCKS
    qkv = _meta(T, B, H, D).permute(1, 2, 0, 3)  # (B, H, T, D) views of the model's (T, B, H, D) projections
    bias = {"none": None, "shared": _meta(H, T, T), "per_sequence": _meta(B, H, T, T)}[bias_kind]
    pad = _meta(B, T, dtype=torch.uint8) if padding else None
    forward, (out, row_max, row_sum, keep) = triton_attention.forward_launch(
        qkv, qkv, qkv, bias, pad, 0.125, dropout, 1234, blocks)
    (dq, dkdv), _ = triton_attention.backward_launches(
        qkv, qkv, qkv, bias, pad, out, out, row_max, row_sum, keep, 0.125, dropout, bias is not None, blocks, sms=SMS)
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    query_blocks = B * H * cdiv(T, blocks.forward_m)
    yield "forward", forward, query_blocks * forward.num_warps * cdiv(T, blocks.forward_n)
    yield "dq", dq, B * H * cdiv(T, blocks.dq_m) * dq.num_warps * cdiv(T, blocks.dq_n)
    # every (key block, head, sequence) runs the loop over the query blocks, whatever the grouping
    yield "dkdv", dkdv, cdiv(T, blocks.dkdv_n) * H * B * dkdv.num_warps * cdiv(T, blocks.dkdv_m)


def tile_weights(launch) -> int:
    """Attention weights one thread holds in a step of the launch's inner loop."""
    m, n = launch.constexprs["BLOCK_M"], launch.constexprs["BLOCK_N"]
    return m * n // (launch.num_warps * 32)


BIAS_KINDS = ("none", "shared", "per_sequence")


def rows(shape: Dict[str, int] = BASE, biases=BIAS_KINDS, paddings=(False, True)) -> List[Row]:
    table: List[Row] = []
    for dropout in (0.0, 0.1):
        for bias in biases:
            for padding in paddings:
                layer_ms = 0.0
                for name, launch, warp_steps in launches(dropout, bias, padding, **shape):
                    facts = read_kernel(compile_sm90(launch), tile_weights(launch))
                    est = warp_steps * facts["instr_per_step"] / (SCHEDULERS * SMS * CLOCK_HZ) * 1e3
                    layer_ms += est
                    table.append(Row(name, dropout, bias, padding, est_ms=round(est, 4), **facts))
                table.append(Row("layer", dropout, bias, padding, None, None, None, None, None, None,
                                 round(layer_ms, 4)))
    return table


def candidate_rows(shape: Dict[str, int] = BASE) -> List[Dict[str, object]]:
    """Every member of each kernel's autotune list (triton_attention.FORWARD_TILES, DQ_TILES, DKDV_TILES) compiled
    in the configuration TUPE-R trains with (dropout 0.1, shared learned bias, padding)."""
    base, table = triton_attention.HALF_BLOCKS, []
    lists = {"forward": [dict(forward_m=m, forward_n=n, forward_warps=w) for m, n, w in triton_attention.FORWARD_TILES],
             "dq": [dict(dq_m=m, dq_n=n, dq_warps=w) for m, n, w in triton_attention.DQ_TILES],
             "dkdv": [dict(dkdv_m=m, dkdv_n=n, dkdv_warps=w, dkdv_per_sm=k) for m, n, w, k in triton_attention.DKDV_TILES]}
    for kernel, members in lists.items():
        for tiles in members:
            blocks = replace(base, **tiles)
            name, launch, _ = next(x for x in launches(0.1, "shared", True, **shape, blocks=blocks) if x[0] == kernel)
            facts = read_kernel(compile_sm90(launch), tile_weights(launch))
            table.append(dict(kernel=kernel, tiles=f"{launch.constexprs['BLOCK_M']}x{launch.constexprs['BLOCK_N']} "
                                                   f"w{launch.num_warps}", **facts))
    return table


def dropout_ratios(table: List[Row]) -> Dict[Tuple[str, str, bool], float]:
    """instr/step with dropout 0.1 over the same kernel without dropout, per (kernel, bias, padding)."""
    plain = {(r.kernel, r.bias, r.padding): r.instr_per_step for r in table if r.dropout == 0 and r.instr_per_step}
    return {(r.kernel, r.bias, r.padding): r.instr_per_step / plain[(r.kernel, r.bias, r.padding)]
            for r in table if r.dropout > 0 and r.instr_per_step}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/kernel_sass.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", action="store_true", help="print CSV rows instead of the table")
    parser.add_argument("--candidates", action="store_true",
                        help="compile each kernel's autotune list instead (dropout 0.1, shared learned bias, padding)")
    parser.add_argument("--shape", nargs=4, type=arg_type("int1"), metavar=("B", "H", "T", "D"),
                        default=[BASE[k] for k in "BHTD"], help="batch, heads, length, head dim (default: %(default)s)")
    parser.add_argument("--bias", nargs="+", choices=BIAS_KINDS, default=list(BIAS_KINDS),
                        help="bias kinds to compile (default: all)")
    parser.add_argument("--padding", nargs="+", type=int, choices=(0, 1), default=[0, 1],
                        help="without (0) and/or with (1) key padding (default: both)")
    args = parser.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    try:
        import triton  # noqa: F401
    except ImportError:
        print("error: bench/kernel_sass.py needs triton (pip install triton)", file=sys.stderr)
        return 1
    shape = dict(zip("BHTD", args.shape))
    if args.candidates:
        found = candidate_rows(shape)
        columns = ("kernel", "tiles", "registers", "spill_bytes", "shared_bytes", "blocks_per_sm", "instr_per_step")
        print(",".join(columns) if args.csv else "  ".join(f"{c:>14}" for c in columns))
        for row in found:
            print(",".join(str(row[c]) for c in columns) if args.csv else "  ".join(f"{row[c]!s:>14}" for c in columns))
        return 0
    table = rows(shape, args.bias, [bool(p) for p in args.padding])
    if args.csv:
        print(",".join(COLUMNS))
        for row in table:
            print(",".join("" if v is None else str(v) for v in asdict(row).values()))
        return 0
    print(f"sm_90, bf16, B{shape['B']} H{shape['H']} T{shape['T']} D{shape['D']}; cuDNN layer at the base shape "
          f"(no bias): {CUDNN_LAYER_MS} ms")
    header = ("kernel", "drop", "bias", "pad", "regs", "spill", "smem", "blk/SM", "instr/step", "philox/w",
              "est ms", "/cuDNN")
    print("  ".join(f"{h:>12}" for h in header))
    ratios = dropout_ratios(table)
    for r in table:
        cells = [r.kernel, r.dropout, r.bias, int(r.padding), r.registers, r.spill_bytes, r.shared_bytes,
                 r.blocks_per_sm, r.instr_per_step, r.philox_per_weight, r.est_ms,
                 round(r.est_ms / CUDNN_LAYER_MS, 2) if r.kernel == "layer" else ""]
        print("  ".join(f"{'' if c is None else c!s:>12}" for c in cells))
    print("\ninstr/step with dropout 0.1 / without:")
    by_kernel = collections.defaultdict(list)
    for (kernel, _, _), ratio in ratios.items():
        by_kernel[kernel].append(ratio)
    for kernel, values in by_kernel.items():
        print(f"  {kernel}: {min(values):.3f} - {max(values):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
