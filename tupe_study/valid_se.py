"""The validation loss's own standard error: how much the final validation loss would move with another sample
of held-out text and masks, which no interval over pre-training seeds shows (every seed is scored on the same
held-out blocks).

What the study writes for it:

    OUT/c4/valid_blocks.json          prep: the valid split's blocks at TOKENS_PER_SAMPLE (fairseq's
                                      ``TokenBlockDataset``, ``--sample-break-mode complete``), its tokens and an
                                      estimate of its masked tokens (``count_blocks``)
    OUT/longer/V/seedS.blocks.json    the longer stage's scoring at T, block by block (tupe_study.longer_inputs):
                                      ``block`` (the block's index in the split), ``bits`` (the summed loss in bits
                                      over its masked tokens) and ``masked`` (its masked tokens), in block order

Every model of one pre-training seed is scored on the same blocks with the same masks, so two models' per-block
losses pair block by block.

The validation loss is a ratio, R = sum of the blocks' losses / sum of their masked tokens. Its standard error
is the delta method's over blocks (blocks are the units; ``ratio_se``): with e_i = bits_i - R masked_i,
SE = sqrt(n / (n - 1) sum e_i^2) / sum masked_i. A paired difference R_A - R_B on the same blocks linearizes
the same way with e_i = (bits_A,i - R_A masked_A,i) / M_A - (bits_B,i - R_B masked_B,i) / M_B (``paired_se``).
"""
from __future__ import annotations

import math
import os
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from tupe_common.io import read_json

VALID_BLOCKS = "valid_blocks.json"
MIN_BLOCKS = 5000  # below it, VALID_STEPS=0 validates on a split too small for differences of a few hundredths
LARGER_SPLIT = ("python -m tupe_preprocess.text_to_c4 ... --valid-fraction 0.15 (docs/datasets.md: the larger held-out "
                "split)")


# ---- the split's size (prep) -------------------------------------------------------------------------------


def count_blocks(data_dir: str, tokens_per_sample: int) -> Dict[str, object]:
    """The ``valid`` split of the fairseq data folder ``data_dir`` as pre-training builds it (fairseq 0.12.3
    tasks/masked_lm.py: ``TokenBlockDataset`` of ``tokens_per_sample - 1`` tokens, ``complete``, each after <s>):
    its blocks, its tokens (without the <s>) and the masked tokens to expect (the task masks ``mask_prob`` of
    every block, its <s> included)."""
    from fairseq.data import Dictionary, TokenBlockDataset, data_utils
    from fairseq.tasks.masked_lm import MaskedLMConfig

    d = Dictionary.load(os.path.join(data_dir, "dict.txt"))
    split = data_utils.load_indexed_dataset(os.path.join(data_dir, "valid"), d, combine=False)
    if split is None:
        raise FileNotFoundError(f"{data_dir}: no valid split")
    blocks = TokenBlockDataset(split, split.sizes, tokens_per_sample - 1, pad=d.pad(), eos=d.eos(),
                               break_mode="complete")
    tokens, n = int(np.asarray(blocks.sizes).sum()), len(blocks)
    mask_prob = float(MaskedLMConfig.mask_prob)
    return {"tokens_per_sample": int(tokens_per_sample), "blocks": n, "tokens": tokens, "sentences": len(split),
            "mask_prob": mask_prob, "masked_estimate": round(mask_prob * (tokens + n)), "data": data_dir}


def write_valid_blocks(c4_dir: str, data_dir: str, tokens_per_sample: int) -> dict:
    from tupe_common.io import write_json

    record = count_blocks(data_dir, tokens_per_sample)
    write_json(os.path.join(c4_dir, VALID_BLOCKS), record)
    return record


def _valid_steps(out: str) -> Optional[int]:
    """VALID_STEPS as the study recorded it (OUT/settings.env), or None."""
    from tupe_study.settings import read_recorded

    steps = read_recorded(out).get("VALID_STEPS", "")
    return int(steps) if steps.strip().isdigit() else None


def small_split_problem(out: str) -> Optional[str]:
    """The report's problem line when the study validates on the whole split (VALID_STEPS=0) and the split holds
    fewer than MIN_BLOCKS blocks (OUT/c4/valid_blocks.json); None otherwise, or when either is not recorded."""
    record = read_json(os.path.join(out, "c4", VALID_BLOCKS))
    if record is None or _valid_steps(out) != 0 or record["blocks"] >= MIN_BLOCKS:
        return None
    return (f"the held-out split holds {record['blocks']:,} blocks of {record['tokens_per_sample']} tokens "
            f"({record['tokens']:,} tokens, about {record['masked_estimate']:,} masked), fewer than {MIN_BLOCKS:,}: "
            "VALID_STEPS=0 validates on all of it, and its own sampling noise is large beside differences of a few "
            f"hundredths of a bit; make the corpus with a larger held-out split, {LARGER_SPLIT}, and prepare again")


# ---- the standard errors -----------------------------------------------------------------------------------


def ratio_se(bits: Sequence[float], masked: Sequence[float]) -> Tuple[float, float]:
    """(R, SE): the ratio sum(bits) / sum(masked) over blocks and its delta-method standard error."""
    x, m = np.asarray(bits, dtype=np.float64), np.asarray(masked, dtype=np.float64)
    n, total = len(x), float(m.sum())
    r = float(x.sum()) / total
    if n < 2:
        return r, math.nan
    e = x - r * m
    return r, math.sqrt(n / (n - 1) * float((e * e).sum())) / total


def paired_se(a: dict, b: dict) -> Tuple[float, float]:
    """(R_A - R_B, SE) of two models' per-block records (``bits``, ``masked``, ``block``) on the same blocks."""
    if list(a["block"]) != list(b["block"]):
        raise ValueError("the two models were scored on other blocks: no paired difference")
    xa, ma = np.asarray(a["bits"], dtype=np.float64), np.asarray(a["masked"], dtype=np.float64)
    xb, mb = np.asarray(b["bits"], dtype=np.float64), np.asarray(b["masked"], dtype=np.float64)
    n, sa, sb = len(xa), float(ma.sum()), float(mb.sum())
    ra, rb = float(xa.sum()) / sa, float(xb.sum()) / sb
    if n < 2:
        return ra - rb, math.nan
    e = (xa - ra * ma) / sa - (xb - rb * mb) / sb
    return ra - rb, math.sqrt(n / (n - 1) * float((e * e).sum()))


# ---- the report's section ----------------------------------------------------------------------------------


def blocks_json(out: str, model: str, seed: int) -> str:
    return os.path.join(out, "longer", model, f"seed{seed}.blocks.json")


def read_blocks(out: str, models) -> Dict[str, Dict[int, dict]]:
    """{model: {seed: its per-block record}} of the MLM ``models`` (tupe_study.runs.Variant) that have one."""
    found: Dict[str, Dict[int, dict]] = {}
    for v in models:
        for s in v.seeds:
            record = read_json(blocks_json(out, v.name, s.seed))
            if record is not None:
                found.setdefault(v.name, {})[s.seed] = record
    return found


def _median(values: List[float]) -> float:
    return statistics.median(values) if values else math.nan


def section_lines(out: str, models, declared=(), margin: Optional[float] = None) -> List[str]:
    """The report's lines on the validation loss's own standard error; none at all for a study without per-block
    data (older studies and their archives render as before)."""
    found = read_blocks(out, models)
    if not found:
        return []
    any_record = next(iter(next(iter(found.values())).values()))
    masked = sorted(int(sum(r["masked"])) for runs in found.values() for r in runs.values())
    L = ["### The validation loss's own standard error (held-out text and masks)", "",
         f"The final validation loss is scored on {len(any_record['block']):,} blocks of the held-out split, "
         f"{masked[0]:,}" + (f" to {masked[-1]:,}" if masked[-1] != masked[0] else "") + " masked tokens per "
         "model seed (the masks are the seed's). Standard error of the loss by the delta method over blocks "
         "(the loss is a ratio: summed bits / masked tokens), per model seed, the median over its seeds:", "",
         "| model | seeds | validation-loss SE (bits) |", "|---|---|---|"]
    for name, runs in found.items():
        ses = [ratio_se(r["bits"], r["masked"])[1] for r in runs.values()]
        L.append(f"| {name} | {len(runs)} | {_median(ses):.4f} |")
    pairs = [e for e in declared if e.measure == "final_loss"]
    if pairs:
        L += ["", "| declared comparison | seeds with block data | SE of the paired difference (median over seeds) "
              "| equivalence margin |", "|---|---|---|---|"]
        for e in pairs:
            seeds = sorted(set(found.get(e.a, {})) & set(found.get(e.b, {})))
            ses = [paired_se(found[e.a][s], found[e.b][s])[1] for s in seeds]
            L.append(f"| {e.a} - {e.b} | {len(seeds)} | {'—' if not ses else f'{_median(ses):.4f}'} | "
                     f"{'none' if margin is None else f'{margin:g}'} |")
    L += ["", "This SE covers the sampling of the held-out text (the same blocks for every seed) and of its masks "
          "(the same for every model of a seed): the spread over seeds, and every interval over seeds in this report, "
          "cannot show it. A paired difference on the same blocks and masks has a far smaller one than either loss; "
          "where it is not small beside the margin, a larger held-out split is needed (docs/datasets.md).", ""]
    return L
