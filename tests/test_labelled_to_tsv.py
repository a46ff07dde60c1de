"""tupe_preprocess.labelled_to_tsv: labelled sentences -> a custom task in SST-2's layout."""
from __future__ import annotations

import json
import random

import pytest

from tupe_preprocess import labelled_to_tsv as lt


def rows(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "sentence\tlabel"
    return [tuple(line.split("\t")) for line in lines[1:]]


def test_json_array_split_by_seed_with_label_map(tmp_path):
    items = [{"text": f"sentence number {i}\twith a tab\nand a break", "class": i % 2} for i in range(10)]
    items += [{"text": "  ", "class": 1}, {"class": 0}, {"text": "no label"}]  # skipped: 3
    src = tmp_path / "a.json"
    src.write_text(json.dumps(items))
    out = tmp_path / "task"
    assert lt.main([str(src), "--out-dir", str(out), "--label-field", "class", "--label-map", "0=neg,1=pos",
                    "--dev-fraction", "0.3", "--seed", "7"]) == 0
    dev, train = rows(out / "dev.tsv"), rows(out / "train.tsv")
    # the same shuffle as a plain reference: random.Random(seed).shuffle of the kept examples
    kept = [(f"sentence number {i} with a tab and a break", "pos" if i % 2 else "neg") for i in range(10)]
    random.Random(7).shuffle(kept)
    assert dev == kept[:3] and train == kept[3:]
    record = json.loads((out / lt.RECORD).read_text())
    assert record["counts"]["skipped"] == {"empty text or no label": 3}
    assert record["counts"]["labels"] == {"neg": 5, "pos": 5}


def test_jsonl_and_csv_with_fallback_encoding_and_max_examples(tmp_path):
    jl = tmp_path / "b.jsonl"
    jl.write_text("\n".join(json.dumps({"text": f"t{i}", "label": "x"}) for i in range(4)) + "\n")
    csv_path = tmp_path / "c.csv"
    csv_path.write_bytes("label,text\npositive,caf\xe9 ok\nnegative,\"a, b\"\n".encode("latin-1"))
    out = tmp_path / "task"
    assert lt.main([str(csv_path), "--out-dir", str(out)]) == 1  # not UTF-8, and no fallback given
    assert lt.main([str(jl), str(csv_path), "--out-dir", str(out), "--max-examples", "5",
                    "--fallback-encoding", "latin-1"]) == 0
    every = [(f"t{i}", "x") for i in range(4)] + [("caf\xe9 ok", "positive"), ("a, b", "negative")]
    random.Random(1).shuffle(every)
    assert rows(out / "dev.tsv") == every[:1] and rows(out / "train.tsv") == every[1:5]


def test_rerun_skips_and_other_settings_refused(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text("\n".join(json.dumps({"text": f"s{i}", "label": i % 3}) for i in range(20)) + "\n")
    out = tmp_path / "task"
    assert lt.main([str(src), "--out-dir", str(out)]) == 0
    before = (out / "train.tsv").read_bytes()
    assert lt.main([str(src), "--out-dir", str(out)]) == 0
    assert "skip" in capsys.readouterr().err and (out / "train.tsv").read_bytes() == before
    assert lt.main([str(src), "--out-dir", str(out), "--seed", "2"]) == 2
    assert "seed" in capsys.readouterr().err and (out / "train.tsv").read_bytes() == before
    assert lt.main([str(src), "--out-dir", str(out), "--seed", "2", "--force"]) == 0
    assert (out / "train.tsv").read_bytes() != before


def test_malformed_json_names_file_and_line(tmp_path, capsys):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"text": "a", "label": 1}\n{"text": oops}\n')
    assert lt.main([str(src), "--out-dir", str(tmp_path / "task")]) == 1
    assert f"{src}:2: malformed JSON line" in capsys.readouterr().err
    assert not (tmp_path / "task" / "train.tsv").exists()


def test_bad_options_are_usage_errors(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "a", "label": 1}\n')
    with pytest.raises(SystemExit) as e:
        lt.main([str(src), "--out-dir", str(tmp_path / "t"), "--dev-fraction", "1.5"])
    assert e.value.code == 2
    assert lt.main([str(src), "--out-dir", str(tmp_path / "t")]) == 1  # one example cannot make train + dev
    assert lt.main([str(tmp_path / "none.jsonl"), "--out-dir", str(tmp_path / "t")]) == 1  # a missing input


def test_a_line_break_that_is_not_a_line_feed_stays_inside_its_text(tmp_path):
    """csv and JSON write U+2028, U+0085 (cp1252's ellipsis read as latin-1) and a form feed as they are: they are
    inside a text, not between records (str.splitlines broke there: half an example was kept with the label and
    the other half skipped, and a valid JSON line was refused). A CSV's byte-order mark is no text (its header's
    first name was '\ufefftext', and every row was skipped as having no text)."""
    utf8 = tmp_path / "a.csv"
    utf8.write_bytes(b"\xef\xbb\xbf" + "text,label\ngood movie\u2028really great,1\nfine\x0cok,0\n".encode("utf-8"))
    latin = tmp_path / "b.csv"
    latin.write_bytes(b"text,label\nwell\x85 that was great,1\n")
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"text": "one\u2028two", "label": "2"}, ensure_ascii=False) + "\r\n", encoding="utf-8")
    out = tmp_path / "task"
    assert lt.main([str(utf8), str(latin), str(jl), "--out-dir", str(out), "--fallback-encoding", "latin-1",
                    "--dev-fraction", "0.25"]) == 0
    got = sorted(rows(out / "train.tsv") + rows(out / "dev.tsv"))
    # whole, each break inside a text a space (as tabs and line feeds)
    assert got == sorted([("good movie really great", "1"), ("fine ok", "0"), ("well that was great", "1"),
                          ("one two", "2")])


def test_a_csv_header_without_the_fields_is_an_error_naming_the_file(tmp_path, capsys):
    csv_path = tmp_path / "c.csv"
    csv_path.write_text("sentence,class\na,1\nb,0\n", encoding="utf-8")
    assert lt.main([str(csv_path), "--out-dir", str(tmp_path / "task")]) == 1
    err = capsys.readouterr().err
    assert f"{csv_path}:1: the header has no column 'text', 'label' (it has sentence, class)" in err


def test_a_label_minus_one_is_refused_unless_skipped_or_named(tmp_path, capsys):
    """Hugging Face datasets label an unlabelled example -1 (every example of a test split): taken as it is, it was a
    class of its own (a classifier with one class more, unlabelled rows trained on and counted in dev accuracy)."""
    src = tmp_path / "hf.jsonl"
    labels = [1, 0, -1, 1, 0, -1, 1, 0, float("nan")]  # JSON's NaN is no label: skipped as a missing one
    src.write_text("\n".join(json.dumps({"text": f"s{i}", "label": v}) for i, v in enumerate(labels)) + "\n")
    out = tmp_path / "task"
    assert lt.main([str(src), "--out-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{src}:3: label -1 marks an unlabelled example" in err and "2 of the 8 examples" in err
    assert "--skip-label=-1" in err and "--label-map=-1=NAME" in err
    assert not (out / "train.tsv").exists() and not (out / lt.RECORD).exists()

    assert lt.main([str(src), "--out-dir", str(out), "--skip-label=-1"]) == 0
    got = rows(out / "train.tsv") + rows(out / "dev.tsv")
    assert sorted(label for _, label in got) == ["0", "0", "0", "1", "1", "1"]
    counts = json.loads((out / lt.RECORD).read_text())["counts"]
    assert counts["skipped"] == {"label -1 (--skip-label)": 2, "empty text or no label": 1}

    named = tmp_path / "named"  # where -1 is a class of the data (negative, neutral, positive)
    assert lt.main([str(src), "--out-dir", str(named), "--label-map=-1=negative"]) == 0
    assert json.loads((named / lt.RECORD).read_text())["counts"]["labels"] == {"0": 3, "1": 3, "negative": 2}

    csv_path = tmp_path / "float.csv"  # a CSV written from a float column spells it -1.0
    csv_path.write_text("text,label\na,1.0\nb,-1.0\nc,0.0\n", encoding="utf-8")
    assert lt.main([str(csv_path), "--out-dir", str(tmp_path / "c")]) == 1
    assert f"{csv_path}:3: label -1.0 marks" in capsys.readouterr().err
    assert lt.main([str(csv_path), "--out-dir", str(tmp_path / "c"), "--skip-label", "-1"]) == 0
