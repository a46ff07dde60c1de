"""tupe_common.mmap_index reads what fairseq writes and writes what fairseq reads (fairseq's own
``MMapIndexedDataset`` is the reference), and refuses a file that is not such an index."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from fairseq.data import indexed_dataset

from tupe_common.mmap_index import NotAnIndex, line_sizes, read_header, token_dtype, token_dtype_for, write_index

LINES = [[4, 5, 2], [2], [9, 8, 7, 6, 2]]


@pytest.mark.parametrize("vocab_size", [1000, 70000])
def test_reads_the_index_fairseq_writes(tmp_path, vocab_size):
    prefix = str(tmp_path / "train")
    builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=vocab_size)
    for line in LINES:
        builder.add_item(torch.tensor(line, dtype=torch.int64))
    builder.finalize(prefix + ".idx")
    expected = np.uint16 if vocab_size < 65500 else np.uint32
    assert token_dtype_for(vocab_size) is expected
    assert read_header(prefix + ".idx") == (expected, 3)
    assert token_dtype(prefix + ".idx") is expected
    assert line_sizes(prefix + ".idx").tolist() == [3, 1, 5]
    tokens = np.fromfile(prefix + ".bin", dtype=token_dtype(prefix + ".idx"))
    assert tokens.tolist() == [t for line in LINES for t in line]


def test_fairseq_reads_the_index_written_here(tmp_path):
    prefix = str(tmp_path / "train")
    dtype = token_dtype_for(1000)
    np.array([t for line in LINES for t in line], dtype=dtype).tofile(prefix + ".bin")
    # two chunks, the second split unevenly, as the binarizer's workers return them
    write_index(prefix + ".idx", dtype, [np.array([3], np.int32), np.array([1, 5], np.int32)])
    ds = indexed_dataset.MMapIndexedDataset(prefix)
    assert len(ds) == 3 and ds.sizes.tolist() == [3, 1, 5]
    assert [ds[i].tolist() for i in range(3)] == LINES


def test_refuses_what_is_not_a_version_1_index(tmp_path):
    legacy = tmp_path / "legacy.idx"
    legacy.write_bytes(b"TNTIDX\x00\x00" + bytes(20))  # fairseq's older "cached" format
    with pytest.raises(NotAnIndex, match="legacy.idx: not a fairseq mmap index .*tupe_preprocess.c4 binarize"):
        line_sizes(legacy)
    short = tmp_path / "short.idx"
    short.write_bytes(b"MMIDIDX")
    with pytest.raises(NotAnIndex, match="only 7 bytes"):
        read_header(short)
    truncated = tmp_path / "truncated.idx"
    write_index(truncated, np.uint16, [np.array([3, 1, 5], np.int32)])
    truncated.write_bytes(truncated.read_bytes()[:30])  # header and one size and a half
    with pytest.raises(NotAnIndex, match="truncated \\(1 of 3 line sizes\\)"):
        line_sizes(truncated)
    with pytest.raises(ValueError):  # NotAnIndex is a ValueError: callers that catch those keep working
        token_dtype(legacy)
