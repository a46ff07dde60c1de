"""The Triton kernels of ``triton_attention.biased_attention``: FlashAttention-2 (Dao, 2023; forward Alg. 1,
backward Alg. 2) with an additive bias and key padding in the logits and attention dropout on the probabilities:

    S = Q K^T * scale + bias (+ padding),   P = softmax(S),   O = dropout(P) V

Each kernel reads q, k, v and the padding mask through their strides; the bias must come with unit key stride
and rows padded to a multiple of 16 elements (``triton_attention`` lays it out so), so that its rows load as
16-byte vectors whatever T is. Every sum is fp32 (``tl.dot`` accumulates in fp32; the running max, the row sums
and the dK, dV, dQ, dbias accumulators are fp32): the inputs may be fp16/bf16, whose 8-11 mantissa bits would
lose the small terms of sums over hundreds of keys. Logits are kept in base-2 units (log2(e) folded into the
scale and the bias), so every exponential is one ``exp2``. Grids, block sizes and the launch order:
``triton_attention.py``.

Dropout: the forward draws the keep mask, one Philox-4x32 call (7 rounds) per 16 weights, each weight compared
with one 8-bit slice of the call's 128 bits, and stores it, one bit per weight: a uint16 per group of 16
(``Keep``, (B * H, ceil(T / 16) * 8, ceil(T / 64) * 8)); both backward kernels read that mask (a bit costs
them a load and a test, where a redraw would cost a Philox call per group of weights in tiles laid out
differently). The 16 weights of one call are rows {r, r + 8} x keys {c + 8 k, k = 0..7} (r in a 16-row slab, c
in a 64-key slab): on NVIDIA's matrix-multiply accumulator layout one thread holds exactly those 16 values, so
each thread draws for its own weights.

This module imports triton: ``triton_attention`` imports it only where triton is installed.
"""
import torch
import triton
import triton.language as tl

# The logit of a padded key. masks.padding_value(torch.float32): the logits are fp32 here whatever the input
# dtype. Finite, not -inf: beside a real key its weight is exactly 0 (exp underflows), and a row whose keys are
# all padding gets uniform weights instead of NaN (softmax of an all -inf row), as on the explicit path.
PADDING_LOGIT = tl.constexpr(torch.finfo(torch.float32).min / 2)
LOG2E = tl.constexpr(1.4426950408889634)
# Philox-4x32 rounds per call: Salmon et al. (SC 2011, "Parallel random numbers: as easy as 1, 2, 3") find 7
# rounds pass TestU01's BigCrush and recommend 10 as a safety margin; 7 is what a dropout mask needs.
PHILOX_ROUNDS = tl.constexpr(7)

# Pointer tiles are computed in the loops from 1-D offsets (not hoisted as 2-D tiles of 64-bit pointers, which
# would hold registers for the whole loop). ``seed`` is never specialised (a seed divisible by 16 would compile
# the kernel a second time).


@triton.jit
def _logits(x, y, i, j, T, scale_log2, bias_base, stride_bias_i, pad_base, stride_pad_t,
            HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr):
    """fp32 logits of one tile in base-2 units, (x @ y * scale + bias[i, j]) * log2(e), for query indices i and
    key indices j given as broadcastable tiles: (M, 1) and (1, N) for q @ k^T, (1, M) and (N, 1) for the
    transposed k @ q^T. The bias row is read up to its padded length ``stride_bias_i`` (a multiple of 16, so the
    loads stay whole vectors; the keys past T are discarded below). A padded key gets PADDING_LOGIT; a key past
    T gets -inf (it does not exist; every key block holds a real key index, so no row is all -inf)."""
    s = tl.dot(x, y, input_precision=PRECISION) * scale_log2
    if HAS_BIAS:
        bias = tl.load(bias_base + i * stride_bias_i + j, mask=(i < T) & (j < stride_bias_i), other=0.0)
        s += bias.to(tl.float32) * LOG2E
    if HAS_PAD:
        # Set, not added: in fp32 the sum of a logit and PADDING_LOGIT rounds to PADDING_LOGIT anyway (what the
        # explicit path computes); setting it says so.
        padded = tl.load(pad_base + j * stride_pad_t, mask=j < T, other=0) != 0
        s = tl.where(padded, PADDING_LOGIT, s)
    return tl.where(j < T, s, float("-inf"))


@triton.jit
def _draw_keep(seed, bh, start_m, start_n, T, threshold, like, DROP_MAJORITY: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """(BLOCK_M // 16, 8, BLOCK_N // 64, 8) uint32: the dropout draws of the tile at (start_m, start_n), one per
    group of 16 weights, axes (row slab, r % 8, key slab, c % 8). A group is rows {r, r + 8} x keys {c + 8 k,
    k = 0..7}; its bit 8 s + k is set when dropout keeps the weight (r + 8 s, c + 8 k), which happens when byte
    8 s + k of the group's Philox output (key ``seed``, counter (group number, b * H + h, 0, 0); bytes in the
    order of its four words, each little-endian) is >= ``threshold``: with probability 1 - threshold / 256.

    ``like``: a finite fp32 tile of the matrix-multiply layout (the probabilities), added as a zero: Triton lays
    tensors out along their data dependencies, and through it the draws are computed on the threads that hold
    their weights (without it they got a default layout, and every tile's bits crossed shared memory)."""
    A: tl.constexpr = BLOCK_M // 16
    C: tl.constexpr = BLOCK_N // 64
    # no axis is broadcast, so no group is drawn twice
    slab = (start_m // 16 + tl.arange(0, A))[:, None, None, None]
    row8 = tl.arange(0, 8)[None, :, None, None]
    key_slab = (start_n // 64 + tl.arange(0, C))[None, None, :, None]
    key8 = tl.arange(0, 8)[None, None, None, :]
    zero = (_first_of_groups(like, BLOCK_M, BLOCK_N) * 0.0).to(tl.uint32)
    group = (((slab * 8 + row8) * tl.cdiv(T, 64) + key_slab) * 8 + key8).to(tl.uint32) + zero  # < T**2 / 16
    c0, c1, c2, c3 = tl.philox(seed, group, zero + bh.to(tl.uint32), zero, zero, PHILOX_ROUNDS)
    t = threshold.to(tl.uint32)
    return (_kept_nibble(c0, t, 0, DROP_MAJORITY) | _kept_nibble(c1, t, 4, DROP_MAJORITY)
            | _kept_nibble(c2, t, 8, DROP_MAJORITY) | _kept_nibble(c3, t, 12, DROP_MAJORITY))


@triton.jit
def _first_of_groups(tile, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(BLOCK_M // 16, 8, BLOCK_N // 64, 8): the entry (r, c) of each group of ``tile`` (only views: reshape,
    permute, split; the axes as ``_draw_keep``'s)."""
    x = tl.reshape(tile, (BLOCK_M // 16, 2, 8, BLOCK_N // 64, 2, 2, 2, 8))  # (slab, s, r % 8, key slab, k bits, c % 8)
    x = tl.permute(x, (0, 2, 3, 7, 6, 5, 4, 1))  # the group's 16 entries on the last four axes
    x, _ = tl.split(x)
    x, _ = tl.split(x)
    x, _ = tl.split(x)
    x, _ = tl.split(x)
    return x


@triton.jit
def _kept_nibble(word, t, shift: tl.constexpr, DROP_MAJORITY: tl.constexpr):
    """Bit shift + q set where byte q of ``word`` (little-endian) is >= t (< 256): the four unsigned 8-bit
    comparisons in 32-bit operations. Each byte's low 7 bits plus 128 - (t mod 128) reach 128 exactly when they
    are >= t mod 128, without a carry into the next byte; with the byte's top bit this decides byte >= t
    (t < 128: either; t >= 128, ``DROP_MAJORITY``: both). The four results (bit 7 of each byte) are gathered
    into bits 28-31 by one multiplication (its partial products land on distinct bits), then shifted into
    place."""
    low_ge = (word & 0x7F7F7F7F) + (128 - (t & 0x7F)) * 0x01010101
    if DROP_MAJORITY:
        ge = word & low_ge & 0x80808080
    else:
        ge = (word | low_ge) & 0x80808080
    return ((ge * 0x00204081) >> 28) << shift  # below bit 28 the product holds other partial products


@triton.jit
def _keep_tile(groups, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TRANSPOSED: tl.constexpr):
    """0/1 tile (uint32, 1 where dropout keeps the weight) from a tile's dropout groups (``_draw_keep``'s bits):
    (BLOCK_M, BLOCK_N) queries x keys from groups with axes (row slab, r % 8, key slab, c % 8), or with TRANSPOSED
    (BLOCK_N, BLOCK_M) keys x queries from groups with axes (key slab, c % 8, row slab, r % 8). The bits become new
    trailing axes (registers of the thread that holds the group): (..., c // 8 % 2, c // 16 % 2, c // 32 % 2,
    r // 8 % 2)."""
    keep = tl.join(tl.join(_bit_pairs(groups, 0), _bit_pairs(groups, 4)),
                   tl.join(_bit_pairs(groups, 8), _bit_pairs(groups, 12)))
    if TRANSPOSED:  # to (key slab, c // 32 % 2, c // 16 % 2, c // 8 % 2, c % 8, row slab, r // 8 % 2, r % 8)
        tile = tl.reshape(tl.permute(keep, (0, 6, 5, 4, 1, 2, 7, 3)), (BLOCK_N, BLOCK_M))
    else:  # to (row slab, r // 8 % 2, r % 8, key slab, c // 32 % 2, c // 16 % 2, c // 8 % 2, c % 8)
        tile = tl.reshape(tl.permute(keep, (0, 7, 1, 2, 6, 5, 4, 3)), (BLOCK_M, BLOCK_N))
    return tile


@triton.jit
def _bit_pairs(groups, n: tl.constexpr):
    """(..., 2, 2) 0/1: bit n + i + 2 j of ``groups`` at [..., i, j]."""
    return tl.join(tl.join((groups >> n) & 1, (groups >> (n + 1)) & 1),
                   tl.join((groups >> (n + 2)) & 1, (groups >> (n + 3)) & 1))


@triton.jit
def _keep_offsets(start_m, start_n, T, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Offsets and bounds of a tile's groups, axes as ``_draw_keep``'s, in one (b, h)'s stored keep mask: a
    (ceil(T / 16) * 8, ceil(T / 64) * 8) uint16 array [row slab * 8 + r % 8, key slab * 8 + c % 8]."""
    keep_rows, keep_cols = tl.cdiv(T, 16) * 8, tl.cdiv(T, 64) * 8
    r = start_m // 2 + tl.arange(0, BLOCK_M // 2)  # row slab * 8 + r % 8 (start_m is a multiple of 16)
    c = start_n // 8 + tl.arange(0, BLOCK_N // 8)  # key slab * 8 + c % 8 (start_n is a multiple of 64)
    shape: tl.constexpr = (BLOCK_M // 16, 8, BLOCK_N // 64, 8)
    offsets = tl.reshape(r[:, None] * keep_cols + c[None, :], shape)
    inside = tl.reshape((r[:, None] < keep_rows) & (c[None, :] < keep_cols), shape)
    return offsets, inside


@triton.jit
def _load_keep(keep_base, start_m, start_n, T, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               TRANSPOSED: tl.constexpr):
    """The stored keep mask's 0/1 tile (``_keep_tile``'s orientation). Queries x keys (the dQ kernel's tile,
    laid out as the forward's): read as 32-bit words of two groups (keys c % 8 = 2 i and 2 i + 1, side by side:
    the array's rows have an even length), split in registers, where uint16 loads were widened with byte
    permutes (766 instructions a step against 718, bench/kernel_sass.py). Keys x queries (the dK/dV kernel's): one
    uint16 a group, as stored (there words cost more: 863 against 766)."""
    keep_rows = tl.cdiv(T, 16) * 8
    r = start_m // 2 + tl.arange(0, BLOCK_M // 2)  # row slab * 8 + r % 8 (start_m is a multiple of 16)
    if TRANSPOSED:
        keep_cols = tl.cdiv(T, 64) * 8
        c = start_n // 8 + tl.arange(0, BLOCK_N // 8)  # key slab * 8 + c % 8 (start_n is a multiple of 64)
        groups = tl.load(keep_base + r[None, :] * keep_cols + c[:, None],
                         mask=(r[None, :] < keep_rows) & (c[:, None] < keep_cols), other=0).to(tl.uint32)
        groups = tl.reshape(groups, (BLOCK_N // 64, 8, BLOCK_M // 16, 8))
    else:
        half_cols = tl.cdiv(T, 64) * 4
        c = start_n // 16 + tl.arange(0, BLOCK_N // 16)  # key slab * 4 + c % 8 // 2
        words = tl.load(keep_base.to(tl.pointer_type(tl.uint32)) + r[:, None] * half_cols + c[None, :],
                        mask=(r[:, None] < keep_rows) & (c[None, :] < half_cols), other=0)
        words = tl.reshape(words, (BLOCK_M // 16, 8, BLOCK_N // 64, 4))
        groups = tl.reshape(tl.join(words & 0xFFFF, words >> 16), (BLOCK_M // 16, 8, BLOCK_N // 64, 8))
    return _keep_tile(groups, BLOCK_M, BLOCK_N, TRANSPOSED)


@triton.jit(do_not_specialize=["seed"])
def attention_forward_kernel(
    Q, K, V, Bias, Pad, Out, RowMax, RowSum, Keep,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_bias_b, stride_bias_h, stride_bias_i,
    stride_pad_b, stride_pad_t, stride_stats,
    H, T, D, scale_log2, threshold, inv_keep, seed,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, DROPOUT: tl.constexpr, DROP_MAJORITY: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program instance owns one (sequence b, head h, block of BLOCK_M query rows): it streams every key
    # block of (b, h) through an online softmax (FA-2 Alg. 1) and writes its rows of Out (B, H, T, D), of the
    # softmax statistics RowMax, RowSum (B * H, T) fp32 (base 2), from which the backward recomputes P, and with
    # DROPOUT of the keep mask Keep (``_keep_offsets``). The statistics' rows are padded to stride_stats (a multiple
    # of 16) and the padding holds the statistics of empty query rows (finite): their loads need no T mask, so they
    # stay whole vectors at any T.
    # No zero-trip key loop: where it may run zero times, LLVM zeroes the PV accumulator on that path, between the
    # last wgmma and its wait, and ptxas then runs every wgmma alone (docs/gpu.md, "wgmma, serialized").
    tl.assume(T > 0)
    m_block, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)  # int64 offsets: a (B, H, T, T) bias can pass 2**31
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    in_m, in_d = rows < T, offs_d < D
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + offs_d[None, :] * stride_qd,
                mask=in_m[:, None] & in_d[None, :], other=0.0)
    k_base, v_base = K + b * stride_kb + h * stride_kh, V + b * stride_vb + h * stride_vh
    bias_base, pad_base = Bias + b * stride_bias_b + h * stride_bias_h, Pad + b * stride_pad_b
    start_m = m_block * BLOCK_M
    keep_base = Keep + bh.to(tl.int64) * (tl.cdiv(T, 16) * 8) * (tl.cdiv(T, 64) * 8)

    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)  # m_i: the largest logit so far
    row_sum = tl.zeros([BLOCK_M], tl.float32)  # l_i: sum of 2^(logit - m_i), dropped entries included
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # sum of 2^(logit - m_i) * keep * v
    # A dropped weight's value, 0, as a product the compiler may not fold (inv_keep * 0.0 would be NaN for an
    # infinite inv_keep), so the select below stays in fp32, one FSEL a weight. With the literal 0.0, LLVM moves
    # the select past the rounding to bf16 for the product (fptrunc(select(c, x, 0)) -> select(c, fptrunc(x), 0))
    # and selects the 16-bit halves of packed pairs, each pair unpacked and repacked with byte permutes: 740
    # instructions a step against 698 (bf16, shared bias, no padding; bench/kernel_sass.py, docs/gpu.md).
    dropped = inv_keep * 0.0
    for start_n in range(0, T, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols < T)[:, None] & in_d[None, :]
        k = tl.load(k_base + cols[:, None] * stride_kt + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _logits(q, tl.trans(k), rows[:, None], cols[None, :], T, scale_log2, bias_base, stride_bias_i,
                    pad_base, stride_pad_t, HAS_BIAS, HAS_PAD, PRECISION)  # (BLOCK_M, BLOCK_N)
        new_max = tl.maximum(row_max, tl.max(s, 1))
        alpha = tl.exp2(row_max - new_max)  # rescales the sums taken under the old maximum (0 at the first block)
        p = tl.exp2(s - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        if DROPOUT:
            groups = _draw_keep(seed, bh, start_m, start_n, T, threshold, p, DROP_MAJORITY, BLOCK_M, BLOCK_N)
            offsets, inside = _keep_offsets(start_m, start_n, T, BLOCK_M, BLOCK_N)
            tl.store(keep_base + offsets, groups.to(tl.uint16), mask=inside)
            p = tl.where(_keep_tile(groups, BLOCK_M, BLOCK_N, False) != 0, p, dropped)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max
    # the kept entries scaled by 1 / (1 - p), as F.dropout (inv_keep is 1 without dropout)
    out = acc * (inv_keep / row_sum)[:, None]
    tl.store(Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + offs_d[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=in_m[:, None] & in_d[None, :])
    in_stats = rows < stride_stats
    tl.store(RowMax + bh * stride_stats + rows, row_max, mask=in_stats)
    tl.store(RowSum + bh * stride_stats + rows, row_sum, mask=in_stats)


@triton.jit
def attention_backward_dq_kernel(
    Q, K, V, Bias, Pad, Out, DOut, RowMax, RowSum, Keep, Delta, DQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_dqb, stride_dqh, stride_dqt, stride_dqd,
    stride_bias_b, stride_bias_h, stride_bias_i,
    stride_pad_b, stride_pad_t, stride_stats,
    H, T, D, scale_log2, inv_keep,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program instance owns one (sequence b, head h, block of BLOCK_M query rows): their rows of dQ and of
    # Delta (B * H, T) fp32. It runs before the dK/dV kernel, which reads Delta.
    tl.assume(T > 0)  # as in the forward: no zero-trip loop, whose dQ zeroing serialized the wgmma
    m_block, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    in_m, in_d = rows < T, offs_d < D
    md_mask = in_m[:, None] & in_d[None, :]
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + offs_d[None, :] * stride_qd,
                mask=md_mask, other=0.0)
    do = tl.load(DOut + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + offs_d[None, :] * stride_dod,
                 mask=md_mask, other=0.0)
    o = tl.load(Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + offs_d[None, :] * stride_od,
                mask=md_mask, other=0.0)
    # Delta_i = sum_j P_ij dP_ij = dO_i . O_i, with dropout too (O = dropout(P) V, dP = dropout(dO V^T))
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    in_stats = rows < stride_stats  # the statistics' padded rows (the forward's comment)
    tl.store(Delta + bh * stride_stats + rows, delta, mask=in_stats)
    row_max = tl.load(RowMax + bh * stride_stats + rows, mask=in_stats, other=0.0)
    # 1 / l_i kept apart from m_i: a row whose keys are all padding has m_i = PADDING_LOGIT, where m_i + log(l_i)
    # (FA-2's single statistic) would round to m_i
    inv_sum = 1.0 / tl.load(RowSum + bh * stride_stats + rows, mask=in_stats, other=1.0)
    k_base, v_base = K + b * stride_kb + h * stride_kh, V + b * stride_vb + h * stride_vh
    bias_base, pad_base = Bias + b * stride_bias_b + h * stride_bias_h, Pad + b * stride_pad_b
    keep_base = Keep + bh.to(tl.int64) * (tl.cdiv(T, 16) * 8) * (tl.cdiv(T, 64) * 8)

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start_n in range(0, T, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols < T)[:, None] & in_d[None, :]
        k = tl.load(k_base + cols[:, None] * stride_kt + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _logits(q, tl.trans(k), rows[:, None], cols[None, :], T, scale_log2, bias_base, stride_bias_i,
                    pad_base, stride_pad_t, HAS_BIAS, HAS_PAD, PRECISION)  # (BLOCK_M, BLOCK_N)
        p = tl.exp2(s - row_max[:, None]) * inv_sum[:, None]  # P recomputed: nothing (T, T) was stored
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        if DROPOUT:  # dP of the kept weights, / (1 - p); inv_keep = 1 / (1 - p)
            keep = _load_keep(keep_base, m_block * BLOCK_M, start_n, T, BLOCK_M, BLOCK_N, False)  # 0 or 1
            if HAS_BIAS:  # as a factor, 1.0 or 0.0 from the bit (docs/gpu.md, "wgmma, serialized")
                dp = dp * ((keep * 0x3F800000).to(tl.float32, bitcast=True) * inv_keep)
            else:
                dp = tl.where(keep != 0, dp * inv_keep, 0.0)
        ds = p * (dp - delta[:, None])  # dS = d(logits), the softmax backward
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqt + offs_d[None, :] * stride_dqd,
             (dq * (scale_log2 / LOG2E)).to(DQ.dtype.element_ty), mask=md_mask)


@triton.jit
def attention_backward_dkdv_kernel(
    Q, K, V, Bias, Pad, DOut, RowMax, RowSum, Keep, Delta, DK, DV, DBias,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_dkb, stride_dkh, stride_dkt, stride_dkd,
    stride_dvb, stride_dvh, stride_dvt, stride_dvd,
    stride_bias_b, stride_bias_h, stride_bias_i,
    stride_pad_b, stride_pad_t,
    stride_dbias_g, stride_dbias_h, stride_dbias_query, stride_dbias_key, dbias_queries, stride_stats,
    B, H, T, D, scale_log2, inv_keep, sequences_per_program,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, DROPOUT: tl.constexpr, BIAS_GRAD: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program instance owns one (block of BLOCK_N keys, head h, group g of sequences_per_program sequences):
    # for each sequence b of the group in turn, the dK and dV rows of its keys, summed over every query block
    # (FA-2 Alg. 2); and, with BIAS_GRAD, the bias gradient's column block DBias[g, h, :, keys] (G, H, T, T), summed
    # over the group's sequences in fp32 (a group of one, a per-sequence bias's, is written in its dtype). No other program writes these tiles: the batch sum needs no
    # atomics and adds in the same order on every run (deterministic). The caller adds the G group sums; a
    # per-sequence bias has groups of one sequence (g = b).
    tl.assume(T > 0)  # as in the forward: no zero-trip loop (16-17 fewer instructions a step without dropout)
    n_block, h, g = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    h64 = h.to(tl.int64)
    cols = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    in_n, in_d = cols < T, offs_d < D
    nd_mask = in_n[:, None] & in_d[None, :]
    first = g * sequences_per_program
    dbias_base = DBias + g.to(tl.int64) * stride_dbias_g + h64 * stride_dbias_h
    keep_size = (tl.cdiv(T, 16) * 8) * (tl.cdiv(T, 64) * 8)
    keep_fraction = 1.0 / inv_keep
    for b in range(first, tl.minimum(first + sequences_per_program, B)):
        bh = b * H + h
        b64 = tl.cast(b, tl.int64)
        k = tl.load(K + b64 * stride_kb + h64 * stride_kh + cols[:, None] * stride_kt + offs_d[None, :] * stride_kd,
                    mask=nd_mask, other=0.0)
        v = tl.load(V + b64 * stride_vb + h64 * stride_vh + cols[:, None] * stride_vt + offs_d[None, :] * stride_vd,
                    mask=nd_mask, other=0.0)
        q_base, do_base = Q + b64 * stride_qb + h64 * stride_qh, DOut + b64 * stride_dob + h64 * stride_doh
        bias_base, pad_base = Bias + b64 * stride_bias_b + h64 * stride_bias_h, Pad + b64 * stride_pad_b
        keep_base = Keep + bh.to(tl.int64) * keep_size
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        for start_m in range(0, T, BLOCK_M):
            rows = start_m + offs_m
            in_m = rows < T
            md_mask = in_m[:, None] & in_d[None, :]
            q = tl.load(q_base + rows[:, None] * stride_qt + offs_d[None, :] * stride_qd, mask=md_mask, other=0.0)
            do = tl.load(do_base + rows[:, None] * stride_dot + offs_d[None, :] * stride_dod, mask=md_mask, other=0.0)
            in_stats = rows < stride_stats  # the statistics' padded rows (the forward's comment)
            row_max = tl.load(RowMax + bh * stride_stats + rows, mask=in_stats, other=0.0)
            # with dropout, dS = P (keep dP / (1 - p) - Delta) = (P / (1 - p)) (keep dP - (1 - p) Delta), and dV sums
            # keep P / (1 - p) dO: the per-query factors take 1 / (1 - p) (inv_keep; 1 without dropout)
            inv_sum = inv_keep / tl.load(RowSum + bh * stride_stats + rows, mask=in_stats, other=1.0)
            delta = tl.load(Delta + bh * stride_stats + rows, mask=in_stats, other=0.0)
            if DROPOUT:  # without dropout the factor is 1: no multiply, and no register holds it across the loops
                delta *= keep_fraction  # (with them, triton 3.6.0 spilled 8 bytes: shared bias, no padding)
            # the transposed tile, keys x queries (FA-2's backward): every product below has its computed operand
            # on the left, so no computed tile is transposed
            s_t = _logits(k, tl.trans(q), rows[None, :], cols[:, None], T, scale_log2, bias_base, stride_bias_i,
                          pad_base, stride_pad_t, HAS_BIAS, HAS_PAD, PRECISION)  # (BLOCK_N, BLOCK_M)
            p_t = tl.exp2(s_t - row_max[None, :]) * inv_sum[None, :]  # P^T / (1 - p); queries past T have dO = 0
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            if DROPOUT:
                keep = _load_keep(keep_base, start_m, n_block * BLOCK_N, T, BLOCK_M, BLOCK_N, True) != 0
                kept_p_t = tl.where(keep, p_t, 0.0)
                dp_t = tl.where(keep, dp_t, 0.0)
            else:
                kept_p_t = p_t
            dv += tl.dot(kept_p_t.to(do.dtype), do, input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])  # d(logits)^T, fp32
            dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
            if BIAS_GRAD:
                # d(bias) = d(logits) summed over the batch: the group's first sequence writes the tile, the next
                # ones add to it, in fp32 (a read-modify-write of a tile that only this program touches). A shared
                # bias's group sums are keys-major (stride_dbias_query 1, a constant), each key's queries padded to
                # dbias_queries (a multiple of 16): the tile is stored along its own contiguous axis in whole
                # vectors, and queries past T fill the padding, which nobody reads. A per-sequence gradient is the
                # bias's own layout (dbias_queries = T).
                dbias_ptrs = dbias_base + cols[:, None] * stride_dbias_key + rows[None, :] * stride_dbias_query
                dbias_mask = in_n[:, None] & (rows[None, :] < dbias_queries)
                if b > first:
                    ds_t += tl.load(dbias_ptrs, mask=dbias_mask, other=0.0).to(tl.float32)
                tl.store(dbias_ptrs, ds_t.to(DBias.dtype.element_ty), mask=dbias_mask)
        tl.store(DK + b64 * stride_dkb + h64 * stride_dkh + cols[:, None] * stride_dkt + offs_d[None, :] * stride_dkd,
                 (dk * (scale_log2 / LOG2E)).to(DK.dtype.element_ty), mask=nd_mask)
        tl.store(DV + b64 * stride_dvb + h64 * stride_dvh + cols[:, None] * stride_dvt + offs_d[None, :] * stride_dvd,
                 dv.to(DV.dtype.element_ty), mask=nd_mask)
