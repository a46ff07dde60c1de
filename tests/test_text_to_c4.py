"""tupe_preprocess.text_to_c4: documents, counts, the held-out split, determinism, reruns; then step 1 reads it."""
from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path
from typing import List

import pytest

from tupe_preprocess import c4_extract, text_to_c4


def read_c4(path: Path) -> List[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def inputs(tmp_path) -> dict:
    book = tmp_path / "book.txt"  # hard-wrapped paragraphs, CRLF line ends
    book.write_bytes(b"Call me Ishmael. Some years\r\nago, never mind how long.\r\n\r\n\r\nIt is a way I have\r\n"
                     b"of driving off the spleen.\r\n")
    chapters = tmp_path / "chapters.txt"
    chapters.write_text("CHAPTER 1\nfirst one\ntext\n\nmore\nCHAPTER 2\nsecond\nCHAPTER 3\n\n")
    jl = tmp_path / "speeches.jsonl.gz"
    with gzip.open(jl, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"body": "Fellow citizens.\n\nWe meet today."}) + "\n")
        f.write("{not json\n")
        f.write(json.dumps({"other": 1}) + "\n")
        f.write(json.dumps({"body": "  "}) + "\n")
        f.write(json.dumps({"body": "A second address."}) + "\n")
    return {"book": book, "chapters": chapters, "jsonl": jl}


def test_documents_paragraphs_and_skips(tmp_path, inputs):
    out = tmp_path / "out"
    assert text_to_c4.main([str(inputs["book"]), str(inputs["jsonl"]), "--out-dir", str(out), "--text-field", "body",
                            "--valid-fraction", "0"]) == 0
    docs = read_c4(out / "c4-train.00000-of-00001.json.gz")
    assert read_c4(out / "c4-validation.00000-of-00001.json.gz") == []
    texts = sorted(d["text"] for d in docs)
    assert texts == sorted(["Call me Ishmael. Some years ago, never mind how long.\n"
                            "It is a way I have of driving off the spleen.",
                            "Fellow citizens.\nWe meet today.", "A second address."])
    assert sorted(d["url"] for d in docs) == ["book.txt#0", "speeches.jsonl.gz#1", "speeches.jsonl.gz#5"]
    assert set(docs[0]) == {"text", "timestamp", "url"}
    counts = json.loads((out / "text_to_c4.json").read_text())["counts"]
    assert counts["skipped"] == {"malformed_json": 1, "no_text_field": 2}
    assert counts["documents_per_input"] == {"book.txt": 1, "speeches.jsonl.gz": 2}


def test_blank_and_regex_document_splits(tmp_path, inputs):
    out = tmp_path / "blank"
    assert text_to_c4.main([str(inputs["chapters"]), "--out-dir", str(out), "--doc-split", "blank",
                            "--valid-fraction", "0", "--keep-lines"]) == 0
    assert sorted(d["text"] for d in read_c4(out / "c4-train.00000-of-00001.json.gz")) == [
        "CHAPTER 1\nfirst one\ntext", "more\nCHAPTER 2\nsecond\nCHAPTER 3"]
    out = tmp_path / "regex"
    assert text_to_c4.main([str(inputs["chapters"]), "--out-dir", str(out), "--doc-split", "regex",
                            "--doc-regex", "^CHAPTER ", "--valid-fraction", "0"]) == 0
    docs = read_c4(out / "c4-train.00000-of-00001.json.gz")
    # the text before CHAPTER 1 and after CHAPTER 3 is empty: skipped and counted
    assert sorted(d["text"] for d in docs) == ["first one text\nmore", "second"]
    assert json.loads((out / "text_to_c4.json").read_text())["counts"]["skipped"] == {"empty_or_short": 2}


def test_shards_and_held_out_fraction_are_deterministic(tmp_path):
    rng = random.Random(0)
    src = tmp_path / "many.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i} " + "word " * rng.randint(1, 9)}) + "\n"
                           for i in range(103)))
    args = [str(src), "--shards", "4", "--valid-fraction", "0.1", "--seed", "7"]
    assert text_to_c4.main([*args, "--out-dir", str(tmp_path / "a")]) == 0
    assert text_to_c4.main([*args, "--out-dir", str(tmp_path / "b")]) == 0
    names = [f"c4-train.{k:05d}-of-00004.json.gz" for k in range(4)] + ["c4-validation.00000-of-00001.json.gz"]
    for n in names:  # byte-identical reruns
        assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes()
    parts = [read_c4(tmp_path / "a" / n) for n in names]
    assert [len(p) for p in parts] == [23, 23, 23, 24, 10]  # round(0.1 * 103) = 10 held out, 93 over 4 shards
    urls = [d["url"] for p in parts for d in p]
    assert sorted(urls) == sorted(f"many.jsonl#{i}" for i in range(1, 104))  # every document exactly once
    assert text_to_c4.main([*args[:-1], "8", "--out-dir", str(tmp_path / "c")]) == 0  # another seed
    assert {d["url"] for d in read_c4(tmp_path / "c" / names[-1])} != {d["url"] for d in parts[-1]}


# sha256 (first 16 hex) of each output of the corpus above (seed 7), as text_to_c4 wrote it before --valid-seed
BEFORE_VALID_SEED = {"c4-train.00000-of-00004.json.gz": "2b63336ed36e166c", "c4-train.00001-of-00004.json.gz":
                     "6829a1de06678c76", "c4-train.00002-of-00004.json.gz": "f206996d5703af98",
                     "c4-train.00003-of-00004.json.gz": "eae926ccb8c04cbd",
                     "c4-validation.00000-of-00001.json.gz": "fb88ac92ff12bdf6", "text_to_c4.json": "392648b7f806d696"}


def test_valid_seed_draws_its_own_held_out_documents_and_its_default_is_the_old_draw(tmp_path):
    """Without --valid-seed (or with it equal to --seed) the files and the record are byte for byte those made before
    the option, so existing corpora are reproduced and their reruns skip; another --valid-seed holds out other
    documents, as many, every document still exactly once, the train documents in --seed's order."""
    rng = random.Random(0)
    src = tmp_path / "many.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i} " + "word " * rng.randint(1, 9)}) + "\n"
                           for i in range(103)))
    args = [str(src), "--shards", "4", "--valid-fraction", "0.1", "--seed", "7"]
    for name, extra in (("old", []), ("same", ["--valid-seed", "7"])):
        assert text_to_c4.main([*args, *extra, "--out-dir", str(tmp_path / name)]) == 0
        assert {n: hashlib.sha256((tmp_path / name / n).read_bytes()).hexdigest()[:16]
                for n in BEFORE_VALID_SEED} == BEFORE_VALID_SEED
    assert text_to_c4.main([*args, "--valid-seed", "3", "--out-dir", str(tmp_path / "new")]) == 0
    names = sorted(n for n in BEFORE_VALID_SEED if n.endswith(".gz"))
    old, new = ([d["url"] for d in read_c4(tmp_path / f / names[-1])] for f in ("old", "new"))
    assert len(new) == len(old) == 10 and set(new) != set(old)
    train = [d["url"] for n in names[:-1] for d in read_c4(tmp_path / "new" / n)]
    old_train = [d["url"] for n in names[:-1] for d in read_c4(tmp_path / "old" / n)]
    assert sorted(train + new) == sorted(f"many.jsonl#{i}" for i in range(1, 104))
    order = [u for u in old + old_train if u not in new]  # --seed's shuffle without the held-out documents
    assert train == order
    record = json.loads((tmp_path / "new" / "text_to_c4.json").read_text())["settings"]
    assert record["valid_seed"] == 3 and "valid_seed" not in \
        json.loads((tmp_path / "old" / "text_to_c4.json").read_text())["settings"]


def test_rerun_skips_refuses_other_settings_and_step1_reads_it(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    args = [str(inputs["book"]), str(inputs["chapters"]), "--out-dir", str(out), "--valid-fraction", "0.5"]
    assert text_to_c4.main(args) == 0
    assert text_to_c4.main(args) == 0 and "skip:" in capsys.readouterr().err
    assert text_to_c4.main([*args, "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert "seed: recorded 1, now 2" in err and "--force" in err
    assert text_to_c4.main([*args, "--seed", "2", "--force"]) == 0
    # the C4 step 1 reads the output unchanged
    for name in ("c4-train.00000-of-00001.json.gz", "c4-validation.00000-of-00001.json.gz"):
        assert c4_extract.main([str(out / name), str(tmp_path / (name + ".txt")), "--progress-seconds", "0"]) == 0
    text = (tmp_path / "c4-train.00000-of-00001.json.gz.txt").read_text() + \
        (tmp_path / "c4-validation.00000-of-00001.json.gz.txt").read_text()
    assert text.count("\n\n") == 2 and "Call me Ishmael." in text


def test_no_usable_document_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    assert text_to_c4.main([str(empty), "--out-dir", str(tmp_path / "o")]) == 1
    assert "no usable document" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
