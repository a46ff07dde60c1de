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


def all_docs(out: Path) -> List[dict]:
    """The documents of a one-shard output: train, then validation (one held out: --valid-fraction must be > 0)."""
    valid = read_c4(out / "c4-validation.00000-of-00001.json.gz")
    assert len(valid) == 1
    return read_c4(out / "c4-train.00000-of-00001.json.gz") + valid


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
    assert text_to_c4.main([str(inputs["book"]), str(inputs["jsonl"]), "--out-dir", str(out), "--text-field",
                            "body"]) == 0
    docs = all_docs(out)
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
                            "--keep-lines"]) == 0
    assert sorted(d["text"] for d in all_docs(out)) == [
        "CHAPTER 1\nfirst one\ntext", "more\nCHAPTER 2\nsecond\nCHAPTER 3"]
    out = tmp_path / "regex"
    assert text_to_c4.main([str(inputs["chapters"]), "--out-dir", str(out), "--doc-split", "regex",
                            "--doc-regex", "^CHAPTER "]) == 0
    docs = all_docs(out)
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


def pinned_digest(folder: Path, name: str) -> str:
    """An output's digest as BEFORE_VALID_SEED pins it; the record's without its "files" (added later: the record is
    written as tupe_common.io.write_json writes it), which must list the outputs."""
    data = (folder / name).read_bytes()
    if name == text_to_c4.RECORD:
        record = json.loads(data)
        assert record.pop("files") == sorted(n for n in BEFORE_VALID_SEED if n.endswith(".gz"))
        data = (json.dumps(record, indent=1) + "\n").encode()
    return hashlib.sha256(data).hexdigest()[:16]


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
        assert {n: pinned_digest(tmp_path / name, n) for n in BEFORE_VALID_SEED} == BEFORE_VALID_SEED
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


def test_a_lone_surrogate_is_a_counted_skip(tmp_path, capsys):
    """'\\ud800' is valid JSON but no UTF-8 text: the document is skipped and counted with its file and line (it
    stopped the run with a traceback after some shards were written, and the rerun refused the folder)."""
    src = tmp_path / "s.jsonl"
    src.write_text('{"text": "fine one"}\n{"text": "bad \\ud800 x"}\n{"text": "fine two"}\n{"text": "fine three"}\n')
    out = tmp_path / "o"
    assert text_to_c4.main([str(src), "--out-dir", str(out), "--valid-fraction", "0.3"]) == 0
    assert f"{src}:2: skipped (not_utf8)" in capsys.readouterr().err
    record = json.loads((out / "text_to_c4.json").read_text())
    assert record["counts"]["skipped"] == {"not_utf8": 1} and record["counts"]["documents"] == 3
    kept = sorted(d["text"] for n in shard_files(out) for d in read_c4(out / n))
    assert kept == ["fine one", "fine three", "fine two"]


def shard_files(folder: Path) -> List[str]:
    """The files the C4 pipeline reads from ``folder`` (its TRAIN_GLOB and the validation files)."""
    return sorted(p.name for pattern in ("c4-train.*-of-*.json.gz", "c4-validation.*-of-*.json.gz")
                  for p in folder.glob(pattern))


def test_force_with_other_shards_leaves_only_this_runs_files(tmp_path, capsys):
    """--force with another --shards: the earlier run's shards (those its record lists; every c4-train/-validation
    file when an older record lists none) are removed, so the pipeline's glob reads each document once; without
    --force the run is refused and nothing is touched; another file of the folder is kept, and C4 files that no
    record vouches for are never removed."""
    src = tmp_path / "many.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(40)))
    out = tmp_path / "out"
    args = [str(src), "--out-dir", str(out), "--valid-fraction", "0.1"]
    assert text_to_c4.main([*args, "--shards", "4"]) == 0
    four = [f"c4-train.{k:05d}-of-00004.json.gz" for k in range(4)] + ["c4-validation.00000-of-00001.json.gz"]
    assert json.loads((out / "text_to_c4.json").read_text())["files"] == four
    (out / "notes.txt").write_text("mine\n")
    assert text_to_c4.main([*args, "--shards", "2"]) == 2
    assert shard_files(out) == sorted(four)
    assert text_to_c4.main([*args, "--shards", "2", "--force"]) == 0
    two = ["c4-train.00000-of-00002.json.gz", "c4-train.00001-of-00002.json.gz", "c4-validation.00000-of-00001.json.gz"]
    assert shard_files(out) == two and (out / "notes.txt").read_text() == "mine\n"
    assert json.loads((out / "text_to_c4.json").read_text())["files"] == two
    urls = [d["url"] for n in two for d in read_c4(out / n)]
    assert sorted(urls) == sorted(f"many.jsonl#{i}" for i in range(1, 41))  # every document exactly once
    # a record written before "files" (or none): every shard file of the folder is this tool's earlier output
    record = json.loads((out / "text_to_c4.json").read_text())
    del record["files"]
    (out / "text_to_c4.json").write_text(json.dumps(record))
    (out / "c4-train.00007-of-00009.json.gz").write_bytes(b"")
    capsys.readouterr()
    assert text_to_c4.main([*args, "--shards", "3", "--force"]) == 0
    assert shard_files(out) == [f"c4-train.{k:05d}-of-00003.json.gz" for k in range(3)] + [
        "c4-validation.00000-of-00001.json.gz"]
    assert (out / "notes.txt").read_text() == "mine\n"
    # no record at all (a folder of C4 downloads?): its files are never removed, --force or not
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "c4-train.00000-of-01024.json.gz").write_bytes(b"real")
    assert text_to_c4.main([str(src), "--out-dir", str(downloads), "--valid-fraction", "0.1", "--force"]) == 2
    assert "holds C4 files that no run of text_to_c4 recorded (c4-train.00000-of-01024.json.gz)" in capsys.readouterr().err
    assert shard_files(downloads) == ["c4-train.00000-of-01024.json.gz"]


@pytest.mark.parametrize("argv, says", [
    (["--valid-fraction", "0"], "--valid-fraction must be in (0, 1)"),
    (["--valid-fraction", "-0.1"], "--valid-fraction must be in (0, 1)"),
])
def test_no_validation_documents_is_a_usage_error(tmp_path, inputs, capsys, argv, says):
    """The pipeline needs a non-empty validation file: a fraction of 0 is refused before any work."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        text_to_c4.main([str(inputs["book"]), str(inputs["chapters"]), "--out-dir", str(out), *argv])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not out.exists()


def test_a_corpus_too_small_to_hold_out_a_document_is_refused(tmp_path, inputs, capsys):
    """One document: nothing to hold out for validation (and train); exit 2 naming the fix, nothing written."""
    out = tmp_path / "out"
    assert text_to_c4.main([str(inputs["book"]), "--out-dir", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "text_to_c4: error: 1 document(s) leave no validation document at --valid-fraction 0.01 (the pipeline needs "
        "one): give more documents or a larger --valid-fraction")
    assert not out.exists()
