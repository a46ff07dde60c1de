"""The one convention that ties a sentencepiece model to fairseq's ``dict.txt``.

fairseq's :class:`~fairseq.data.Dictionary` always starts with ``<s>=0 <pad>=1 </s>=2 <unk>=3``.
``dict.txt`` lists every *other* sentencepiece piece in sentencepiece id order (control and unknown
pieces are skipped: fairseq has its own), one ``PIECE COUNT`` line each. For a model trained with
sentencepiece's default special ids (``unk=0 bos=1 eos=2``, no pad) this makes
``fairseq_id == spm_id + 1`` for every normal piece, which :func:`spm_to_fairseq_ids` uses to
binarize without any string round trip. The check that a model and a dict.txt belong together
(``check_dict``, ``load_spm``) lives in :mod:`tupe_common.vocab`, where the installed commands reach it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import sentencepiece as spm

from tupe_common.io import atomic_open
from tupe_common.vocab import check_dict, dict_pieces, load_spm  # noqa: F401  (the steps import them from here)


def write_fairseq_dict(sp: spm.SentencePieceProcessor, out_path: str) -> int:
    """Write ``dict.txt`` for ``sp`` atomically; returns the number of lines.

    Counts are written in decreasing order (``N, N-1, ...``) so that fairseq keeps the
    sentencepiece order if a tool ever re-sorts the dictionary by count.
    """
    pieces = dict_pieces(sp)
    with atomic_open(out_path) as f:
        for rank, piece in enumerate(pieces):
            f.write(f"{piece} {len(pieces) - rank}\n")
    return len(pieces)


def id_offset(sp: spm.SentencePieceProcessor) -> int:
    """The constant ``fairseq_id - spm_id`` for normal pieces, or raise if there is none."""
    specials = [i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
    if specials != list(range(len(specials))):
        raise ValueError(
            "sentencepiece special pieces must come first (ids 0..k-1) for the fast id mapping; "
            f"got special ids {specials}. Train with the default --unk_id=0 --bos_id=1 --eos_id=2."
        )
    return 4 - len(specials)


def spm_to_fairseq_ids(spm_ids: Sequence[int], offset: int, unk_spm_id: int = 0) -> np.ndarray:
    """Map sentencepiece ids to fairseq dictionary ids (``<unk>`` -> 3)."""
    ids = np.asarray(spm_ids, dtype=np.int64) + offset
    ids[np.asarray(spm_ids) == unk_spm_id] = 3
    return ids
