"""``tupe-locality CKPT``: locality and symmetry (Chen et al. 2023) of a checkpoint.

1. Position-only matrices: the row softmax of the content-free positional term, per head, or for the
   PAM variants the positional weights themselves (see ``checkpoint_maps.positional_maps``). RoPE and
   DeBERTa have no content-free map: their positional effect depends on the content, so only the real
   attention maps of ``--text`` are reported (without ``--text`` the command says so and stops).
2. With ``--text FILE`` (one sentence per line, raw text; ``--spm-model`` and ``--data`` with
   ``dict.txt``): the model's real attention maps per layer and head, each metric averaged over the
   sentences (maps include <s> and </s>, as the official metric applies no mask). A line longer than the
   model's positions keeps its first pieces and its </s> (``attention_maps.encode_sentence``), counted.
Prints Markdown tables and writes them as CSV (``--out-csv``).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List

import numpy as np

from tupe_common.io import write_csv
from tupe_common.log import get_logger
from tupe_tools.errors import UsageError

from .checkpoint_maps import ContentDependentPositions, positional_maps
from .locality_symmetry import locality, symmetry, symmetry_scaled

METRICS = {"locality": locality, "symmetry": symmetry, "symmetry_scaled": symmetry_scaled}
log = get_logger("tupe-locality")


def position_rows(checkpoint: str, length: int) -> List[Dict]:
    maps = positional_maps(checkpoint, length)  # PAM: the weights themselves
    per_layer = maps.per_layer  # declared by the encoding: a learned prior or PAM table per layer
    probs = maps.probs if per_layer else maps.probs[None]  # (L|1, H, T, T)
    values = {name: fn(probs) for name, fn in METRICS.items()}  # each (L|1, H)
    rows = [{"source": "position", "layer": layer if per_layer else "all", "head": h,
             **{k: float(v[layer, h]) for k, v in values.items()}}
            for layer in range(probs.shape[0]) for h in range(probs.shape[1])]
    rows.append({"source": "position", "layer": "all", "head": "mean", **{k: float(np.mean(v)) for k, v in values.items()}})
    return rows


MIN_TOKENS = 3  # locality and symmetry skip a map's first and last rows: a shorter sentence has none left


def read_sentences(path: str, limit: int) -> List[str]:
    """The first ``limit`` non-empty lines of the UTF-8 text file ``path``, stripped; a ValueError names the file
    and the line that is not UTF-8."""
    from tupe_common.io import utf8_lines

    sentences = []
    for _, line in utf8_lines(path):
        if line.strip():
            sentences.append(line.strip())
            if len(sentences) == limit:
                break
    return sentences


def attention_rows(checkpoint: str, text: str, data_dir: str, spm_model: str, max_sentences: int) -> List[Dict]:
    from .attention_maps import attention_probs, encode_sentence, load_hub

    sentences = read_sentences(text, max_sentences)  # before the model loads: a bad file fails at once
    hub = load_hub(checkpoint, data_dir, spm_model)
    sums, n, short, cut = None, 0, 0, 0
    for sentence in sentences:
        tokens, was_cut = encode_sentence(hub, sentence)  # a long line keeps its </s>
        cut += was_cut
        if len(tokens) < MIN_TOKENS:  # a line of no pieces (only U+200B, say) is <s> </s>: no metric is defined
            short += 1
            continue
        probs = attention_probs(hub.model, tokens).numpy()  # (L, H, T, T)
        values = np.stack([fn(probs) for fn in METRICS.values()])  # (3, L, H)
        sums = values if sums is None else sums + values
        n += 1
    if short:
        log.warning(f"{text}: {short} line(s) of fewer than {MIN_TOKENS} tokens with <s> and </s> left out (the "
                    "metrics need 3 rows)")
    if cut:
        log.warning(f"{text}: {cut} line(s) longer than the model's {hub.model.max_positions()} positions cut to "
                    "their first pieces, followed by </s>")
    if n == 0:
        raise ValueError(f"{text}: no line of at least {MIN_TOKENS} tokens")
    mean = sums / n
    rows = []
    L, H = mean.shape[1:]
    for layer in range(L):
        for h in range(H):
            rows.append({"source": f"attention ({n} sentences)", "layer": layer, "head": h,
                         **{k: float(mean[i, layer, h]) for i, k in enumerate(METRICS)}})
    rows.append({"source": f"attention ({n} sentences)", "layer": "all", "head": "mean",
                 **{k: float(mean[i].mean()) for i, k in enumerate(METRICS)}})
    return rows


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_tools.commands.locality_parser``."""
    if args.out_csv and os.path.exists(args.out_csv) and not args.force:
        raise UsageError(f"--out-csv {args.out_csv} exists; pass --force to overwrite it, or choose another file")
    if args.text and not args.spm_model:
        raise UsageError("--text needs --spm-model, the sentencepiece model of the checkpoint's data, to encode its "
                         "lines")
    try:
        rows = position_rows(args.checkpoint, args.length)
    except ContentDependentPositions as e:
        if not args.text:
            raise UsageError(f"{e}; pass --text FILE (with --spm-model and --data) for the real attention maps") from None
        log.info(f"position-only maps: none ({e}); reporting the real attention maps only")
        rows = []
    if args.text:
        rows += attention_rows(args.checkpoint, args.text, args.data, args.spm_model, args.max_sentences)
    print("| source | layer | head | locality | symmetry | symmetry_scaled |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['source']} | {r['layer']} | {r['head']} | {r['locality']:.4f} | {r['symmetry']:.4f} | "
              f"{r['symmetry_scaled']:.4f} |")
    if args.out_csv:
        write_csv(args.out_csv, rows)
        log.info(f"wrote {args.out_csv}")
    return 0


if __name__ == "__main__":  # python -m tupe_tools.analysis.locality_cli: the console script tupe-locality
    from tupe_tools.commands import dispatch

    sys.exit(dispatch("tupe-locality"))
