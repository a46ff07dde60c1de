"""``tupe-pos-maps CKPT --out-dir DIR``: the learned positional correlation of every head.

Writes ``pos_logits.npy`` (H, T, T) raw logits, ``pos_probs.npy`` (their row softmax), and
``pos_maps.png``: one heatmap per head on one shared colour scale with a colorbar (row = query, column =
key, the [CLS] row/column at the top/left; layer x head maps for a per-layer prior), like the TUPE paper's figure of learned patterns; prints locality/symmetry per head.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List, Optional

import numpy as np
from tupe_common.io import atomic_open, atomic_path
from tupe_common.log import get_logger
from tupe_tools.errors import UsageError

from .checkpoint_maps import positional_maps
from .locality_symmetry import locality, symmetry, symmetry_scaled

log = get_logger("tupe-pos-maps")

def map_names(count: int, heads_per_layer: int = 0) -> List[str]:
    """The name of each of ``count`` maps: ``head h``, or ``layer l head h`` for maps per layer (layer-major)."""
    if not heads_per_layer:
        return [f"head {h}" for h in range(count)]
    return [f"layer {i // heads_per_layer} head {i % heads_per_layer}" for i in range(count)]


def grid_figure(logits: np.ndarray, title: str, names: Optional[List[str]] = None):
    """One heatmap per map (row = query position, column = key position, [CLS] at the top/left), titled by
    ``names`` (default ``head h``), all on one colour scale (the min and max over every map) with one colorbar,
    so heads compare by colour."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq leaves the root logger verbose
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H = logits.shape[0]
    cols = min(H, 4)
    rows = math.ceil(H / cols)
    vmin, vmax = float(np.min(logits)), float(np.max(logits))
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols + 1, 3 * rows), squeeze=False, layout="constrained")
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        image = ax.imshow(logits[h], cmap="viridis", interpolation="nearest", vmin=vmin, vmax=vmax)
        ax.set_title((names or map_names(H))[h], fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.colorbar(image, ax=axes, shrink=0.8, label="positional logit")
    fig.suptitle(title)
    return fig


def save_grid(logits: np.ndarray, path: str, title: str, names: Optional[List[str]] = None) -> None:
    import matplotlib.pyplot as plt

    fig = grid_figure(logits, title, names)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def save_npy(path: str, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as f:  # a file object: np.save would append .npy to a name ending .partial
        np.save(f, array)


OUTPUTS = ("pos_maps.png", "pos_logits.npy", "pos_probs.npy")


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_tools.commands.pos_maps_parser``."""
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        raise UsageError(f"--out-dir {args.out_dir} is a file; pass a folder (it is created when missing)")
    there = [name for name in OUTPUTS if os.path.exists(os.path.join(args.out_dir, name))]
    if there and not args.force:
        raise UsageError(f"--out-dir {args.out_dir} already holds {', '.join(there)}; pass --force to overwrite "
                         "them, or choose another folder")
    logits, probs, per_layer = positional_maps(args.checkpoint, args.length)  # PAM: the weights, no softmax
    os.makedirs(args.out_dir, exist_ok=True)
    names = map_names(int(np.prod(logits.shape[:-2])), logits.shape[1] if per_layer and logits.ndim == 4 else 0)
    if per_layer:  # one map per layer (learned prior, PAM; the encoding declares it): plot layer-major, head-minor
        logits, probs = (a.reshape(-1, *a.shape[-2:]) for a in (logits, probs))
    save_npy(os.path.join(args.out_dir, "pos_logits.npy"), logits)
    save_npy(os.path.join(args.out_dir, "pos_probs.npy"), probs)
    save_grid(logits, os.path.join(args.out_dir, "pos_maps.png"), os.path.basename(args.checkpoint), names)
    loc, sym, sym_s = locality(probs), symmetry(probs), symmetry_scaled(probs)
    print("| map | locality | symmetry | symmetry_scaled |\n|---|---|---|---|")
    for h, name in enumerate(names):
        print(f"| {name} | {loc[h]:.4f} | {sym[h]:.4f} | {sym_s[h]:.4f} |")
    log.info(f"wrote {args.out_dir}/pos_maps.png, pos_logits.npy, pos_probs.npy ({logits.shape})")
    return 0


if __name__ == "__main__":  # python -m tupe_tools.analysis.pos_maps_cli: the console script tupe-pos-maps
    from tupe_tools.commands import dispatch

    sys.exit(dispatch("tupe-pos-maps"))
