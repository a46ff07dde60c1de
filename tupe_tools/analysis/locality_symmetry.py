"""Locality and symmetry of position-wise weight matrices (Chen, Varoquaux, Suchanek, 2023).

Definitions, their quirks, reference values and sources: ``docs/locality_symmetry.md``.

:func:`locality` and :func:`symmetry` reproduce the official ``locality_symmetry/calculate.py``
(``matrix_locality``, ``cal_matrix_symmetry``) to float64 round-off, vectorised with numpy:

* ``Loc(M) = (1/n) * sum_ij M[i, j] / 2^|i-j|``.
* ``Sym(M) = 1 - mean(pooled scaled deltas)``: for every row ``i`` with ``m = min(i, n-1-i) >= 1``
  the deltas ``|M[i, i-k] - M[i, i+k]|`` (k = 1..m) are min-max scaled *within the row* exactly as
  ``sklearn.preprocessing.MinMaxScaler().fit_transform`` does (a range below ``10 * eps`` is treated
  as 1, so such a row gives ``delta - min``, i.e. zeros up to round-off); the scaled values of all
  rows are pooled, so rows weigh by their number of pairs. First and last rows never count.

:func:`symmetry_scaled` is a scale-aware variant under its own name (see its docstring for why).

All functions take a numpy array or a torch tensor of shape ``(..., n, n)``, compute in float64
(``symmetry`` can also mimic the official code on float32 input, see its ``dtype``) and
return a ``float`` for one matrix or an array of shape ``(...)`` for a batch (e.g. layers x heads).
Inputs are not masked: remove [CLS]/[SEP]/padding rows and columns first if they should not count.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Tuple, Union

import numpy as np

Result = Union[float, np.ndarray]


def _as_float64(m: Any) -> np.ndarray:
    """numpy/torch ``(..., n, n)`` -> float64 ndarray; torch is handled without importing it."""
    if hasattr(m, "detach"):  # torch.Tensor (any dtype/device)
        m = m.detach().cpu().double().numpy()
    a = np.asarray(m, dtype=np.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"expected a square matrix or a batch of shape (..., n, n), got {a.shape}")
    if a.shape[-1] == 0:
        raise ValueError("empty matrix (n = 0)")
    return a


def _out(values: np.ndarray) -> Result:
    return float(values) if values.ndim == 0 else values


@lru_cache(maxsize=16)
def _pairs(n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flat indices of the symmetry pairs of an ``n x n`` matrix, grouped by row.

    Returns ``(left, right, starts, row)``: ``left[p] = i*n + (i-k)``, ``right[p] = i*n + (i+k)``
    for rows ``i = 1..n-2`` and ``k = 1..min(i, n-1-i)``; ``starts`` are the first pair of each row
    (for ``np.ufunc.reduceat``), ``row[p]`` the position of pair ``p``'s row among those rows.
    """
    rows = np.arange(1, n - 1)
    counts = np.minimum(rows, n - 1 - rows)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
    row = np.repeat(np.arange(len(rows)), counts)
    i = rows[row]
    k = np.arange(len(row)) - starts[row] + 1
    left, right = i * n + i - k, i * n + i + k
    for a in (left, right, starts, row):
        a.setflags(write=False)
    return left, right, starts, row


def _left_right(a: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``M[..., i, i-k]`` and ``M[..., i, i+k]`` for all pairs, shape ``(..., P)``, plus row info."""
    n = a.shape[-1]
    left, right, starts, row = _pairs(n)
    flat = a.reshape(a.shape[:-2] + (n * n,))
    return np.take(flat, left, axis=-1), np.take(flat, right, axis=-1), starts, row


@lru_cache(maxsize=8)
def _locality_kernel(n: int) -> np.ndarray:
    idx = np.arange(n)
    kernel = np.exp2(-np.abs(idx[:, None] - idx[None, :]).astype(np.float64))  # (n, n), exact powers of 2
    kernel.setflags(write=False)
    return kernel


def locality(m: Any) -> Result:
    """Official locality: mean over rows of ``sum_j M[i, j] / 2^|i-j|`` (1.0 iff all mass on the diagonal)."""
    a = _as_float64(m)
    return _out((a * _locality_kernel(a.shape[-1])).sum(axis=(-2, -1)) / a.shape[-1])


def symmetry(m: Any, *, dtype: Any = np.float64) -> Result:
    """Official symmetry (per-row MinMaxScaler on the deltas, pooled mean); ``nan`` when ``n < 3``.

    ``dtype`` is the precision of the deltas and of their scaling, cut-off included. The official code
    keeps the input's dtype, so pass ``dtype=np.float32`` to get what it returns for a float32 array or
    tensor (e.g. 0.86-0.89 instead of 0.7848 for the float32 ``cal_pos_att`` sinusoidal matrix, n=16: the
    float32 value follows the CPU's round-off of the matrix, which the cut-off magnifies).
    The official code raises ``ZeroDivisionError`` for ``n < 3`` (no row has neighbours on both sides);
    here the value is ``nan``, so batches of mixed content still work.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    a = _as_float64(m)
    n = a.shape[-1]
    if n < 3:
        return _out(np.full(a.shape[:-2], np.nan))
    left, right, starts, row = _left_right(a.astype(dtype, copy=False))
    delta = np.abs(left - right)                                     # (..., P), in dtype
    lo = np.minimum.reduceat(delta, starts, axis=-1)                 # (..., rows)
    hi = np.maximum.reduceat(delta, starts, axis=-1)
    rng = hi - lo
    one = dtype.type(1.0)
    scale = one / np.where(rng < 10 * np.finfo(dtype).eps, one, rng)  # MinMaxScaler.scale_
    offset = -lo * scale                                               # MinMaxScaler.min_
    scaled = delta * np.take(scale, row, axis=-1) + np.take(offset, row, axis=-1)
    return _out(1.0 - scaled.sum(axis=-1, dtype=np.float64) / delta.shape[-1])


def symmetry_scaled(m: Any) -> Result:
    """Scale-aware symmetry: ``1 - mean_i( sum_k |M[i,i-k] - M[i,i+k]| / sum_k (|M[i,i-k]| + |M[i,i+k]|) )``.

    Rows and ``m = min(i, n-1-i)`` as in :func:`symmetry`; a row with no mass on its ``2m`` compared
    entries counts as symmetric; rows are averaged with equal weight; ``nan`` when ``n < 3``.
    The value lies in ``[0, 1]`` for any real matrix, is 1 iff every compared pair is equal, and moves
    continuously with the size of the asymmetry relative to the row's mass on those entries.

    Why not just :func:`symmetry`: its per-row min-max scaling throws the size of the asymmetry away.
    Every row with at least two distinct deltas contributes exactly one 1 and one 0 whatever the scale;
    rows whose deltas are all equal contribute zeros. Hence (i) a causal uniform (lower-triangular)
    matrix scores 1.0 although it is maximally one-sided (here: 0.0); (ii) adding N(0, 1e-9) noise to a
    perfectly symmetric matrix drops it to about 0.6 (here: stays within 1e-6 of 1), because deltas
    that are pure round-off or noise get stretched to [0, 1]; (iii) for the same reason the value
    depends on the precision the matrix went through: whether round-off deltas fall below the
    ``10 * eps`` cut-off (zeros) or not (stretched), e.g. the float32 sinusoidal ``cal_pos_att``
    matrix (n=16) scores 0.785 in float64 and 0.893 in float32. Use :func:`symmetry` to compare with
    the paper's numbers, this one to measure symmetry.
    """
    a = _as_float64(m)
    n = a.shape[-1]
    if n < 3:
        return _out(np.full(a.shape[:-2], np.nan))
    left, right, starts, _ = _left_right(a)
    diff = np.add.reduceat(np.abs(left - right), starts, axis=-1)              # (..., rows)
    mass = np.add.reduceat(np.abs(left) + np.abs(right), starts, axis=-1)
    ratio = np.divide(diff, mass, out=np.zeros_like(diff), where=mass > 0)
    return _out(1.0 - ratio.mean(axis=-1))


def softmax_rows(logits: Any) -> np.ndarray:
    """Row-wise softmax in float64: positional logits ``(..., T, T)`` -> row-stochastic matrices.

    ``-inf`` entries get weight 0 (masks); a row that is entirely ``-inf`` gives ``nan``.
    """
    if hasattr(logits, "detach"):
        logits = logits.detach().cpu().double().numpy()
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim < 1:
        raise ValueError("softmax_rows needs at least one dimension")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
