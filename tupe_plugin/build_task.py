"""Build a ``tupe_roberta`` model without a fairseq task (the converter, the in-process tests).

``build_model(args, task)`` asks a task for two things only: its dictionary and ``max_positions()``.
"""
from __future__ import annotations

from fairseq.data import Dictionary


class DictionaryTask:
    """The part of a fairseq task that ``build_model`` reads."""

    def __init__(self, dictionary: Dictionary, max_positions: int):
        self.source_dictionary = self.target_dictionary = dictionary
        self._max = max_positions

    def max_positions(self) -> int:
        return self._max


def numbered_dictionary(size: int, prefix: str = "madeupword") -> Dictionary:
    """A fairseq ``Dictionary`` of exactly ``size`` ids: the 4 specials, then ``{prefix}00004``, ..."""
    d = Dictionary()
    while len(d) < size:
        d.add_symbol(f"{prefix}{len(d):05d}")
    return d
