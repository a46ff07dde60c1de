"""Text -> the BPE units of the original TUPE release (``dict.txt`` over lower-cased Moses + fastBPE).

The original GLUE script (guolinke/TUPE ``preprocess/glue/process.sh``) turns each text field into
units with this chain, reproduced here step by step in pure Python:

1. ``precleanup_english.py``: tabs to spaces, collapse spaces, ``....``+ to ``...``, ``<<``/``>>`` to
   ``«``/``»``, ``,,`` to ``,`` and ``,.`` to ``.``, drop a ``*`` that starts a word;
2. Moses ``normalize-punctuation.perl en`` (``sacremoses``, perl parity);
3. Moses ``remove-non-printing-char.perl``: every Unicode "other" (``\\p{C}``) character becomes a space;
4. ``glue/cleanup.py``: lower-case, backslashes to spaces, ``...``/``..`` set apart, and leading and
   trailing ASCII punctuation split off every word, one character at a time;
5. ``replace_patterns.py``: a word that is a URL, e-mail address or file name becomes ``<url>``,
   ``<email>``, ``<file>``; hyphens are split off (``a-b`` -> ``a - b``);
6. Moses ``tokenizer.perl -no-escape -l en`` (``sacremoses``), then lower-case again;
7. ``fastbpe applybpe`` with the release's codes file (:class:`FastBPE`).

``TOKENIZERS["moses_bpe"]`` in :mod:`tupe_preprocess.glue_binarize` uses :func:`moses_bpe_tokenizer`
(``--tokenizer moses_bpe --bpe-codes CODES --dict dict.txt``).
"""
from __future__ import annotations

import re
import string
from typing import Callable, Dict, Iterable, List, Sequence, Tuple
from tupe_common.errors import exit_main

END_OF_WORD = "</w>"
CONTINUATION = "@@"
# applybpe of the TUPE fork never splits these (fastBPE.hpp, special_tokens)
FASTBPE_SPECIALS = frozenset({"<unk>", "<url>", "<file>", "<email>"})


# --------------------------------------------------------------------------------------------
# fastBPE applybpe
# --------------------------------------------------------------------------------------------


def read_codes(lines: Iterable[str], source: str = "codes") -> Dict[Tuple[str, str], int]:
    """``a b count`` per line -> {(a, b): rank}; rank = line order (earlier merges first)."""
    ranks: Dict[Tuple[str, str], int] = {}
    for lineno, line in enumerate(lines, 1):
        fields = line.rstrip("\n").split(" ")
        if line.strip() == "":
            continue
        if len(fields) != 3:
            raise ValueError(f"{source}, line {lineno}: expected 'left right count', got {line.rstrip()!r}")
        pair = (fields[0], fields[1])
        if pair in ranks:
            raise ValueError(f"{source}, line {lineno}: merge {pair} is listed twice")
        ranks[pair] = len(ranks)
    return ranks


class FastBPE:
    """fastBPE's ``applybpe`` without a vocabulary: merges by priority, ``@@`` on non-final pieces.

    A word is split into characters with ``</w>`` on the last one; the adjacent pair with the
    smallest rank is merged everywhere in the word (left to right, non-overlapping), until no pair
    has a rank. Pieces are written with ``@@`` except the last, whose ``</w>`` is dropped.
    """

    def __init__(self, ranks: Dict[Tuple[str, str], int]):
        self.ranks = ranks
        self._cache: Dict[str, List[str]] = {}

    @classmethod
    def from_file(cls, path: str) -> "FastBPE":
        """The codes of ``path``; a missing file, a folder or a line that is not UTF-8 is named (tupe_common.io)."""
        from tupe_common.io import utf8_lines

        return cls(read_codes((line for _, line in utf8_lines(path)), path))

    def segment(self, word: str) -> List[str]:
        """One whitespace-free word -> its BPE units, e.g. ``lower`` -> ``['low@@', 'er']``."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        if word in FASTBPE_SPECIALS:
            return [word]
        pieces = list(word[:-1]) + [word[-1] + END_OF_WORD]
        while len(pieces) > 1:
            best, best_rank = None, None
            for pair in zip(pieces, pieces[1:]):
                rank = self.ranks.get(pair)
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = pair, rank
            if best is None:
                break
            merged, i = [], 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == best:
                    merged.append(pieces[i] + pieces[i + 1])
                    i += 2
                else:
                    merged.append(pieces[i])
                    i += 1
            pieces = merged
        out = [p + CONTINUATION for p in pieces[:-1]] + [pieces[-1][: -len(END_OF_WORD)]]
        self._cache[word] = out
        return out

    def apply(self, text: str) -> List[str]:
        """Space-separated words -> units (fastBPE splits words on spaces and newlines)."""
        return [unit for word in text.split() for unit in self.segment(word)]


# --------------------------------------------------------------------------------------------
# The original GLUE text cleanup (steps 1-5)
# --------------------------------------------------------------------------------------------

_NON_PRINTING = None


def pre_cleanup(line: str) -> str:
    """Step 1 (``precleanup_english.py``)."""
    line = " ".join(line.replace("\t", " ").split())
    line = re.sub(r"\.{4,}", "...", line)
    line = line.replace("<<", "«").replace(">>", "»")
    # The original's two "space before/after brackets" substitutions have no character class, so they
    # only ever match these literal sequences; kept as written for identical output.
    line = line.replace(" ,:.)]»", ",:.)]»").replace("[(« ", "[(«")
    line = line.replace(",,", ",").replace(",.", ".")
    line = re.sub(r" \*(\S)", r" \1", line)
    return " ".join(line.split())


def remove_non_printing(line: str) -> str:
    """Step 3 (``remove-non-printing-char.perl``): ``\\p{C}`` -> space."""
    global _NON_PRINTING
    if _NON_PRINTING is None:
        import regex  # a dependency of sacremoses; has \\p{C} like perl

        _NON_PRINTING = regex.compile(r"\p{C}")
    return _NON_PRINTING.sub(" ", line)


def _split_punctuation(word: str) -> List[str]:
    core = word.lstrip(string.punctuation)
    lead = word[: len(word) - len(core)]
    body = core.rstrip(string.punctuation)
    trail = core[len(body):]
    return list(lead) + ([body] if body else []) + list(trail)


def glue_cleanup(line: str) -> str:
    """Step 4 (``glue/cleanup.py``): lower-case and set punctuation apart."""
    line = line.strip().lower().replace("\\", " ")
    line = re.sub(r"\s\s+", " ", line)
    line = line.replace("...", " ... ").replace("..", " .. ")
    return " ".join(piece for word in line.split() for piece in _split_punctuation(word))


_EMAIL = re.compile(r"[a-z0-9_.\-]+@(?:\[[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.|(?:[a-z0-9\-]+\.)+)"
                    r"(?:[a-z]{2,4}|[0-9]{1,3})\]?")
_URL = re.compile(r"(?:(?:https?|ftp)://|www\.)[-a-z0-9+&@#/%?=~_|!:,.;]*[-a-z0-9+&@#/%=~_|]")
# As in the original, the class excludes the letters '$' and 's' (it was meant to be \s), so e.g.
# "news.com" is not matched; kept for identical output.
_BARE_URL = re.compile(r"[^$s]{3,}\.(?:com|net|org|edu|gov)")
_FILE = re.compile(r"[a-z_-][a-z0-9_-]{4,}\.(?:pdf|mp4|mp3|doc|xls|docx|ppt|pptx|wav|wma|csv|tsv|cpp|py|bat|reg|"
                   r"png|jpg|mov|avi|gif|rtf|txt|bmp|mid)")


def replace_patterns(line: str) -> str:
    """Step 5 (``replace_patterns.py``): whole-word URL/e-mail/file -> placeholder; split hyphens."""
    out = []
    for word in line.split():
        for pattern, placeholder in ((_URL, "<url>"), (_BARE_URL, "<url>"), (_EMAIL, "<email>"),
                                     (_FILE, "<file>")):
            if pattern.fullmatch(word):
                word = placeholder
        out.append(" - ".join(word.split("-")))
    return " ".join(out)


# --------------------------------------------------------------------------------------------
# The whole chain
# --------------------------------------------------------------------------------------------


class MosesBPE:
    """Raw text -> the release's BPE units (steps 1-7 of the module docstring)."""

    def __init__(self, bpe: FastBPE):
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        self.bpe = bpe
        self.normalizer = MosesPunctNormalizer(lang="en", perl_parity=True)
        self.tokenizer = MosesTokenizer(lang="en")

    def clean(self, text: str) -> str:
        """Steps 1-5: what the original fed to the Moses tokenizer."""
        text = pre_cleanup(text)
        text = self.normalizer.normalize(text)
        text = remove_non_printing(text)
        return replace_patterns(glue_cleanup(text))

    def words(self, text: str) -> str:
        """Steps 1-6: lower-cased Moses tokens, space-separated."""
        return self.tokenizer.tokenize(self.clean(text), escape=False, return_str=True).lower()

    def __call__(self, text: str) -> List[str]:
        return self.bpe.apply(self.words(text))


def moses_bpe_tokenizer(opts: Dict[str, str]) -> Callable[[str], List[str]]:
    """``TOKENIZERS`` factory for :mod:`tupe_preprocess.glue_binarize`; needs ``opts["bpe_codes"]``."""
    return MosesBPE(FastBPE.from_file(opts["bpe_codes"]))


def main(argv: Sequence[str] = None) -> int:
    """``python -m tupe_preprocess.moses_bpe --bpe-codes CODES < raw.txt > units.txt`` (one line per line)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bpe-codes", required=True, help="fastBPE codes of the release (lines 'a b count')")
    args = p.parse_args(argv)
    try:  # missing or a folder (OSError: exit_main's line), not UTF-8 or not codes: one line naming it, exit 1
        tokenize = moses_bpe_tokenizer({"bpe_codes": args.bpe_codes})
    except ValueError as e:
        sys.stderr.write(f"moses_bpe: error: {e}\n")
        return 1
    for line in sys.stdin:
        sys.stdout.write(" ".join(tokenize(line.rstrip("\n"))) + "\n")
    return 0


def cli() -> None:
    """The console script ``tupe-moses-bpe``."""
    exit_main(main, "tupe-moses-bpe")


if __name__ == "__main__":
    exit_main(main, "moses_bpe")
