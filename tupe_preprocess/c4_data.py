"""Check pre-training data before training starts, and print the data path for ``fairseq-train``.

``DATA`` is a folder with ``data_path.txt`` (as step 4 writes it; entries relative to the folder), or
``dir1:dir2:...``. Checked, each failure one line naming the file and the fix (exit 1):

* every shard folder exists and has ``dict.txt``, ``train.{bin,idx}`` and ``valid.{bin,idx}``;
* every shard's ``dict.txt`` is the same file (size and SHA-256), and, for a step-4 folder, the one
  recorded in ``layout.json`` (a copied or edited dictionary would silently change token ids);
* **over-length lines**: with ``--sample-break-mode complete``/``complete_doc``/``eos``, fairseq's
  ``masked_lm`` keeps a line (a paragraph) in one block of ``--tokens-per-sample - 1`` tokens; a longer
  line becomes an over-long block that training drops (train: always; valid: with
  ``--skip-invalid-size-inputs-valid-test``). Their number per split is reported, and more than
  ``--max-skip-fraction`` of a split's lines is an error (step 3 splits long lines, so data binarized
  with the same ``--tokens-per-sample`` has none). ``none`` mode cuts blocks anywhere: nothing dropped.

The absolute colon-joined path goes to stdout, the report to stderr.
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, List, Optional

import numpy as np

from tupe_common.io import file_hash, read_data_path, read_json
from tupe_common.log import get_logger
from tupe_common.mmap_index import NotAnIndex, line_sizes
from tupe_common.errors import exit_main

PROG = "c4_data"
log = get_logger(PROG)


class DataError(ValueError):
    """The data folder cannot be trained on as it is."""


def over_length(sizes: np.ndarray, tokens_per_sample: int, break_mode: str) -> int:
    """Lines that ``masked_lm`` would put into a block longer than ``tokens_per_sample`` (then dropped)."""
    if break_mode == "none":
        return 0
    return int(np.count_nonzero(sizes > tokens_per_sample - 1))


def find_layout(data: str, shards: List[str]) -> Optional[str]:
    """The ``layout.json`` that records ``data``'s dictionary: in DATA_BIN when ``data`` is that folder; for
    colon-joined shard folders, in the folder that holds them (DATA_BIN/shardN), so they are checked alike."""
    if os.path.isdir(data):
        candidates = [data]
    else:
        common = os.path.commonpath(shards)
        candidates = [common, os.path.dirname(common)]
    return next((os.path.join(c, "layout.json") for c in candidates if os.path.isfile(os.path.join(c, "layout.json"))),
                None)


def check_data(data: str, tokens_per_sample: int = 512, break_mode: str = "complete",
               max_skip_fraction: float = 0.0) -> Dict[str, object]:
    """Run every check on ``data``; returns {"shards": [...], "over_length": {split: (n, lines)}}."""
    shards = read_data_path(data)
    if not shards:
        raise DataError(f"DATA={data!r} names no data folder")
    layout_path = find_layout(data, shards)
    recorded = (read_json(layout_path) or {}).get("dictionary") if layout_path else None
    first_hash = None
    counts = {"train": [0, 0], "valid": [0, 0]}
    for d in shards:
        if os.path.exists(d) and not os.path.isdir(d):
            raise DataError(f"{d} is a file, where a data folder is expected")
        if not os.path.isdir(d):
            hint = (f" (recorded in {os.path.join(data, 'data_path.txt')}; rerun python -m tupe_preprocess.c4 layout (or run_all.sh STEPS=4) "
                    "or copy the whole data-bin folder)") if os.path.isdir(data) else ""
            raise DataError(f"data folder {d} does not exist{hint}")
        dict_path = os.path.join(d, "dict.txt")
        if not os.path.isfile(dict_path):
            raise DataError(f"{dict_path} is missing: every data folder needs the dictionary of step 2")
        h = file_hash(dict_path)
        if recorded and (h != recorded.get("sha256") or os.path.getsize(dict_path) != recorded.get("bytes")):
            raise DataError(f"{dict_path} is not the dictionary recorded in {layout_path} "
                            f"({recorded.get('entries')} entries, sha256 {str(recorded.get('sha256'))[:12]}...): "
                            "it was changed or replaced; rerun python -m tupe_preprocess.c4 layout (or run_all.sh STEPS=4) with the dict.txt of step 2")
        if first_hash is not None and h != first_hash:
            raise DataError(f"{dict_path} differs from {os.path.join(shards[0], 'dict.txt')}: all shards must share "
                            "one dictionary (fairseq reads only the first)")
        first_hash = first_hash or h
        for split in ("train", "valid"):
            prefix = os.path.join(d, split)
            missing = [prefix + e for e in (".bin", ".idx") if not os.path.isfile(prefix + e)]
            if missing:
                raise DataError(f"{', '.join(missing)} missing: run python -m tupe_preprocess.c4 binarize and layout (run_all.sh STEPS=34)")
            try:
                sizes = line_sizes(prefix + ".idx")
            except NotAnIndex as e:
                raise DataError(f"{e}") from None
            counts[split][0] += over_length(sizes, tokens_per_sample, break_mode)
            counts[split][1] += len(sizes)
    for split, (n, total) in counts.items():
        frac = n / max(total, 1)
        msg = (f"{split}: {n} of {total} lines ({100 * frac:.2f}%) are longer than a block of "
               f"--tokens-per-sample {tokens_per_sample} (with </s>: > {tokens_per_sample - 1} tokens) in "
               f"--sample-break-mode {break_mode}; fairseq drops them")
        if n and frac > max_skip_fraction:
            raise DataError(msg + f", more than the allowed fraction {max_skip_fraction}. Rebinarize with "
                            f"TOKENS_PER_SAMPLE={tokens_per_sample} (python -m tupe_preprocess.c4 binarize splits long lines, "
                            "FORCE=1), use --sample-break-mode none, or allow it (MAX_SKIP_FRACTION)")
        log.info(msg)
    return {"shards": shards, "over_length": {k: tuple(v) for k, v in counts.items()}}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tupe_preprocess.c4_data", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="a folder with data_path.txt (step 4's data-bin) or dir1:dir2:...")
    ap.add_argument("--tokens-per-sample", type=int, default=512)
    ap.add_argument("--sample-break-mode", default="complete", choices=("none", "complete", "complete_doc", "eos"))
    ap.add_argument("--max-skip-fraction", type=float, default=0.0,
                    help="fail when more than this fraction of a split's lines would be dropped (default 0)")
    args = ap.parse_args(argv)
    try:
        r = check_data(args.data, args.tokens_per_sample, args.sample_break_mode, args.max_skip_fraction)
    except (DataError, OSError) as e:
        log.error(f"{e}")
        return 1
    print(":".join(r["shards"]))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    exit_main(main, "c4_data")
