"""DeBERTa's c2p + p2c logits: the shipped column selection against Transformer-XL's relative-shift view.

Usage: python bench/bench_relative_columns.py [--size base] [--lengths 128 512] [--tokens 1024] [--repeat 10]
       [--device cpu] [--system-malloc]

``deberta_rel`` picks, for every pair (i, j), column ``delta(i, j)`` of the (T, R) score matrices ``q K_r^T`` and
``k Q_r^T``: a gather, whose backward is a ``scatter_add_`` (``TakeColumns`` in tupe_plugin/modules/take_columns.py).
The alternative timed here reads the same values as a strided view: each score matrix is padded to (T, 2T-1)
by repeating its clipped end columns, so that column ``j - i + T - 1`` of row i holds pair (i, j), and the
diagonals are read with ``as_strided`` (no index; its backward writes into zeros). For every length both paths
run on the first attention layer of ``deberta_rel_<size>`` with the same random q and k (``--tokens // T``
sequences), alternately, forward + backward of the (B, H, T, T) logits into q, k, the shared relative table and
the layer's projections; the two must agree (values and gradients) before they are timed. Prints the median ms
of each and the ratio shift / gather. On a 2-core CPU the shift measured slower (docs/benchmarks.md, "Against the targets"); on a GPU the
answer may differ.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, List

import torch
from bench_train_step import add_malloc_option, build, malloc_setting, sync
from torch import Tensor
from tupe_tools.commands import at_least


def padded_columns(s: Tensor, lead: int) -> Tensor:
    """(N, T, R) -> (N, T, 2T-1): column c holds ``s[..., clamp(c - (T - 1 - lead), 0, R - 1)]``."""
    N, T, R = s.shape
    left = T - 1 - lead  # columns to repeat on the left (negative: to cut)
    right = 2 * T - 1 - left - R
    parts = [s[..., :1].expand(N, T, left)] if left > 0 else []
    parts.append(s[..., max(-left, 0): R + min(right, 0)])
    if right > 0:
        parts.append(s[..., -1:].expand(N, T, right))
    return torch.cat(parts, -1) if len(parts) > 1 else parts[0].contiguous()


def diagonals(s: Tensor, lead: int) -> Tensor:
    """(N, T, R) -> (N, T, T) with ``[n, i, j] = s[n, i, clamp(j - i + lead, 0, R - 1)]``, a view of the padding."""
    N, T, _ = s.shape
    e = padded_columns(s, lead)
    return e.as_strided((N, T, T), (T * (2 * T - 1), 2 * T - 2, 1), e.storage_offset() + T - 1)


def shifted_logits(attn, q: Tensor, k: Tensor, positions, max_rel_pos: int) -> Tensor:
    """The (B, H, T, T) c2p + p2c logits of ``DisentangledSelfAttention.positional_qk`` by relative shift."""
    rel = positions.payload.embeddings  # rows lo .. lo + R - 1 of the 2k-row table
    R, H, dh = rel.size(0), attn.num_heads, attn.head_dim
    B, _, T, _ = q.shape
    lo = max(0, max_rel_pos - T + 1)
    k_r = (attn.pos_key_proj(rel) * attn.scaling).view(R, H, dh).permute(1, 2, 0)
    q_r = (attn.pos_query_proj(rel) * attn.scaling).view(R, H, dh).permute(1, 2, 0)

    def scores(x: Tensor, r: Tensor) -> Tensor:  # (H B, T, R), one product per head as the shipped code
        return torch.bmm(x.transpose(0, 1).reshape(H, B * T, dh), r).view(H * B, T, R)

    # c2p[i, j] = (q k_r)[i, delta(i, j) - lo], falling with j: read the columns in reverse
    c2p = diagonals(scores(q, k_r).flip(-1), lo + R - 1 - max_rel_pos)
    # p2c[i, j] = (k q_r)[j, delta(i, j) - lo], rising with i: the diagonals of row j, transposed
    p2c = diagonals(scores(k, q_r), max_rel_pos - lo).transpose(-1, -2)
    return (c2p + p2c).view(H, B, T, T).transpose(0, 1)


def main() -> None:
    from tupe_core.facts import SIZES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="base", choices=list(SIZES))
    p.add_argument("--lengths", type=at_least(1), nargs="+", default=[128, 512])
    p.add_argument("--tokens", type=at_least(1), default=1024, help="tokens per call: batch = tokens // T, at least 1")
    p.add_argument("--repeat", type=at_least(1), default=10, help="timed calls of each path (after one untimed)")
    p.add_argument("--device", default="cpu")
    add_malloc_option(p)
    args = p.parse_args()
    malloc = malloc_setting(args)
    print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads, {malloc}; "
          f"median ms of {args.repeat} alternating calls, forward + backward")
    for T in args.lengths:
        print(bench_length(T, args))


def bench_length(T: int, args) -> str:
    """One line: both paths on the first layer of ``deberta_rel_<size>`` at length T."""
    model = build(f"deberta_rel_{args.size}", args.size, T, args.device)
    enc = model.encoder.sentence_encoder
    attn, k_max = enc.layers[0].self_attn, model.positional_variant.options("deberta").max_rel_pos
    B, H, dh = max(1, args.tokens // T), attn.num_heads, attn.head_dim
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, H, T, dh, generator=g).to(args.device).requires_grad_() for _ in range(2))
    grad_out = torch.randn(B, H, T, T, generator=g).to(args.device)
    inputs = [q, k, *attn.pos_key_proj.parameters(), *attn.pos_query_proj.parameters(),
              enc.positions.rel_embeddings.weight]
    paths = {"gather": lambda: attn.positional_qk(q, k, None, enc.positions(T))[2],
             "shift": lambda: shifted_logits(attn, q, k, enc.positions(T), k_max)}
    (a, ga), (b, gb) = (forward_backward(paths[n], inputs, grad_out) for n in ("gather", "shift"))
    diff = max((a - b).abs().max().item(), *((x - y).abs().max().item() for x, y in zip(ga, gb)))
    scale = max(a.abs().max().item(), *(x.abs().max().item() for x in ga))
    if diff > 1e-4 * scale:
        raise SystemExit(f"error: T={T}: the two paths differ by {diff:.3g} (largest value {scale:.3g})")
    times = {name: [] for name in paths}
    for _ in range(args.repeat):
        for name, f in paths.items():
            times[name].append(timed(f, inputs, grad_out, args.device))
    gather, shift = (statistics.median(times[n]) * 1e3 for n in ("gather", "shift"))
    return (f"{args.size} T={T} B={B} k={k_max}: gather {gather:.1f} ms, shift {shift:.1f} ms, "
            f"shift / gather {shift / gather:.3f} (max difference {diff:.2g})")


def forward_backward(f: Callable[[], Tensor], inputs: List[Tensor], grad_out: Tensor):
    out = f()
    return out.detach(), torch.autograd.grad(out, inputs, grad_out)


def timed(f: Callable[[], Tensor], inputs: List[Tensor], grad_out: Tensor, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    forward_backward(f, inputs, grad_out)
    sync(device)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
