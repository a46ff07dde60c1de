"""fairseq's ``dict.txt`` and its binaries without importing fairseq or torch (~6 s of CPU a start): the parts of
``fairseq.data.Dictionary`` and of its mmap dataset builder that ``tupe_preprocess.glue_binarize`` needs, with the same
results byte for byte (tests/test_glue_preprocess.py compares them with fairseq-preprocess's files).

fairseq 0.12's rules, restated:

- a dictionary starts with the four specials ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 (count 1 each), and
  ``eos()``, ``unk()`` and an unknown symbol's id stay 2 and 3;
- ``dict.txt`` holds one ``<symbol> <count>`` line per further symbol (``#fairseq:overwrite`` after the count lets a
  line replace an earlier symbol; any other repeated symbol is an error); saving writes the symbols after the
  specials with their counts;
- ``finalize`` orders the non-special symbols by count, ties alphabetically, and pads the dictionary to a multiple
  of ``padding_factor`` with ``madeupword0000``, ``madeupword0001``, ... (count 0);
- the binaries are the ``.bin`` of the lines' token ids, back to back, in the smallest dtype that holds the
  dictionary's size (``tupe_common.mmap_index.token_dtype_for``), and its ``.idx``.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List

import numpy as np

from tupe_common.mmap_index import token_dtype_for, write_index

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
OVERWRITE = "#fairseq:overwrite"


class FairseqDict:
    """Symbols and counts in fairseq's order: ``indices`` maps a symbol to its id."""

    def __init__(self) -> None:
        self.symbols: List[str] = []
        self.count: List[int] = []
        self.indices: Dict[str, int] = {}
        self.eos_index, self.unk_index = [self.add_symbol(special) for special in SPECIALS][2:]
        self.nspecial = len(SPECIALS)

    def __len__(self) -> int:
        return len(self.symbols)

    def eos(self) -> int:
        return self.eos_index

    def unk(self) -> int:
        return self.unk_index  # the special's id, even where a dict.txt line overwrote the symbol

    def index(self, symbol: str) -> int:
        return self.indices.get(symbol, self.unk_index)

    def add_symbol(self, symbol: str, n: int = 1, overwrite: bool = False) -> int:
        if symbol in self.indices and not overwrite:
            self.count[self.indices[symbol]] += n
            return self.indices[symbol]
        self.indices[symbol] = len(self.symbols)
        self.symbols.append(symbol)
        self.count.append(n)
        return self.indices[symbol]

    @classmethod
    def load(cls, path: str) -> "FairseqDict":
        """``dict.txt`` read as fairseq reads it; ``ValueError`` naming the file and the line where it is not one."""
        d = cls()
        try:
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    fields = line.rstrip().rsplit(" ", 1)
                    overwrite = len(fields) == 2 and fields[1] == OVERWRITE
                    if overwrite:
                        fields = fields[0].rsplit(" ", 1)
                    if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
                        raise ValueError(f"line {number}: expected '<symbol> <count> [{OVERWRITE}]', "
                                         f"got {line.rstrip()!r}")
                    if fields[0] in d.indices and not overwrite:
                        raise ValueError(f"line {number}: {fields[0]!r} again (a repeated symbol needs {OVERWRITE})")
                    d.add_symbol(fields[0], int(fields[1]), overwrite)
        except ValueError as e:  # UnicodeDecodeError included
            raise ValueError(f"{path}: not a fairseq dict.txt ({e})") from None
        return d

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{s} {c}\n" for s, c in zip(self.symbols[self.nspecial:], self.count[self.nspecial:]))

    def finalize(self, padding_factor: int = 8) -> None:
        """Non-special symbols by count (ties alphabetically), then padded to a multiple of ``padding_factor``."""
        ordered = Counter(dict(sorted(zip(self.symbols[self.nspecial:], self.count[self.nspecial:])))).most_common()
        self.symbols, self.count = self.symbols[:self.nspecial], self.count[:self.nspecial]
        self.indices = {s: i for i, s in enumerate(self.symbols)}
        for symbol, count in ordered:
            self.add_symbol(symbol, count)
        i = 0
        while len(self) % padding_factor:
            self.add_symbol(f"madeupword{i:04d}", 0)
            i += 1


def write_binaries(prefix: str, lines: Iterable[np.ndarray], vocab_size: int) -> int:
    """``prefix.bin`` and ``prefix.idx`` of ``lines`` (token id arrays) as fairseq's mmap builder writes them for a
    dictionary of ``vocab_size``; the number of lines."""
    dtype = token_dtype_for(vocab_size)
    sizes: List[int] = []
    with open(prefix + ".bin", "wb") as f:
        for line in lines:
            f.write(np.asarray(line).astype(dtype).tobytes())
            sizes.append(len(line))
    write_index(prefix + ".idx", dtype, [np.asarray(sizes, dtype=np.int64)])
    return len(sizes)
