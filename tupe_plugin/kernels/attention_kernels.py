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


# Every kernel builds the pointer tiles of its first block once and moves them by start * stride in its loop.


@triton.jit
def _logits(q, k, bias_ptrs, pad_ptrs, in_m, in_n, scale,
            HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr):
    """(BLOCK_M, BLOCK_N) fp32 logits of one tile: q k^T * scale + bias; a padded key gets PADDING_LOGIT, a key
    past T gets -inf (it does not exist; each key block holds at least one real key, so no row is all -inf)."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    if HAS_BIAS:
        s += tl.load(bias_ptrs, mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
    if HAS_PAD:
        # Set, not added: in fp32 the sum of a logit and PADDING_LOGIT rounds to PADDING_LOGIT anyway (what the
        # explicit path computes); setting it says so.
        padded = tl.load(pad_ptrs, mask=in_n, other=0) != 0
        s = tl.where(padded[None, :], PADDING_LOGIT, s)
    return tl.where(in_n[None, :], s, float("-inf"))


@triton.jit
def _dropout_counter(bh, offs_m, offs_n, T):
    """(BLOCK_M, BLOCK_N) int64: the Philox counter of each entry (b, h, i, j) of P, its index in a (B, H, T, T)
    tensor (``bh`` = b * H + h). Attention dropout keeps an entry where ``tl.rand(seed, counter) >= p``, with
    probability 1 - p: the same seed and counter give the same number in every kernel, so the backward redraws
    the forward's mask instead of storing it. int64: B * H * T * T can pass 2**31."""
    return bh.to(tl.int64) * T * T + (offs_m[:, None] * T + offs_n[None, :])


@triton.jit
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
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    in_m, in_d = offs_m < T, offs_d < D
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd,
                mask=in_m[:, None] & in_d[None, :], other=0.0)
    k_ptrs = K + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd
    v_ptrs = V + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vt + offs_d[None, :] * stride_vd
    bias_ptrs = (Bias + b * stride_bias_b + h * stride_bias_h
                 + offs_m[:, None] * stride_bias_i + offs_n[None, :] * stride_bias_j)
    pad_ptrs = Pad + b * stride_pad_b + offs_n * stride_pad_t
    counter = _dropout_counter(bh, offs_m, offs_n, T)

    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)  # m_i: the largest logit so far
    row_sum = tl.zeros([BLOCK_M], tl.float32)  # l_i: sum of exp(logit - m_i), dropped entries included
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # sum of exp(logit - m_i) * keep * v
    for start_n in range(0, T, BLOCK_N):
        in_n = start_n + offs_n < T
        k = tl.load(k_ptrs + start_n * stride_kt, mask=in_n[:, None] & in_d[None, :], other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vt, mask=in_n[:, None] & in_d[None, :], other=0.0)
        s = _logits(q, k, bias_ptrs + start_n * stride_bias_j, pad_ptrs + start_n * stride_pad_t, in_m, in_n,
                    scale, HAS_BIAS, HAS_PAD, PRECISION)
        new_max = tl.maximum(row_max, tl.max(s, 1))
        alpha = tl.exp(row_max - new_max)  # rescales the sums taken under the old maximum (0 at the first block)
        p = tl.exp(s - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        if DROPOUT:
            p = tl.where(tl.rand(seed, counter + start_n) >= dropout_p, p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max
    out = acc / row_sum[:, None]
    if DROPOUT:
        out = out / (1.0 - dropout_p)  # the kept entries scaled by 1 / (1 - p), as F.dropout
    tl.store(Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=in_m[:, None] & in_d[None, :])
    tl.store(RowMax + bh * T + offs_m, row_max, mask=in_m)
    tl.store(RowSum + bh * T + offs_m, row_sum, mask=in_m)


@triton.jit
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
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    in_m, in_d = offs_m < T, offs_d < D
    md_mask = in_m[:, None] & in_d[None, :]
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd,
                mask=md_mask, other=0.0)
    do = tl.load(DOut + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dot + offs_d[None, :] * stride_dod,
                 mask=md_mask, other=0.0)
    o = tl.load(Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :] * stride_od,
                mask=md_mask, other=0.0)
    # Delta_i = sum_j P_ij dP_ij = dO_i . O_i, with dropout too (O = dropout(P) V, dP = dropout(dO V^T))
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    tl.store(Delta + bh * T + offs_m, delta, mask=in_m)
    row_max = tl.load(RowMax + bh * T + offs_m, mask=in_m, other=0.0)
    # 1 / l_i kept apart from m_i: a row whose keys are all padding has m_i = PADDING_LOGIT, where m_i + log(l_i)
    # (FA-2's single statistic) would round to m_i
    inv_sum = 1.0 / tl.load(RowSum + bh * T + offs_m, mask=in_m, other=1.0)
    k_ptrs = K + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd
    v_ptrs = V + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vt + offs_d[None, :] * stride_vd
    bias_ptrs = (Bias + b * stride_bias_b + h * stride_bias_h
                 + offs_m[:, None] * stride_bias_i + offs_n[None, :] * stride_bias_j)
    pad_ptrs = Pad + b * stride_pad_b + offs_n * stride_pad_t
    counter = _dropout_counter(bh, offs_m, offs_n, T)

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start_n in range(0, T, BLOCK_N):
        in_n = start_n + offs_n < T
        k = tl.load(k_ptrs + start_n * stride_kt, mask=in_n[:, None] & in_d[None, :], other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vt, mask=in_n[:, None] & in_d[None, :], other=0.0)
        s = _logits(q, k, bias_ptrs + start_n * stride_bias_j, pad_ptrs + start_n * stride_pad_t, in_m, in_n,
                    scale, HAS_BIAS, HAS_PAD, PRECISION)
        p = tl.exp(s - row_max[:, None]) * inv_sum[:, None]  # P recomputed: nothing (T, T) was stored
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        if DROPOUT:
            dp = tl.where(tl.rand(seed, counter + start_n) >= dropout_p, dp / (1.0 - dropout_p), 0.0)
        ds = p * (dp - delta[:, None])  # dS = d(logits), the softmax backward
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqt + offs_d[None, :] * stride_dqd,
             (dq * scale).to(DQ.dtype.element_ty), mask=md_mask)


@triton.jit
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
    offs_n = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    in_n, in_d = offs_n < T, offs_d < D
    nd_mask = in_n[:, None] & in_d[None, :]
    first = g * sequences_per_program
    dbias_ptrs = (DBias + g.to(tl.int64) * stride_dbias_g + h64 * stride_dbias_h
                  + offs_m[:, None] * stride_dbias_i + offs_n[None, :] * stride_dbias_j)
    for b in range(first, tl.minimum(first + sequences_per_program, B)):
        bh = b * H + h
        b64 = tl.cast(b, tl.int64)
        k = tl.load(K + b64 * stride_kb + h64 * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd,
                    mask=nd_mask, other=0.0)
        v = tl.load(V + b64 * stride_vb + h64 * stride_vh + offs_n[:, None] * stride_vt + offs_d[None, :] * stride_vd,
                    mask=nd_mask, other=0.0)
        q_ptrs = Q + b64 * stride_qb + h64 * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd
        do_ptrs = (DOut + b64 * stride_dob + h64 * stride_doh
                   + offs_m[:, None] * stride_dot + offs_d[None, :] * stride_dod)
        bias_ptrs = (Bias + b64 * stride_bias_b + h64 * stride_bias_h
                     + offs_m[:, None] * stride_bias_i + offs_n[None, :] * stride_bias_j)
        pad_ptrs = Pad + b64 * stride_pad_b + offs_n * stride_pad_t
        counter = _dropout_counter(bh, offs_m, offs_n, T)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        for start_m in range(0, T, BLOCK_M):
            in_m = start_m + offs_m < T
            q = tl.load(q_ptrs + start_m * stride_qt, mask=in_m[:, None] & in_d[None, :], other=0.0)
            do = tl.load(do_ptrs + start_m * stride_dot, mask=in_m[:, None] & in_d[None, :], other=0.0)
            row_max = tl.load(RowMax + bh * T + start_m + offs_m, mask=in_m, other=0.0)
            inv_sum = 1.0 / tl.load(RowSum + bh * T + start_m + offs_m, mask=in_m, other=1.0)
            delta = tl.load(Delta + bh * T + start_m + offs_m, mask=in_m, other=0.0)
            s = _logits(q, k, bias_ptrs + start_m * stride_bias_i, pad_ptrs, in_m, in_n, scale,
                        HAS_BIAS, HAS_PAD, PRECISION)
            p = tl.exp(s - row_max[:, None]) * inv_sum[:, None]  # (BLOCK_M, BLOCK_N); rows past T have dO = 0
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            if DROPOUT:
                keep = tl.rand(seed, counter + start_m * T) >= dropout_p
                kept_p = tl.where(keep, p / (1.0 - dropout_p), 0.0)
                dp = tl.where(keep, dp / (1.0 - dropout_p), 0.0)
            else:
                kept_p = p
            dv += tl.dot(tl.trans(kept_p.to(do.dtype)), do, input_precision=PRECISION)
            ds = p * (dp - delta[:, None])  # (BLOCK_M, BLOCK_N) d(logits), fp32
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
            if BIAS_GRAD:
                # d(bias) = d(logits) summed over the batch: the group's first sequence writes the tile, the next
                # ones add to it, in fp32 (a read-modify-write of a tile that only this program touches).
                dbias_mask = in_m[:, None] & in_n[None, :]
                if b > first:
                    ds += tl.load(dbias_ptrs + start_m * stride_dbias_i, mask=dbias_mask, other=0.0)
                tl.store(dbias_ptrs + start_m * stride_dbias_i, ds, mask=dbias_mask)
        tl.store(DK + b64 * stride_dkb + h64 * stride_dkh + offs_n[:, None] * stride_dkt + offs_d[None, :] * stride_dkd,
                 (dk * scale).to(DK.dtype.element_ty), mask=nd_mask)
        tl.store(DV + b64 * stride_dvb + h64 * stride_dvh + offs_n[:, None] * stride_dvt + offs_d[None, :] * stride_dvd,
                 dv.to(DV.dtype.element_ty), mask=nd_mask)


@triton.jit
def dropout_keep_kernel(Keep, H, T, dropout_p, seed, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program instance owns one (query block, key block, b * H + h) tile of Keep (B, H, T, T) int8: the mask
    # the attention kernels draw for this seed (for tests; the kernels themselves never store it).
    m_block, n_block, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    counter = _dropout_counter(bh, offs_m, offs_n, T)
    tl.store(Keep + counter, (tl.rand(seed, counter) >= dropout_p).to(tl.int8),
             mask=(offs_m[:, None] < T) & (offs_n[None, :] < T))
