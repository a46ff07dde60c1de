"""The code an H100 would run for our Triton attention kernels, read on a machine without a GPU, and what it
puts under one layer's time.

Triton compiles a kernel for any NVIDIA target without a device (``triton.compile`` of an ``ASTSource`` for
``GPUTarget("cuda", 90, 32)``), and its wheel ships ``cuobjdump``, which prints the machine code (SASS) and
the registers. This script builds every launch ``biased_attention`` makes (``triton_attention.forward_launch``
and ``backward_launches``, so the arguments, their specialisation and the tiles are exactly the real ones) with
meta tensors of the base shape (bf16, B32 H12 T512 D64, q/k/v as the model's (T, B, H, D) views, the bias in
each layout a model passes, through ``kernel_layout``), compiles each for sm_90, and prints per kernel:

- registers, spilled bytes (the stack frame: the kernels have no local arrays), dynamic shared memory, and the
  blocks that fit on one SM (registers: 64K per SM; shared memory: 227 KiB; at most 64 warps);
- ``instr/step``: SASS instructions per thread in one step of the kernel's inner loop (the largest innermost
  loop of the code);
- ``philox/weight``: Philox's high-half products in that loop / (2 x 7 rounds) / weights a thread holds per step:
  the Philox calls per attention weight (slightly under the true count where the compiler folds the zero counter
  words of the first round);
- times in ms at the H100 figures below (``H100``), per kernel and per (dropout, bias, padding) ``layer``:
  ``issue``: the inner loop's steps at one instruction per cycle per scheduler, or the half-rate ALU pipe's or the
  MUFU pipe's rate where either binds (``step_cycles``), in whole waves of the card (``waves``); ``outside``: the
  instructions outside that loop the same way (once per program, those of the sequence loop once per sequence),
  and in the layer the torch sum of the bias gradient's group sums; ``memory``: the bytes the kernel must move
  (``Traffic``) at HBM bandwidth, the bias gradient's read-modify-writes at L2 bandwidth (``memory_hbm``: at
  HBM's too); ``floor``: max(issue, memory) + outside; ``realistic``: floor x ``realistic_factor()``, how far
  SDPA's measured no-bias layer sat above our own no-bias kernel's floor on an H100 (kernel_sass cannot count
  cuDNN's or flash's instructions). A floor is a bound, not a prediction; the realistic column is one measured
  ratio carried over, recalibrated at each GPU loan (docs/gpu.md).

    python bench/kernel_sass.py            # the table
    python bench/kernel_sass.py --csv      # kernel,dropout,bias,padding,registers,...,realistic_ms rows
    python bench/kernel_sass.py --candidates   # each kernel's autotune list (triton_attention.*_TILES)

Two toolchains: the table is compiled with this environment's Triton (the newest) and, once ``make
triton-toolchain`` has installed it, with the second Triton toolchain (``SECOND_TRITON``: the Triton a GPU
machine's torch brings, its version in ``bench/triton_toolchain.txt``), this same script in a subprocess whose
PYTHONPATH puts that folder first; both run at once, and the report shows each toolchain's table and the two
side by side (``--toolchain`` picks one). A kernel that spills under either fails: the script names it and exits
1 (``--candidates``: this environment's Triton only).

Needs only triton (and torch); nothing runs on a device. tests/test_kernel_sass.py checks the dropout budget,
the registers and the realistic layer time it reports, and the second toolchain's table when it is installed.
"""
from __future__ import annotations

import argparse
import collections
import csv
import io
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from tupe_core.kernels import triton_attention

ROOT = Path(__file__).resolve().parents[1]
from tupe_common.tunables import arg_type  # noqa: E402


@dataclass(frozen=True)
class Card:
    """The figures the times assume (H100 SXM5 80GB: NVIDIA's H100 datasheet and Hopper whitepaper, except where
    a comment says otherwise)."""

    sms: int = 132
    schedulers: int = 4  # warp schedulers per SM, one instruction per cycle each
    clock_hz: float = 1.755e9  # a sustained clock under load (the boost clock is 1.98 GHz)
    hbm_bytes_per_s: float = 3.35e12  # HBM3
    l2_bytes_per_s: float = 10e12  # an assumption (NVIDIA states no L2 bandwidth): an optimistic figure
    alu_rate: int = 2  # cycles per warp instruction on the ALU pipe (integer, logic, compare, select: 64/clk/SM)
    mufu_rate: int = 8  # on the MUFU pipe (exp2, reciprocal: 16/clk/SM; CUDA C++ Programming Guide, cc 9.0)


H100 = Card()
# SDPA, one layer forward + backward, no bias, dropout 0.1, bf16, B32 H12 T512 D64, measured on an H100
# (docs/benchmarks.md; which of cuDNN's or flash's kernel ran is not recorded: docs/gpu.md)
SDPA_LAYER_MS = 0.566
# The target of a biased layer: SDPA's with a bias that needs no gradient, dropout 0.1, bf16, base shape, H100
# (docs/benchmarks.md: 0.738 ms); tests/test_kernel_sass.py and the GPU check's verdict section judge by it
TARGET_LAYER_MS = 0.74
CALIBRATION = dict(dropout=0.1, bias="none", padding=False)  # our kernels' configuration that SDPA_LAYER_MS matches
REGISTERS_PER_SM, SHARED_PER_SM, WARPS_PER_SM = 65536, 227 * 1024, 64
PHILOX_MULTIPLIERS = ("-0x2daee0ad", "-0x326172a9")  # 0xD2511F53, 0xCD9E8D57 as SASS prints them
PHILOX_ROUNDS = 7
# SASS opcodes (their first dotted part) that issue to the half-rate ALU pipe, and to the MUFU pipe
ALU_OPS = frozenset("LOP3 PRMT SEL FSEL FMNMX IMNMX SHF ISETP FSETP LEA IADD3 VIADD P2R R2P".split())
MUFU_OPS = frozenset({"MUFU"})
BASE = dict(B=32, H=12, T=512, D=64)
BIAS_KINDS = ("none", "shared", "per_sequence", "t5", "tupe_a")
TOOLCHAIN_FILE = ROOT / "bench" / "triton_toolchain.txt"  # the second toolchain's version, its one place
TOOLCHAINS = ROOT / ".toolchains"  # make triton-toolchain installs into .toolchains/triton-<version> (ignored by git)


@dataclass
class Row:
    kernel: str  # forward, dq, dkdv, or layer (their sum, with the group sum after dK/dV)
    dropout: float
    bias: str
    padding: bool
    registers: Optional[int]
    spill_bytes: Optional[int]
    shared_bytes: Optional[int]
    blocks_per_sm: Optional[int]
    instr_per_step: Optional[int]
    philox_per_weight: Optional[float]
    # wgmma instructions in one step, and the waits for them: ptxas serializes the loop's wgmma (a wait after
    # each, warning C7515) where a non-wgmma instruction defines an accumulator inside a pipeline stage
    mmas: Optional[int]
    mma_waits: Optional[int]
    issue_ms: float
    outside_ms: float
    memory_ms: float
    memory_hbm_ms: float
    floor_ms: float
    realistic_ms: Optional[float] = None
    triton: str = ""  # the version of the Triton that compiled it


def _from_csv(line: Dict[str, str]) -> Row:
    """A row of ``--csv``'s output (another process's) back as a Row."""
    types = {"kernel": str, "bias": str, "triton": str, "padding": lambda v: v == "True", "dropout": float,
             "philox_per_weight": float}
    return Row(**{k: None if v == "" else types.get(k, float if k.endswith("_ms") else int)(v)
                  for k, v in line.items()})


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
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


@dataclass(frozen=True)
class Code:
    """What the time estimates read from a kernel's SASS, in instructions per thread (= per warp)."""

    loop: List[str]  # the largest innermost loop: a backward branch's range holding no other backward branch
    outer: int  # the rest of the smallest loop around it (the dK/dV kernel's loop over a group's sequences), or 0
    once: int  # everything else up to the end of the code (its trailing self-branch and NOPs left out)


def read_code(sass: str) -> Code:
    code = [(int(address, 16), text.strip()) for address, text in INSTRUCTION.findall(sass)]
    code = [(address, text) for address, text in code if not text.startswith("NOP")]
    loops = []
    for address, text in code:
        target = BRANCH_TARGET.search(text)
        if target and int(target.group(1), 16) < address:
            loops.append((int(target.group(1), 16), address))
    size = lambda lo, hi: sum(1 for address, _ in code if lo <= address <= hi)  # noqa: E731
    innermost = [(lo, hi) for lo, hi in loops if not any(lo <= a < b <= hi and (a, b) != (lo, hi) for a, b in loops)]
    if not innermost:
        return Code([], 0, len(code))
    lo, hi = max(innermost, key=lambda loop: size(*loop))
    around = [size(a, b) for a, b in loops if a <= lo and hi <= b and (a, b) != (lo, hi)]
    outer = min(around) - size(lo, hi) if around else 0
    return Code([text for address, text in code if lo <= address <= hi], outer, len(code) - size(lo, hi) - outer)


def step_cycles(loop: List[str], card: Card = H100) -> int:
    """Cycles one warp's step of ``loop`` holds its scheduler: one instruction per cycle, unless the ALU or MUFU
    pipe (``Card``) needs longer for its share."""
    ops = collections.Counter(PREDICATE.sub("", text).split(".")[0].split()[0] for text in loop)
    alu = sum(n for op, n in ops.items() if op in ALU_OPS)
    mufu = sum(n for op, n in ops.items() if op in MUFU_OPS)
    return max(len(loop), card.alu_rate * alu, card.mufu_rate * mufu)


def read_kernel(compiled, weights_per_thread: int) -> Dict[str, object]:
    sass = _cuobjdump(compiled.asm["cubin"], "-sass")
    usage = _cuobjdump(compiled.asm["cubin"], "-res-usage")
    registers = int(re.search(r"REG:(\d+)", usage).group(1))
    stack = int(re.search(r"STACK:(\d+)", usage).group(1))
    code = read_code(sass)
    multiplies = sum(1 for text in code.loop if re.match(r"(@!?U?P\w+\s+)?IMAD\.(HI|WIDE)\.U32", text)
                     and any(m in text.lower() for m in PHILOX_MULTIPLIERS))  # the high halves: one per product
    ops = [PREDICATE.sub("", text).split()[0] for text in code.loop]
    warps = compiled.metadata.num_warps
    shared = compiled.metadata.shared
    per_warp = -(-registers * 32 // 256) * 256  # registers are allocated per warp in units of 256
    blocks = min(REGISTERS_PER_SM // (per_warp * warps), SHARED_PER_SM // max(shared + 1024, 1), WARPS_PER_SM // warps)
    return dict(registers=registers, spill_bytes=stack, shared_bytes=shared, blocks_per_sm=blocks,
                instr_per_step=len(code.loop),
                philox_per_weight=round(multiplies / (2 * PHILOX_ROUNDS) / weights_per_thread, 4),
                mmas=sum(op.startswith("HGMMA") for op in ops),
                mma_waits=sum(op.startswith("WARPGROUP.DEPBAR") for op in ops), code=code)


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def _nbytes(*tensors) -> int:
    """Bytes of the elements the tensors view (a padded bias's padding is not read)."""
    return sum(x.numel() * x.element_size() for x in tensors if x is not None)


def _group_bytes(dbias: torch.Tensor) -> int:
    """Bytes the dK/dV kernel writes for one group of the bias gradient, its padding included (a shared bias's
    keys-major group sums fill each key's queries up to a multiple of 16)."""
    return dbias.stride(0) * dbias.element_size()


@dataclass(frozen=True)
class Traffic:
    """Bytes a kernel must move: each tensor read or written once (repeated reads of a tile, e.g. a shared bias by
    every sequence, are left to L2), and the bias gradient's read-modify-writes of its group sums apart."""

    bytes: int
    rmw_bytes: int = 0

    def ms(self, card: Card = H100, rmw_in_l2: bool = True) -> float:
        rmw_rate = card.l2_bytes_per_s if rmw_in_l2 else card.hbm_bytes_per_s
        return (self.bytes / card.hbm_bytes_per_s + self.rmw_bytes / rmw_rate) * 1e3


@dataclass(frozen=True)
class Kernel:
    name: str  # forward, dq, dkdv
    launch: "triton_attention.Launch"
    steps: int  # inner-loop steps of one program (all its sequences)
    sequences: int  # sequences one program runs (the dK/dV kernel's outer loop; else 1)
    traffic: Traffic

    @property
    def programs(self) -> int:
        return math.prod(self.launch.grid)


def biases(kind: str, B: int, H: int, T: int) -> Optional[torch.Tensor]:
    """The bias a model passes for ``kind``, in the kernels' layout (``kernel_layout``): T5's and BERT-R's bucket
    gather is a (T, T, H) tensor seen as (H, T, T), TUPE-A's [CLS]-reset term an (H, T+1, T+1) one seen from 1."""
    made = {"none": lambda: None, "shared": lambda: _meta(H, T, T), "per_sequence": lambda: _meta(B, H, T, T),
            "t5": lambda: _meta(T, T, H).permute(2, 0, 1), "tupe_a": lambda: _meta(H, T + 1, T + 1)[:, 1:, 1:]}
    return triton_attention.kernel_layout(made[kind]())


def layer(dropout: float, bias_kind: str, padding: bool, B: int, H: int, T: int, D: int, blocks=None
          ) -> Tuple[List[Kernel], Traffic]:
    """The forward, dQ and dK/dV kernels of one configuration (tiles: ``blocks``, default the half-precision
    ones), and the traffic of the torch sum of the bias gradient's group sums that follows them."""
    blocks = blocks or triton_attention.HALF_BLOCKS
    qkv = _meta(T, B, H, D).permute(1, 2, 0, 3)  # (B, H, T, D) views of the model's (T, B, H, D) projections
    bias = biases(bias_kind, B, H, T)
    pad = _meta(B, T, dtype=torch.uint8) if padding else None
    forward, (out, row_max, row_sum, keep) = triton_attention.forward_launch(
        qkv, qkv, qkv, bias, pad, 0.125, dropout, 1234, blocks)
    (dq, dkdv), (_, _, _, dbias) = triton_attention.backward_launches(
        qkv, qkv, qkv, bias, pad, out, out, row_max, row_sum, keep, 0.125, dropout, bias is not None, blocks,
        sms=H100.sms)
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    sequences = cdiv(B, dkdv.grid[2])
    inputs = _nbytes(bias, pad, keep)  # what every kernel reads besides its (B, H, T, D) tensors and statistics
    x, stats = _nbytes(qkv), _nbytes(row_max)  # one (B, H, T, D) tensor, one (B * H, T) fp32 statistic
    groups, group = (0, 0) if dbias is None else (dbias.shape[0], _group_bytes(dbias))
    written, rmw = groups * group, (B - groups) * 2 * group  # rmw: later sequences into group sums
    kernels = [Kernel("forward", forward, cdiv(T, blocks.forward_n), 1, Traffic(inputs + 4 * x + 2 * stats)),
               Kernel("dq", dq, cdiv(T, blocks.dq_n), 1, Traffic(inputs + 6 * x + 3 * stats)),
               Kernel("dkdv", dkdv, sequences * cdiv(T, blocks.dkdv_m), sequences,
                      Traffic(inputs + 6 * x + 3 * stats + written, rmw))]
    group_sum = 0
    if dbias is not None and dbias.shape[0] > 1 and bias.dim() == 3:  # _sum_groups: G sums into one, fp32
        group_sum += _nbytes(dbias) + _nbytes(dbias[0])
    if dbias is not None and dbias.dtype != bias.dtype:  # then .to(bias.dtype)
        group_sum += _nbytes(dbias[0]) + _nbytes(bias if bias.dim() == 3 else bias[0])
    return kernels, Traffic(group_sum)


def tile_weights(launch) -> int:
    """Attention weights one thread holds in a step of the launch's inner loop."""
    m, n = launch.constexprs["BLOCK_M"], launch.constexprs["BLOCK_N"]
    return m * n // (launch.num_warps * 32)


def waves(programs: int, per_sm: int, card: Card = H100) -> float:
    """Full waves of the card a grid takes, the last counted by the programs its busiest SM holds."""
    full, rest = divmod(programs, card.sms * per_sm)
    return full + -(-rest // card.sms) / per_sm


def issue_ms(cycles_per_warp: float, kernel: Kernel, per_sm: int, card: Card = H100) -> float:
    """ms for every program of ``kernel`` to issue ``cycles_per_warp`` cycles on each of its warps, the SMs' warps
    sharing its schedulers, in ``waves``."""
    warps_per_scheduler = per_sm * kernel.launch.num_warps / card.schedulers
    return waves(kernel.programs, per_sm, card) * warps_per_scheduler * cycles_per_warp / card.clock_hz * 1e3


def kernel_row(kernel: Kernel, dropout: float, bias: str, padding: bool, card: Card = H100) -> Row:
    facts = read_kernel(compile_sm90(kernel.launch), tile_weights(kernel.launch))
    code: Code = facts.pop("code")
    per_sm = facts["blocks_per_sm"]
    loop = issue_ms(kernel.steps * step_cycles(code.loop, card), kernel, per_sm, card)
    outside = issue_ms(code.once + code.outer * kernel.sequences, kernel, per_sm, card)
    memory = kernel.traffic.ms(card)
    return Row(kernel.name, dropout, bias, padding, **facts, issue_ms=loop, outside_ms=outside, memory_ms=memory,
               memory_hbm_ms=kernel.traffic.ms(card, rmw_in_l2=False), floor_ms=max(loop, memory) + outside)


def layer_rows(dropout: float, bias: str, padding: bool, shape: Dict[str, int] = BASE, card: Card = H100
               ) -> List[Row]:
    """The three kernels' rows and the ``layer`` row: their sums, the group sum's HBM time added to outside and
    floor (the kernels run one after another, so the layer's floor is the sum of theirs)."""
    kernels, group_sum = layer(dropout, bias, padding, **shape)
    found = [kernel_row(kernel, dropout, bias, padding, card) for kernel in kernels]
    total = lambda name: sum(getattr(r, name) for r in found)  # noqa: E731
    extra = group_sum.ms(card)
    return found + [Row("layer", dropout, bias, padding, *[None] * 8, total("issue_ms"), total("outside_ms") + extra,
                        total("memory_ms") + extra, total("memory_hbm_ms") + extra, total("floor_ms") + extra)]


def realistic_factor(card: Card = H100) -> float:
    """``SDPA_LAYER_MS`` over the floor of our own kernels in its configuration (``CALIBRATION``, base shape):
    how far a tuned attention layer's measured time sits above this script's floor on the card."""
    return SDPA_LAYER_MS / layer_rows(**CALIBRATION, card=card)[-1].floor_ms


def rows(shape: Dict[str, int] = BASE, bias_kinds=BIAS_KINDS, paddings=(False, True), card: Card = H100,
         dropouts=(0.0, 0.1)) -> List[Row]:
    import triton

    factor = realistic_factor(card)
    table = [row for dropout in dropouts for bias in bias_kinds for padding in paddings
             for row in layer_rows(dropout, bias, padding, shape, card)]
    return [_rounded(replace(r, realistic_ms=r.floor_ms * factor, triton=triton.__version__)) for r in table]


def second_triton() -> Tuple[str, Path]:
    """The second Triton toolchain: (its version, from ``TOOLCHAIN_FILE``; the folder make triton-toolchain
    installs it into)."""
    lines = [x.strip() for x in TOOLCHAIN_FILE.read_text(encoding="utf-8").splitlines()]
    version = next(x for x in lines if x and not x.startswith("#"))
    return version, TOOLCHAINS / f"triton-{version}"


def second_triton_installed() -> bool:
    return (second_triton()[1] / "triton" / "__init__.py").is_file()


def start_csv(argv: Sequence[str], with_second_triton: bool = False) -> subprocess.Popen:
    """This script with ``--csv --toolchain this`` and ``argv`` in a subprocess (stdout and stderr piped), with
    the second Triton toolchain first on its PYTHONPATH when asked (this environment's Triton otherwise); read
    its rows with ``csv_rows``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, never interpret
    if with_second_triton:
        env["PYTHONPATH"] = os.pathsep.join([str(second_triton()[1])] + (
            [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--csv", "--toolchain", "this", *argv],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def csv_rows(process: subprocess.Popen, timeout: float = 900) -> List[Row]:
    """The rows a ``start_csv`` process printed; RuntimeError with its stderr's end if it could not compile (a
    spill alone, its exit status 1, still gives its rows)."""
    out, err = process.communicate(timeout=timeout)
    found = [_from_csv(line) for line in csv.DictReader(io.StringIO(out))]
    if process.returncode not in (0, 1) or not found:
        raise RuntimeError(f"kernel_sass in a subprocess: exit status {process.returncode}: {err.strip()[-2000:]}")
    return found


def spills(table: Sequence[Row]) -> List[str]:
    """Each kernel of ``table`` that spills, named with its toolchain and configuration."""
    return [f"triton {r.triton}: {r.kernel} dropout={r.dropout:g} bias={r.bias}{' padded' if r.padding else ''} "
            f"({r.spill_bytes} bytes)" for r in table if r.spill_bytes]


def _rounded(row: Row) -> Row:
    return Row(**{k: round(v, 4) if k.endswith("_ms") and v is not None else v for k, v in asdict(row).items()})


def candidate_rows(shape: Dict[str, int] = BASE) -> List[Dict[str, object]]:
    """Every member of each kernel's autotune list (triton_attention.FORWARD_TILES, DQ_TILES, DKDV_TILES) compiled
    in the configuration TUPE-R trains with (dropout 0.1, shared learned bias, padding)."""
    base, table = triton_attention.HALF_BLOCKS, []
    lists = {"forward": [dict(forward_m=m, forward_n=n, forward_warps=w) for m, n, w in triton_attention.FORWARD_TILES],
             "dq": [dict(dq_m=m, dq_n=n, dq_warps=w) for m, n, w in triton_attention.DQ_TILES],
             "dkdv": [dict(dkdv_m=m, dkdv_n=n, dkdv_warps=w, dkdv_per_sm=k) for m, n, w, k in triton_attention.DKDV_TILES]}
    for name, members in lists.items():
        for tiles in members:
            kernels, _ = layer(0.1, "shared", True, **shape, blocks=replace(base, **tiles))
            launch = next(k.launch for k in kernels if k.name == name)
            facts = read_kernel(compile_sm90(launch), tile_weights(launch))
            del facts["code"]
            table.append(dict(kernel=name, tiles=f"{launch.constexprs['BLOCK_M']}x{launch.constexprs['BLOCK_N']} "
                                                 f"w{launch.num_warps}", **facts))
    return table


def dropout_ratios(table: List[Row]) -> Dict[Tuple[str, str, bool], float]:
    """instr/step with dropout 0.1 over the same kernel without dropout, per (kernel, bias, padding)."""
    plain = {(r.kernel, r.bias, r.padding): r.instr_per_step for r in table if r.dropout == 0 and r.instr_per_step}
    return {(r.kernel, r.bias, r.padding): r.instr_per_step / plain[(r.kernel, r.bias, r.padding)]
            for r in table if r.dropout > 0 and r.instr_per_step and (r.kernel, r.bias, r.padding) in plain}


def print_table(table: List[Row], shape: Dict[str, int], where: str) -> None:
    factor = table[0].realistic_ms / table[0].floor_ms if table and table[0].floor_ms else realistic_factor()
    print(f"triton {table[0].triton if table else '?'} ({where}): sm_90, bf16, B{shape['B']} H{shape['H']} "
          f"T{shape['T']} D{shape['D']}; realistic = floor x {factor:.2f} (SDPA's measured {SDPA_LAYER_MS} ms / our "
          "no-bias floor, base shape)")
    header = ("kernel", "drop", "bias", "pad", "regs", "spill", "smem", "blk/SM", "instr/step", "philox/w",
              "mma", "mma waits", "issue ms", "outside ms", "memory ms", "mem HBM ms", "floor ms", "realistic")
    print("  ".join(f"{h:>10}" for h in header))
    for r in table:
        print("  ".join(f"{'' if c is None else c!s:>10}" for c in list(asdict(r).values())[:len(header)]))
    by_kernel = collections.defaultdict(list)
    for (kernel, _, _), ratio in dropout_ratios(table).items():
        by_kernel[kernel].append(ratio)
    if by_kernel:
        print("\ninstr/step with dropout 0.1 / without:")
    for kernel, values in by_kernel.items():
        print(f"  {kernel}: {min(values):.3f} - {max(values):.3f}")


def print_side_by_side(first: List[Row], second: List[Row]) -> None:
    """The two toolchains' rows of each (kernel, dropout, bias, padding) on one line."""
    a, b = first[0].triton, second[0].triton
    other = {(r.kernel, r.dropout, r.bias, r.padding): r for r in second}
    facts = ("registers", "spill_bytes", "instr_per_step", "realistic_ms")
    print(f"\nSide by side: triton {a} | triton {b}")
    print("  ".join(f"{h:>10}" for h in ("kernel", "drop", "bias", "pad"))
          + "".join(f"  {h:>21}" for h in ("regs", "spill", "instr/step", "realistic ms")))
    for r in first:
        s = other.get((r.kernel, r.dropout, r.bias, r.padding))
        cells = [f"{'' if getattr(r, f) is None else getattr(r, f)!s} | "
                 f"{'' if s is None or getattr(s, f) is None else getattr(s, f)!s}" for f in facts]
        print("  ".join(f"{c!s:>10}" for c in (r.kernel, r.dropout, r.bias, r.padding))
              + "".join(f"  {c:>21}" for c in cells))


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
    parser.add_argument("--dropout", nargs="+", type=float, choices=(0.0, 0.1), default=[0.0, 0.1],
                        help="attention dropout 0 and/or 0.1 (default: both)")
    parser.add_argument("--toolchain", choices=("both", "this", "second"), default="both",
                        help="compile with this environment's Triton, the second Triton toolchain (make "
                        "triton-toolchain), or both (default; this one alone while the second is not installed)")
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
        spilled = [f"{r['kernel']} {r['tiles']} ({r['spill_bytes']} bytes)" for r in found if r["spill_bytes"]]
        if spilled:
            print(f"kernel_sass: FAILED: a kernel spills: {'; '.join(spilled)}", file=sys.stderr)
        return 1 if spilled else 0
    version, folder = second_triton()
    second = None
    if args.toolchain != "this":
        if second_triton_installed():
            second = start_csv(["--shape", *map(str, args.shape), "--bias", *args.bias, "--padding",
                                *map(str, args.padding), "--dropout", *map(str, args.dropout)], with_second_triton=True)
        elif args.toolchain == "second":
            print(f"error: the second Triton toolchain (triton {version}) is not installed in {folder}: run `make "
                  "triton-toolchain`", file=sys.stderr)
            return 1
        else:
            print(f"kernel_sass: the second Triton toolchain (triton {version}) is not installed: `make "
                  "triton-toolchain` installs it; this environment's Triton only", file=sys.stderr)
    tables = []  # this environment's first, then the second toolchain's
    if args.toolchain != "second":
        tables.append(rows(shape, args.bias, [bool(p) for p in args.padding], dropouts=tuple(args.dropout)))
    broken = None
    if second is not None:
        try:
            tables.append(csv_rows(second))
        except RuntimeError as e:
            broken = f"the second Triton toolchain (triton {version}) did not compile the kernels: {e}"
    if args.csv:
        print(",".join(f.name for f in fields(Row)))
        for row in (r for table in tables for r in table):
            print(",".join("" if v is None else str(v) for v in asdict(row).values()))
    else:
        for table, where in zip(tables, ["this environment"] * (args.toolchain != "second") + [
                f"the second toolchain, {folder.relative_to(ROOT)}"]):
            print_table(table, shape, where)
            print()
        if len(tables) == 2:
            print_side_by_side(*tables)
    spilled = spills([r for table in tables for r in table])
    if spilled:
        print(f"kernel_sass: FAILED: a kernel spills: {'; '.join(spilled)}", file=sys.stderr)
    if broken:
        print(f"kernel_sass: FAILED: {broken}", file=sys.stderr)
    return 1 if spilled or broken else 0

if __name__ == "__main__":
    sys.exit(main())
