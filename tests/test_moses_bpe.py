"""The original TUPE release's text -> units chain (tupe_preprocess.moses_bpe) and its GLUE binarization.

Expected outputs are worked out by hand from the rules (fastBPE applybpe: merges by line order,
``</w>`` on the last character, ``@@`` on non-final pieces; the original GLUE cleanup scripts)."""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import run
from tupe_preprocess.moses_bpe import (FastBPE, MosesBPE, glue_cleanup, pre_cleanup, read_codes,
                                  remove_non_printing, replace_patterns)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "data", "glue")

# Hand-made codes; line order is the merge priority.
CODES = """\
l o 100
lo w</w> 90
e r</w> 80
n e 70
ne w 60
l o</w> 50
w e 40
a a 30
aa a</w> 20
b c 10
a b 9
c a</w> 5
é t 4
"""


@pytest.fixture(scope="module")
def bpe():
    return FastBPE(read_codes(CODES.splitlines(True)))


@pytest.mark.parametrize("word, units", [
    ("low", ["low"]),  # l o -> lo, then lo w</w> -> low</w>
    ("lower", ["lo@@", "w@@", "er"]),  # l o (rank 0), e r</w> (2) before w e (6); lo w is no code
    ("newer", ["new@@", "er"]),  # e r</w> (2), n e (3), ne w (4); w e never applies
    ("lo", ["lo"]),  # 'l o' does not apply to l o</w>; 'l o</w>' does
    ("aaa", ["aaa"]),  # a a -> aa a</w> -> aaa</w>
    ("aaaa", ["aa@@", "a@@", "a"]),  # a a merged left to right without overlap: aa a a</w>
    ("abca", ["a@@", "bc@@", "a"]),  # b c (rank 9) wins over a b (10); then nothing applies
    ("été", ["ét@@", "é"]),  # characters, not bytes
    ("x", ["x"]),
    ("<url>", ["<url>"]),  # fastBPE's special tokens are never split
    ("<x>", ["<@@", "x@@", ">"]),
])
def test_fastbpe_segmentation(bpe, word, units):
    assert bpe.segment(word) == units


def test_fastbpe_applies_per_word(bpe):
    assert bpe.apply("low lower  x\n") == ["low", "lo@@", "w@@", "er", "x"]


def test_codes_file_errors():
    with pytest.raises(ValueError, match="line 2: expected 'left right count'"):
        read_codes(["a b 3\n", "a b\n"])
    with pytest.raises(ValueError, match="listed twice"):
        read_codes(["a b 3\n", "a b 2\n"])


@pytest.mark.parametrize("text, want", [
    ("a\tb   c ", "a b c"),
    ("wait.... what", "wait... what"),
    ("say <<hi>> now", "say «hi» now"),
    ("x ,:.)]» y", "x,:.)]» y"),  # the original's bracket rule only matches this literal sequence
    ("a,, b,. c", "a, b. c"),
    ("a *bold* b", "a bold* b"),
])
def test_pre_cleanup(text, want):
    assert pre_cleanup(text) == want


@pytest.mark.parametrize("text, want", [
    ('He said "Hi!"', 'he said " hi ! "'),
    ("Wait...now", "wait . . . now"),  # '...' set apart, then '..' within it, then one char at a time
    ("back\\slash  x", "back slash x"),
    ("(U.S.)", "( u.s . )"),  # only leading/trailing punctuation is split off
])
def test_glue_cleanup(text, want):
    assert glue_cleanup(text) == want


@pytest.mark.parametrize("text, want", [
    ("see http://a.b/c?d=1 now", "see <url> now"),
    ("www.news.com", "<url>"),
    ("news.com", "news.com"),  # the original's bare-URL class excludes 's' (meant \\s)
    ("foo.com", "<url>"),
    ("bob_1@mail.co.uk", "<email>"),
    ("report_2020.pdf", "<file>"),
    ("well-known", "well - known"),
])
def test_replace_patterns(text, want):
    assert replace_patterns(text) == want


def test_non_printing_characters_become_spaces():
    assert remove_non_printing("a\u200bb\x07c") == "a b c"


@pytest.fixture(scope="module")
def moses_bpe(bpe):
    return MosesBPE(bpe)


def test_words_before_bpe(moses_bpe):
    assert moses_bpe.words("Isn't it WELL-known?") == "isn 't it well - known ?"
    assert moses_bpe.words("He said <<hello>>,, then left....") == 'he said " hello , " then left . . .'
    assert moses_bpe.words("Mail me at www.example.com!") == "mail me at < url > !"  # as the GLUE script


# Hand-made codes for the GLUE test, and the units of two RTE dev sentences worked out by hand.
GLUE_CODES = "t h 50\nth e</w> 40\no l 30\nol d</w> 20\na i 10\np ai 9\nc a 8\n"
CAPTAIN = 'The captain painted the bridge for the "old" mayor.'
CAPTAIN_UNITS = ["the", "ca@@", "p@@", "t@@", "ai@@", "n", "pai@@", "n@@", "t@@", "e@@", "d", "the",
                 "b@@", "r@@", "i@@", "d@@", "g@@", "e", "f@@", "o@@", "r", "the", '"', "old", '"',
                 "m@@", "a@@", "y@@", "o@@", "r", "."]
CAFE = "The writer admired the map at the café."
CAFE_UNITS = ["the", "w@@", "r@@", "i@@", "t@@", "e@@", "r", "a@@", "d@@", "m@@", "i@@", "r@@", "e@@", "d",
              "the", "m@@", "a@@", "p", "a@@", "t", "the", "ca@@", "f@@", "é", "."]
LEFT_OUT = "ai@@"  # not in the test dict.txt: must become <unk> (3)


def test_hand_worked_units_of_two_rte_sentences(tmp_path):
    (tmp_path / "codes").write_text(GLUE_CODES, encoding="utf-8")
    tokenize = MosesBPE(FastBPE.from_file(str(tmp_path / "codes")))
    assert tokenize(CAPTAIN) == CAPTAIN_UNITS
    assert tokenize(CAFE) == CAFE_UNITS


def rte_texts():
    texts = []
    for fname in ("train.tsv", "dev.tsv", "test.tsv"):
        with open(os.path.join(FIXTURES, "RTE", fname), encoding="utf-8") as f:
            texts += [field for line in list(f)[1:] for field in line.rstrip("\n").split("\t")[1:3]]
    return texts


def test_glue_binarize_with_moses_bpe(tmp_path, starts_process):
    from fairseq.data import Dictionary, data_utils

    codes = tmp_path / "code"
    codes.write_text(GLUE_CODES, encoding="utf-8")
    tokenize = MosesBPE(FastBPE.from_file(str(codes)))
    units = sorted({u for text in rte_texts() for u in tokenize(text)} - {LEFT_OUT})
    (tmp_path / "dict.txt").write_text("".join(f"{u} 1\n" for u in units), encoding="utf-8")
    out = tmp_path / "glue-bin"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    run([sys.executable, "-m", "tupe_preprocess.glue_binarize", "--glue-dir", FIXTURES, "--tasks", "RTE", "--tokenizer",
         "moses_bpe", "--bpe-codes", str(codes), "--dict", str(tmp_path / "dict.txt"), "--out-dir", str(out),
         "--workers", "2"], cwd=REPO, env=env, timeout=300)

    d = Dictionary.load(str(tmp_path / "dict.txt"))

    def load(split, k):
        ds = data_utils.load_indexed_dataset(str(out / "RTE-bin" / f"input{k}" / split), d)
        return [ds[i].tolist() for i in range(len(ds))]

    with open(os.path.join(FIXTURES, "RTE", "dev.tsv"), encoding="utf-8") as f:
        dev = [line.rstrip("\n").split("\t") for line in list(f)[1:]]
    valid0 = load("valid", 0)
    assert dev[0][1] == CAPTAIN
    assert valid0[0] == [d.index(u) for u in CAPTAIN_UNITS] + [d.eos()]
    assert valid0[0][4] == d.unk() == 3  # "ai@@" left out of the dict
    with open(os.path.join(FIXTURES, "RTE", "test.tsv"), encoding="utf-8") as f:
        test = [line.rstrip("\n").split("\t") for line in list(f)[1:]]
    cafe = next(i for i, row in enumerate(test) if row[1] == CAFE)
    assert load("test", 0)[cafe] == [d.index(u) for u in CAFE_UNITS] + [d.eos()]
    for k in (0, 1):  # every line of every split: the dict lookup of the tokenizer's units
        for split, fname in (("train", "train.tsv"), ("valid", "dev.tsv"), ("test", "test.tsv")):
            with open(os.path.join(FIXTURES, "RTE", fname), encoding="utf-8") as f:
                texts = [line.rstrip("\n").split("\t")[1 + k] for line in list(f)[1:]]
            assert load(split, k) == [[d.index(u) for u in tokenize(t)] + [d.eos()] for t in texts]
    manifest = json.loads((out / "RTE-bin" / "glue_binarize.json").read_text())
    assert manifest["tokenizer"] == "moses_bpe" and manifest["bpe_codes"] == str(codes)


def test_moses_bpe_needs_codes(tmp_path, starts_process):
    proc = run([sys.executable, "-m", "tupe_preprocess.glue_binarize", "--glue-dir", FIXTURES, "--tasks", "RTE",
                "--tokenizer", "moses_bpe", "--dict", "dict.txt", "--out-dir", str(tmp_path)], cwd=REPO, check=False,
               timeout=120)
    assert proc.returncode == 2 and "--bpe-codes is required with --tokenizer moses_bpe" in proc.stderr
