"""``tupe-pos-maps CKPT --out-dir DIR``: the learned positional correlation of every head.

Writes ``pos_logits.npy`` (H, T, T) raw logits, ``pos_probs.npy`` (their row softmax), and
``pos_maps.png``: one heatmap per head (row = query, column = key, the [CLS] row/column at the
top/left; layer x head maps for a per-layer prior), like the TUPE paper's figure of learned patterns; prints locality/symmetry per head.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

from .checkpoint_maps import positional_logits
from .locality_symmetry import locality, softmax_rows, symmetry, symmetry_scaled


def save_grid(logits: np.ndarray, path: str, title: str) -> None:
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq leaves the root logger verbose
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H = logits.shape[0]
    cols = min(H, 4)
    rows = math.ceil(H / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 3 * rows), squeeze=False)
    for h, ax in enumerate(axes.flat):
        ax.axis("off")
        if h < H:
            ax.imshow(logits[h], cmap="viridis", interpolation="nearest")
            ax.set_title(f"head {h}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def save_npy(path: str, array: np.ndarray) -> None:
    tmp = path + ".tmp.npy"
    np.save(tmp, array)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--length", type=int, default=64, help="tokens T (incl. [CLS]) to plot (default 64)")
    args = ap.parse_args(argv)
    try:
        logits = positional_logits(args.checkpoint, args.length)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.checkpoint}: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    if logits.ndim == 4:  # a learned prior per layer: plot layer-major, head-minor
        logits = logits.reshape(-1, *logits.shape[-2:])
    probs = softmax_rows(logits)
    save_npy(os.path.join(args.out_dir, "pos_logits.npy"), logits)
    save_npy(os.path.join(args.out_dir, "pos_probs.npy"), probs)
    save_grid(logits, os.path.join(args.out_dir, "pos_maps.png"), os.path.basename(args.checkpoint))
    loc, sym, sym_s = locality(probs), symmetry(probs), symmetry_scaled(probs)
    print("| head | locality | symmetry | symmetry_scaled |\n|---|---|---|---|")
    for h in range(logits.shape[0]):
        print(f"| {h} | {loc[h]:.4f} | {sym[h]:.4f} | {sym_s[h]:.4f} |")
    print(f"wrote {args.out_dir}/pos_maps.png, pos_logits.npy, pos_probs.npy ({logits.shape})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
