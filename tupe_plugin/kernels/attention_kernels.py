"""The Triton kernels of ``triton_attention.biased_attention``: FlashAttention-2 (Dao, 2023; forward Alg. 1,
backward Alg. 2) with an additive bias and key padding in the logits and attention dropout on the probabilities:

    S = Q K^T * scale + bias (+ padding),   P = softmax(S),   O = dropout(P) V

Each kernel reads q, k, v, the bias and the padding mask through their strides (views are never copied) and
keeps every sum in fp32 (``tl.dot`` accumulates in fp32; the running max, the row sums and the dK, dV, dQ,
dbias accumulators are fp32): the inputs may be fp16/bf16, whose 8-11 mantissa bits would lose the small
terms of sums over hundreds of keys. Grids, block sizes and the launch order: ``triton_attention.py``.

This module imports triton: ``triton_attention`` imports it only where triton is installed.
"""
import torch
import triton
import triton.language as tl

# The logit of a padded key. masks.padding_value(torch.float32): the logits are fp32 here whatever the input
# dtype. Finite, not -inf: beside a real key its weight is exactly 0 (exp underflows), and a row whose keys are
# all padding gets uniform weights instead of NaN (softmax of an all -inf row), as on the explicit path.
PADDING_LOGIT = tl.constexpr(torch.finfo(torch.float32).min / 2)


# Pointer tiles are computed in the loops from 1-D offsets (not hoisted as 2-D tiles of 64-bit pointers, which
# would hold registers for the whole loop). ``seed`` is never specialised (a seed divisible by 16 would compile
# the kernel a second time).


@triton.jit
def _logits(x, y, i, j, T, scale, bias_base, stride_bias_i, stride_bias_j, pad_base, stride_pad_t,
            HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr):
    """fp32 logits of one tile, x @ y * scale + bias[i, j], for query indices i and key indices j given as
    broadcastable tiles: (M, 1) and (1, N) for q @ k^T, (1, M) and (N, 1) for the transposed k @ q^T. A padded
    key gets PADDING_LOGIT; a key past T gets -inf (it does not exist; every key block holds a real key index,
    so no row is all -inf)."""
    s = tl.dot(x, y, input_precision=PRECISION) * scale
    if HAS_BIAS:
        s += tl.load(bias_base + i * stride_bias_i + j * stride_bias_j, mask=(i < T) & (j < T), other=0.0).to(tl.float32)
    if HAS_PAD:
        # Set, not added: in fp32 the sum of a logit and PADDING_LOGIT rounds to PADDING_LOGIT anyway (what the
        # explicit path computes); setting it says so.
        padded = tl.load(pad_base + j * stride_pad_t, mask=j < T, other=0) != 0
        s = tl.where(padded, PADDING_LOGIT, s)
    return tl.where(j < T, s, float("-inf"))


@triton.jit
def _dropout_keep(seed, bh, i, j, T, dropout_p):
    """Bool tile: the entries of P that attention dropout keeps, each with probability 1 - p (i, j as in
    ``_logits``). Counter-based: entry (b, h, i, j) draws Philox with the key (seed, b * H + h) and the counter
    i * T + j (``bh`` = b * H + h), so every kernel draws the same number for it and the backward redraws the
    forward's mask instead of storing a (B, H, T, T) one."""
    key = (seed.to(tl.int64) << 32) + bh  # tl.rand's 64-bit seed is Philox's two-word key
    return tl.rand(key, i * T + j) >= dropout_p


@triton.jit(do_not_specialize=["seed"])
def attention_forward_kernel(
    Q, K, V, Bias, Pad, Out, RowMax, RowSum,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_bias_b, stride_bias_h, stride_bias_i, stride_bias_j,
    stride_pad_b, stride_pad_t,
    H, T, D, scale, dropout_p, seed,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program instance owns one (sequence b, head h, block of BLOCK_M query rows): it streams every key
    # block of (b, h) through an online softmax (FA-2 Alg. 1) and writes its rows of Out (B, H, T, D) and of the
    # softmax statistics RowMax, RowSum (B * H, T) fp32, from which the backward recomputes P.
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

    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)  # m_i: the largest logit so far
    row_sum = tl.zeros([BLOCK_M], tl.float32)  # l_i: sum of exp(logit - m_i), dropped entries included
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # sum of exp(logit - m_i) * keep * v
    for start_n in range(0, T, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols < T)[:, None] & in_d[None, :]
        k = tl.load(k_base + cols[:, None] * stride_kt + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _logits(q, tl.trans(k), rows[:, None], cols[None, :], T, scale, bias_base, stride_bias_i, stride_bias_j,
                    pad_base, stride_pad_t, HAS_BIAS, HAS_PAD, PRECISION)  # (BLOCK_M, BLOCK_N)
        new_max = tl.maximum(row_max, tl.max(s, 1))
        alpha = tl.exp(row_max - new_max)  # rescales the sums taken under the old maximum (0 at the first block)
        p = tl.exp(s - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        if DROPOUT:
            p = tl.where(_dropout_keep(seed, bh, rows[:, None], cols[None, :], T, dropout_p), p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max
    out = acc / row_sum[:, None]
    if DROPOUT:
        out = out / (1.0 - dropout_p)  # the kept entries scaled by 1 / (1 - p), as F.dropout
    tl.store(Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + offs_d[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=in_m[:, None] & in_d[None, :])
    tl.store(RowMax + bh * T + rows, row_max, mask=in_m)
    tl.store(RowSum + bh * T + rows, row_sum, mask=in_m)


@triton.jit(do_not_specialize=["seed"])
def attention_backward_dq_kernel(
    Q, K, V, Bias, Pad, Out, DOut, RowMax, RowSum, Delta, DQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_dqb, stride_dqh, stride_dqt, stride_dqd,
    stride_bias_b, stride_bias_h, stride_bias_i, stride_bias_j,
    stride_pad_b, stride_pad_t,
    H, T, D, scale, dropout_p, seed,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program instance owns one (sequence b, head h, block of BLOCK_M query rows): their rows of dQ and of
    # Delta (B * H, T) fp32. It runs before the dK/dV kernel, which reads Delta.
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
    tl.store(Delta + bh * T + rows, delta, mask=in_m)
    row_max = tl.load(RowMax + bh * T + rows, mask=in_m, other=0.0)
    # 1 / l_i kept apart from m_i: a row whose keys are all padding has m_i = PADDING_LOGIT, where m_i + log(l_i)
    # (FA-2's single statistic) would round to m_i
    inv_sum = 1.0 / tl.load(RowSum + bh * T + rows, mask=in_m, other=1.0)
    k_base, v_base = K + b * stride_kb + h * stride_kh, V + b * stride_vb + h * stride_vh
    bias_base, pad_base = Bias + b * stride_bias_b + h * stride_bias_h, Pad + b * stride_pad_b

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start_n in range(0, T, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols < T)[:, None] & in_d[None, :]
        k = tl.load(k_base + cols[:, None] * stride_kt + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _logits(q, tl.trans(k), rows[:, None], cols[None, :], T, scale, bias_base, stride_bias_i, stride_bias_j,
                    pad_base, stride_pad_t, HAS_BIAS, HAS_PAD, PRECISION)  # (BLOCK_M, BLOCK_N)
        p = tl.exp(s - row_max[:, None]) * inv_sum[:, None]  # P recomputed: nothing (T, T) was stored
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        if DROPOUT:
            dp = tl.where(_dropout_keep(seed, bh, rows[:, None], cols[None, :], T, dropout_p), dp / (1.0 - dropout_p), 0.0)
        ds = p * (dp - delta[:, None])  # dS = d(logits), the softmax backward
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqt + offs_d[None, :] * stride_dqd,
             (dq * scale).to(DQ.dtype.element_ty), mask=md_mask)


@triton.jit(do_not_specialize=["seed"])
def attention_backward_dkdv_kernel(
    Q, K, V, Bias, Pad, DOut, RowMax, RowSum, Delta, DK, DV, DBias,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_dkb, stride_dkh, stride_dkt, stride_dkd,
    stride_dvb, stride_dvh, stride_dvt, stride_dvd,
    stride_bias_b, stride_bias_h, stride_bias_i, stride_bias_j,
    stride_pad_b, stride_pad_t,
    stride_dbias_g, stride_dbias_h, stride_dbias_i, stride_dbias_j,
    B, H, T, D, scale, dropout_p, seed, sequences_per_program,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, DROPOUT: tl.constexpr, BIAS_GRAD: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program instance owns one (block of BLOCK_N keys, head h, group g of sequences_per_program sequences):
    # for each sequence b of the group in turn, the dK and dV rows of its keys, summed over every query block
    # (FA-2 Alg. 2); and, with BIAS_GRAD, the bias gradient's column block DBias[g, h, :, keys] (G, H, T, T)
    # fp32, summed over the group's sequences. No other program writes these tiles: the batch sum needs no
    # atomics and adds in the same order on every run (deterministic). The caller adds the G group sums; a
    # per-sequence bias has groups of one sequence (g = b).
    n_block, h, g = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    h64 = h.to(tl.int64)
    cols = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    in_n, in_d = cols < T, offs_d < D
    nd_mask = in_n[:, None] & in_d[None, :]
    first = g * sequences_per_program
    dbias_base = DBias + g.to(tl.int64) * stride_dbias_g + h64 * stride_dbias_h
    for b in range(first, tl.minimum(first + sequences_per_program, B)):
        bh = b * H + h
        b64 = tl.cast(b, tl.int64)
        k = tl.load(K + b64 * stride_kb + h64 * stride_kh + cols[:, None] * stride_kt + offs_d[None, :] * stride_kd,
                    mask=nd_mask, other=0.0)
        v = tl.load(V + b64 * stride_vb + h64 * stride_vh + cols[:, None] * stride_vt + offs_d[None, :] * stride_vd,
                    mask=nd_mask, other=0.0)
        q_base, do_base = Q + b64 * stride_qb + h64 * stride_qh, DOut + b64 * stride_dob + h64 * stride_doh
        bias_base, pad_base = Bias + b64 * stride_bias_b + h64 * stride_bias_h, Pad + b64 * stride_pad_b
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        for start_m in range(0, T, BLOCK_M):
            rows = start_m + offs_m
            in_m = rows < T
            md_mask = in_m[:, None] & in_d[None, :]
            q = tl.load(q_base + rows[:, None] * stride_qt + offs_d[None, :] * stride_qd, mask=md_mask, other=0.0)
            do = tl.load(do_base + rows[:, None] * stride_dot + offs_d[None, :] * stride_dod, mask=md_mask, other=0.0)
            row_max = tl.load(RowMax + bh * T + rows, mask=in_m, other=0.0)
            inv_sum = 1.0 / tl.load(RowSum + bh * T + rows, mask=in_m, other=1.0)
            delta = tl.load(Delta + bh * T + rows, mask=in_m, other=0.0)
            # the transposed tile, keys x queries (FA-2's backward): every product below has its computed operand
            # on the left, so no computed tile is transposed
            s_t = _logits(k, tl.trans(q), rows[None, :], cols[:, None], T, scale, bias_base, stride_bias_i,
                          stride_bias_j, pad_base, stride_pad_t, HAS_BIAS, HAS_PAD, PRECISION)  # (BLOCK_N, BLOCK_M)
            p_t = tl.exp(s_t - row_max[None, :]) * inv_sum[None, :]  # P^T; queries past T have dO = 0
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            if DROPOUT:
                keep = _dropout_keep(seed, bh, rows[None, :], cols[:, None], T, dropout_p)
                kept_p_t = tl.where(keep, p_t / (1.0 - dropout_p), 0.0)
                dp_t = tl.where(keep, dp_t / (1.0 - dropout_p), 0.0)
            else:
                kept_p_t = p_t
            dv += tl.dot(kept_p_t.to(do.dtype), do, input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])  # d(logits)^T, fp32
            dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
            if BIAS_GRAD:
                # d(bias) = d(logits) summed over the batch: the group's first sequence writes the tile, the next
                # ones add to it, in fp32 (a read-modify-write of a tile that only this program touches).
                dbias_ptrs = dbias_base + rows[None, :] * stride_dbias_i + cols[:, None] * stride_dbias_j
                dbias_mask = in_m[None, :] & in_n[:, None]
                if b > first:
                    ds_t += tl.load(dbias_ptrs, mask=dbias_mask, other=0.0)
                tl.store(dbias_ptrs, ds_t, mask=dbias_mask)
        tl.store(DK + b64 * stride_dkb + h64 * stride_dkh + cols[:, None] * stride_dkt + offs_d[None, :] * stride_dkd,
                 (dk * scale).to(DK.dtype.element_ty), mask=nd_mask)
        tl.store(DV + b64 * stride_dvb + h64 * stride_dvh + cols[:, None] * stride_dvt + offs_d[None, :] * stride_dvd,
                 dv.to(DV.dtype.element_ty), mask=nd_mask)


@triton.jit(do_not_specialize=["seed"])
def dropout_keep_kernel(Keep, H, T, dropout_p, seed, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program instance owns one (query block, key block, b * H + h) tile of Keep (B, H, T, T) int8: the mask
    # the attention kernels draw for this seed (for tests; the kernels themselves never store it).
    m_block, n_block, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = _dropout_keep(seed, bh, rows[:, None], cols[None, :], T, dropout_p)
    tl.store(Keep + bh.to(tl.int64) * T * T + rows[:, None] * T + cols[None, :], keep.to(tl.int8),
             mask=(rows[:, None] < T) & (cols[None, :] < T))
