"""fairseq's mmap dataset index (``PREFIX.idx`` beside the tokens in ``PREFIX.bin``), read and written
without importing fairseq: the one place this project knows the format.

Layout (fairseq 0.12, ``fairseq/data/indexed_dataset.py``, ``MMapIndexedDataset.Index``), little-endian:
9 magic bytes ``MMIDIDX\\0\\0``; the version ``<Q`` (1); the token dtype code ``<B``; the line count N
``<Q``; N int32 line sizes (tokens per line, its ``</s>`` included); N int64 byte offsets into ``.bin``.
"""
from __future__ import annotations

import struct
from typing import Dict, Sequence, Tuple

import numpy as np

from tupe_common.io import PathLike

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<9sQBQ")  # magic, version, dtype code, line count
DTYPES: Dict[int, type] = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16,
                           9: np.uint32, 10: np.uint64}
_CODES = {np.dtype(t): code for code, t in DTYPES.items()}


class NotAnIndex(ValueError):
    """The file is not a version-1 fairseq mmap index."""


def token_dtype_for(vocab_size: int) -> type:
    """The token dtype fairseq picks for a dictionary of ``vocab_size`` (``best_fitting_int_dtype``)."""
    if vocab_size < 65500:
        return np.uint16
    if vocab_size < 4294967295:
        return np.uint32
    return np.int64


def read_header(idx_path: PathLike) -> Tuple[type, int]:
    """(token dtype, line count) of the index ``idx_path``; :class:`NotAnIndex` if it is not one."""
    with open(idx_path, "rb") as f:
        head = f.read(_HEADER.size)
    fix = "binarize it with python -m tupe_preprocess.c4 binarize or fairseq-preprocess --dataset-impl mmap"
    if len(head) < _HEADER.size:
        raise NotAnIndex(f"{idx_path}: not a fairseq mmap index (only {len(head)} bytes); {fix}")
    magic, version, code, count = _HEADER.unpack(head)
    if magic != MAGIC or version != VERSION:
        raise NotAnIndex(f"{idx_path}: not a fairseq mmap index (version {VERSION}); {fix}")
    if code not in DTYPES:
        raise NotAnIndex(f"{idx_path}: dtype code {code} is not an integer token type; {fix}")
    return DTYPES[code], count


def token_dtype(idx_path: PathLike) -> type:
    """The dtype of the tokens in the ``.bin`` that the index ``idx_path`` describes."""
    return read_header(idx_path)[0]


def line_sizes(idx_path: PathLike) -> np.ndarray:
    """Token count of every line (its ``</s>`` included), int32, from the index ``idx_path``."""
    _, count = read_header(idx_path)
    with open(idx_path, "rb") as f:
        f.seek(_HEADER.size)
        sizes = np.fromfile(f, dtype=np.int32, count=count)
    if len(sizes) < count:
        raise NotAnIndex(f"{idx_path}: truncated ({len(sizes)} of {count} line sizes); binarize it again")
    return sizes


def write_index(idx_path: PathLike, dtype: type, size_chunks: Sequence[np.ndarray]) -> None:
    """Write the index of a ``.bin`` of ``dtype`` tokens whose lines have the sizes ``size_chunks``
    (concatenated). Written in place: the caller writes to a temporary name and renames it."""
    n = sum(len(s) for s in size_chunks)
    itemsize = np.dtype(dtype).itemsize
    with open(idx_path, "wb") as f:
        f.write(_HEADER.pack(MAGIC, VERSION, _CODES[np.dtype(dtype)], n))
        for s in size_chunks:
            f.write(s.astype(np.int32).tobytes())
        address = 0
        for s in size_chunks:
            if len(s):
                ends = np.cumsum(s, dtype=np.int64)
                f.write(((ends - s) * itemsize + address).astype(np.int64).tobytes())
                address += int(ends[-1]) * itemsize
