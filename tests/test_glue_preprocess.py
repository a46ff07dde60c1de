"""GLUE TSV -> fairseq binaries, through the real CLI on the fixtures in tests/data/glue."""
from __future__ import annotations

import filecmp
import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import sentencepiece as spm

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "data", "glue")
sys.path[:0] = [REPO, os.path.join(REPO, "tests")]
import make_glue_fixtures  # noqa: E402
from conftest import run  # noqa: E402
from full_disk import full_disk_script  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO}
VENV_BIN = os.path.dirname(sys.executable)  # fairseq-train / fairseq-preprocess of this interpreter

# Written out independently of tupe_preprocess.glue_binarize and tupe_glue.tasks, from docs/glue_protocol.md §1:
# task -> {raw file: (fairseq split, header?, input columns, label column or None)}; 1-based.


def three_files(inputs, label, test_inputs, header=True):
    """train.tsv and dev.tsv with labels, test.tsv without (every task but MNLI)."""
    return {"train.tsv": ("train", header, inputs, label), "dev.tsv": ("valid", header, inputs, label),
            "test.tsv": ("test", True, test_inputs, None)}


RAW = {
    "CoLA": three_files((4,), 2, (2,), header=False),
    "SST-2": three_files((1,), 2, (2,)),
    "MRPC": three_files((4, 5), 1, (4, 5)),
    "STS-B": three_files((8, 9), 10, (8, 9)),
    "QQP": three_files((4, 5), 6, (2, 3)),
    "MNLI": {"train.tsv": ("train", True, (9, 10), 12),
             "dev_matched.tsv": ("valid", True, (9, 10), 16),
             "dev_mismatched.tsv": ("valid1", True, (9, 10), 16),
             "test_matched.tsv": ("test", True, (9, 10), None),
             "test_mismatched.tsv": ("test1", True, (9, 10), None)},
    "QNLI": three_files((2, 3), 4, (2, 3)),
    "RTE": three_files((2, 3), 4, (2, 3)),
    "WNLI": three_files((2, 3), 4, (2, 3)),
}


def raw_rows(task: str, fname: str):
    """Data rows of a raw file: header dropped; QQP rows with != 6 fields dropped like fairseq's awk."""
    _, header, _, _ = RAW[task][fname]
    with open(os.path.join(FIXTURES, task, fname), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    rows = rows[1:] if header else rows
    if task == "QQP" and not fname.startswith("test"):
        rows = [r for r in rows if len(r) == 6]
    return rows


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "tupe_preprocess.glue_binarize", *args], cwd=REPO, env=ENV, check=check, timeout=300)


@pytest.fixture(scope="session")
def spm_files(tmp_path_factory):
    """A tiny sentencepiece model trained on the fixture text, and its dict.txt."""
    from tupe_preprocess.spm_dict import write_fairseq_dict

    d = tmp_path_factory.mktemp("spm")
    texts = []
    for task, files in RAW.items():
        for fname, (_, _, cols, _) in files.items():
            texts += [r[c - 1] for r in raw_rows(task, fname) for c in cols]
    (d / "corpus.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(d / "corpus.txt"), model_prefix=str(d / "spm"), vocab_size=200,
                                   hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(d / "spm.model"))
    write_fairseq_dict(sp, str(d / "dict.txt"))
    return str(d / "spm.model"), str(d / "dict.txt")


@pytest.fixture(scope="session")
def glue_out(spm_files, tmp_path_factory, starts_process):
    model, dict_path = spm_files
    out = str(tmp_path_factory.mktemp("glue_bin"))
    proc = cli("--glue-dir", FIXTURES, "--tasks", "ALL", "--spm-model", model, "--dict", dict_path,
               "--out-dir", out, "--workers", "2")
    return out, proc.stderr  # the progress and summary lines (logged on stderr)


def load_bin(prefix: str, dict_path: str):
    from fairseq.data import Dictionary, data_utils

    ds = data_utils.load_indexed_dataset(prefix, Dictionary.load(dict_path))
    assert ds is not None, f"no dataset at {prefix}"
    return [ds[i].tolist() for i in range(len(ds))]


@functools.lru_cache(maxsize=None)
def _spm_and_dict(model: str, dict_path: str):
    from fairseq.data import Dictionary

    return spm.SentencePieceProcessor(model_file=model), Dictionary.load(dict_path)


def expected_ids(text: str, model: str, dict_path: str):
    """Independent encoding: spm pieces -> fairseq Dictionary.encode_line, as fairseq-preprocess does."""
    sp, dictionary = _spm_and_dict(model, dict_path)
    return dictionary.encode_line(" ".join(sp.encode(text, out_type=str)),
                                                  add_if_not_exist=False, append_eos=True).tolist()


# ---- layout and summary ----------------------------------------------------------------------


def test_layout_of_every_task(glue_out):
    out, _ = glue_out
    assert sorted(os.listdir(out)) == sorted(f"{t}-bin" for t in RAW)  # nothing partial left behind
    for task, files in RAW.items():
        n_inputs = len(next(iter(files.values()))[2])
        bin_dir = os.path.join(out, f"{task}-bin")
        want = {"input0", "label", "glue_binarize.json"} | ({"input1"} if n_inputs == 2 else set())
        assert set(os.listdir(bin_dir)) == want, task
        splits = [s for s, _, _, _ in files.values()]
        labelled = [s for s, _, _, lab in files.values() if lab is not None]
        for k in range(n_inputs):
            assert sorted(os.listdir(os.path.join(bin_dir, f"input{k}"))) == sorted(
                ["dict.txt"] + [f"{s}.{e}" for s in splits for e in ("bin", "idx")])
        label_files = sorted(os.listdir(os.path.join(bin_dir, "label")))
        if task == "STS-B":
            assert label_files == ["train.label", "valid.label"]
        else:
            assert label_files == sorted(["dict.txt"] + [f"{s}.{e}" for s in labelled for e in ("bin", "idx")])


def test_summary_and_qqp_skips_are_exact(glue_out):
    out, log = glue_out
    n_bad = {}
    for fname in ("train.tsv", "dev.tsv"):
        with open(os.path.join(FIXTURES, "QQP", fname), encoding="utf-8") as f:
            n_bad[fname] = sum(1 for line in list(f)[1:] if len(line.rstrip("\n").split("\t")) != 6)
    assert (n_bad["train.tsv"], n_bad["dev.tsv"]) == (make_glue_fixtures.QQP_BAD_TRAIN, make_glue_fixtures.QQP_BAD_DEV)
    assert "[QQP] train.tsv -> train: read 53, written 48, skipped 5 (wrong number of fields: 5)" in log
    assert "[QQP] dev.tsv -> valid: read 18, written 16, skipped 2 (wrong number of fields: 2)" in log
    manifest = json.load(open(os.path.join(out, "QQP-bin", "glue_binarize.json")))
    assert manifest["splits"]["train"]["skipped"] == {"wrong number of fields": 5}
    assert "[MNLI] dev_mismatched.tsv -> valid1: read 15, written 15, skipped 0" in log
    assert "[CoLA] train.tsv -> train: read 48, written 48, skipped 0" in log  # no header line lost


# ---- content -----------------------------------------------------------------------------------


def test_token_ids_match_independent_encoding(glue_out, spm_files):
    out, _ = glue_out
    model, dict_path = spm_files
    for task, files in RAW.items():
        for fname, (split, _, cols, _) in files.items():
            rows = raw_rows(task, fname)
            for k, col in enumerate(cols):
                got = load_bin(os.path.join(out, f"{task}-bin", f"input{k}", split), dict_path)
                want = [expected_ids(r[col - 1], model, dict_path) for r in rows]
                assert got == want, f"{task} {fname} column {col}"


def test_input_dict_is_the_pretraining_dict_and_unk_is_3(glue_out, spm_files):
    out, _ = glue_out
    _, dict_path = spm_files
    assert filecmp.cmp(os.path.join(out, "RTE-bin", "input1", "dict.txt"), dict_path, shallow=False)
    rows = raw_rows("SST-2", "train.tsv")
    i = next(i for i, r in enumerate(rows) if "naïve" in r[0])
    ids = load_bin(os.path.join(out, "SST-2-bin", "input0", "train"), dict_path)[i]
    assert 3 in ids and ids[-1] == 2  # the rare 'ï' is <unk>; every line ends with </s>


def test_mnli_matched_and_mismatched_splits(glue_out, spm_files):
    out, _ = glue_out
    model, dict_path = spm_files
    label_dict = os.path.join(out, "MNLI-bin", "label", "dict.txt")
    with open(label_dict) as f:
        symbols = [line.split()[0] for line in f]
    for fname, split in (("dev_matched.tsv", "valid"), ("dev_mismatched.tsv", "valid1")):
        rows = raw_rows("MNLI", fname)
        labels = load_bin(os.path.join(out, "MNLI-bin", "label", split), label_dict)
        assert [symbols[lab[0] - 4] for lab in labels] == [r[15] for r in rows]  # gold_label, column 16
        first = load_bin(os.path.join(out, "MNLI-bin", "input1", split), dict_path)[0]
        assert first == expected_ids(rows[0][9], model, dict_path)
    assert len(load_bin(os.path.join(out, "MNLI-bin", "input0", "test1"), dict_path)) == 7
    assert len(load_bin(os.path.join(out, "MNLI-bin", "input0", "test"), dict_path)) == 8


def test_label_binaries_equal_fairseq_preprocess(glue_out, tmp_path, starts_process):
    """Label dict and binaries as `fairseq-preprocess --only-source` builds them (MNLI, 3 classes)."""
    out, _ = glue_out
    for fname, stem in (("train.tsv", "train"), ("dev_matched.tsv", "dm"), ("dev_mismatched.tsv", "dmm")):
        col = 12 if fname == "train.tsv" else 16
        (tmp_path / f"{stem}.label").write_text("".join(r[col - 1] + "\n" for r in raw_rows("MNLI", fname)))
    dest = tmp_path / "label"
    run([os.path.join(VENV_BIN, "fairseq-preprocess"), "--only-source", "--trainpref", str(tmp_path / "train.label"),
         "--validpref", f"{tmp_path / 'dm.label'},{tmp_path / 'dmm.label'}", "--destdir", str(dest), "--workers", "1"],
        env=ENV)
    ours = os.path.join(out, "MNLI-bin", "label")
    for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx", "valid1.bin", "valid1.idx"):
        assert filecmp.cmp(os.path.join(ours, name), dest / name, shallow=False), name


def test_label_count_is_the_distinct_training_labels(glue_out, tmp_path):
    """What fine-tuning sets --num-classes from: the distinct labels of train.tsv (a plain count here), None for
    STS-B; fairseq's madeupwordNNNN padding is not a label, a label that only starts so is."""
    from tupe_glue.finetune_helper import label_count

    out, _ = glue_out
    for task, files in RAW.items():
        col = files["train.tsv"][3]
        want = None if task == "STS-B" else len({r[col - 1] for r in raw_rows(task, "train.tsv")})
        assert label_count(os.path.join(out, f"{task}-bin")) == want, task
    (tmp_path / "label").mkdir()
    (tmp_path / "label" / "dict.txt").write_text("madeupwords 5\nneutral 3\nmadeupword0000 0\nmadeupword0001 0\n")
    assert label_count(str(tmp_path)) == 2


def test_stsb_regression_targets_are_floats(glue_out):
    out, _ = glue_out
    for fname, split in (("train.tsv", "train"), ("dev.tsv", "valid")):
        with open(os.path.join(out, "STS-B-bin", "label", f"{split}.label")) as f:
            got = [float(line) for line in f]
        want = [float(r[9]) / 5.0 for r in raw_rows("STS-B", fname)]
        assert len(got) == len(want) and all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got, want))
        assert any(0 < v < 1 for v in got)  # fractional scores survive


def test_cola_headerless_train_keeps_first_line(glue_out, spm_files):
    out, _ = glue_out
    model, dict_path = spm_files
    with open(os.path.join(FIXTURES, "CoLA", "train.tsv"), encoding="utf-8") as f:
        first = f.readline().rstrip("\n").split("\t")
    train = load_bin(os.path.join(out, "CoLA-bin", "input0", "train"), dict_path)
    assert train[0] == expected_ids(first[3], model, dict_path)
    test = load_bin(os.path.join(out, "CoLA-bin", "input0", "test"), dict_path)
    assert len(test) == 8  # test.tsv has a header: 9 lines, 8 sentences


# ---- fairseq reads it --------------------------------------------------------------------------


def build_task(data: str, *extra: str):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [data, "--task", "sentence_prediction", "--arch", "roberta_base",
                                                "--criterion", "sentence_prediction", "--init-token", "0",
                                                "--separator-token", "2", *extra])
    return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def test_binaries_load_in_sentence_prediction_task(glue_out, spm_files):
    out, _ = glue_out
    model, dict_path = spm_files
    task = build_task(os.path.join(out, "RTE-bin"), "--num-classes", "2")
    ds = task.load_dataset("train")
    rows = raw_rows("RTE", "train.tsv")
    assert len(ds) == len(rows)
    for i in (0, 5):
        item = ds[i]
        row = rows[item["id"]]
        a, b = expected_ids(row[1], model, dict_path), expected_ids(row[2], model, dict_path)
        src = item["net_input.src_tokens"].tolist()
        assert src == [0] + a + [2] + b  # <s> A </s> </s> B </s>
        label = task.label_dictionary.symbols[item["target"].item() + task.label_dictionary.nspecial]
        assert label == row[3]

    reg = build_task(os.path.join(out, "STS-B-bin"), "--num-classes", "1", "--regression-target")
    item = reg.load_dataset("valid")[3]
    assert list(item["target"]) == pytest.approx([float(raw_rows("STS-B", "dev.tsv")[item["id"]][9]) / 5])


def test_fairseq_train_runs_on_binaries(glue_out, tmp_path, starts_process):
    out, _ = glue_out
    cmd = [os.path.join(VENV_BIN, "fairseq-train"), os.path.join(out, "RTE-bin"), "--task", "sentence_prediction",
           "--criterion", "sentence_prediction", "--user-dir", os.path.join(REPO, "tupe_plugin"),
           "--arch", "tupe_r_tiny", "--max-positions", "128", "--num-classes", "2", "--init-token", "0", "--separator-token", "2",
           "--max-update", "3", "--batch-size", "8", "--optimizer", "adam", "--lr", "1e-4", "--cpu",
           "--no-save", "--log-format", "simple", "--log-interval", "1", "--num-workers", "0",
           "--save-dir", str(tmp_path / "ckpt")]
    proc = run(cmd, env=ENV, timeout=300)
    log = proc.stdout + proc.stderr
    inner = [line for line in log.splitlines() if "| train_inner |" in line]
    assert [line.split("num_updates=")[1].split(",")[0] for line in inner] == ["1", "2", "3"]
    losses = [float(line.split(" loss=")[1].split(",")[0]) for line in inner]
    assert all(math.isfinite(x) and x > 0 for x in losses)
    assert not os.path.exists(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert "positional variant: tupe_r " in log
    # The results collector reads this very log format.
    from conftest import best_per_subset

    (tmp_path / "train.log").write_text(log)
    best = best_per_subset(str(tmp_path / "train.log"), "accuracy")
    assert set(best) == {"valid"} and 0 <= best["valid"] <= 100


# ---- bad input -----------------------------------------------------------------------------------


def _corrupt(tmp_path, task: str, fname: str, lineno: int, new_line: bytes) -> str:
    glue = tmp_path / "glue"
    shutil.copytree(os.path.join(FIXTURES, task), glue / task)
    path = glue / task / fname
    lines = path.read_bytes().split(b"\n")
    lines[lineno - 1] = new_line
    path.write_bytes(b"\n".join(lines))
    return str(glue)


BAD_INPUTS = [
    # task, file, line, replacement, words the message must contain
    ("RTE", "train.tsv", 5, b"4\tThe pilot painted the boat.\tentailment", "3 tab-separated fields, expected 4"),
    ("STS-B", "dev.tsv", 3, b"2\tmain-captions\tMSRvid\t2012test\t0003\tnone\tnone\tA man.\tA dog.\tfive",
     "is not a number"),
    ("MNLI", "dev_matched.tsv", 4, b"\t".join([b"x"] * 15 + [b"maybe"]), "unknown label 'maybe'"),
    ("SST-2", "dev.tsv", 6, "a caf\u00e9 film .\t1".encode("latin-1"), "not valid UTF-8"),
    ("CoLA", "dev.tsv", 2, b"gj04\t1\t\tThe cat sat.\textra", "5 tab-separated fields, expected 4"),
]


@pytest.mark.parametrize("task,fname,lineno,line,words", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_names_file_and_line(tmp_path, spm_files, task, fname, lineno, line, words, starts_process):
    model, dict_path = spm_files
    glue = _corrupt(tmp_path, task, fname, lineno, line)
    out = tmp_path / "out"
    proc = cli("--glue-dir", glue, "--tasks", task, "--spm-model", model, "--dict", dict_path,
               "--out-dir", str(out), check=False)
    assert proc.returncode == 1  # bad data (2 is a usage error)
    assert os.path.join(glue, task, fname) + f", line {lineno}:" in proc.stderr
    assert words in proc.stderr
    assert os.listdir(out) == []  # nothing written


def test_a_qqp_file_whose_every_line_is_skipped_is_an_error(tmp_path):
    """QQP's rule drops and counts lines with the wrong number of fields (a few broken records); a file where that
    drops every line (a right header over rows with an extra column) is refused, not written empty."""
    from tupe_glue.tasks import TASKS
    from tupe_preprocess.glue_binarize import GlueInputError, read_split

    task = TASKS["QQP"]
    spec = next(s for s in task.splits if s.file == "dev.tsv")
    path = tmp_path / "dev.tsv"
    rows = ["\t".join(["1", "2", "3", "How old is it?", "How old?", "1", "extra"])] * 3
    path.write_text("\t".join(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]) + "\n"
                    + "\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(GlueInputError, match=re.escape(f"{path}: none of its 3 data lines has the 6 tab-separated "
                                                       "fields of QQP dev.tsv")):
        read_split(task, spec, str(path))
    path.write_text(path.read_text().replace("\textra", "", 1), encoding="utf-8")  # one good line: kept, 2 skipped
    data = read_split(task, spec, str(path))
    assert (len(data.texts[0]), sum(data.skipped.values())) == (1, 2)


def test_dev_label_missing_from_train_is_an_error(tmp_path, spm_files, starts_process):
    model, dict_path = spm_files
    glue = tmp_path / "glue"
    shutil.copytree(os.path.join(FIXTURES, "WNLI"), glue / "WNLI")
    train = glue / "WNLI" / "train.tsv"
    lines = train.read_text().splitlines()
    train.write_text("\n".join(lines[:1] + [ln for ln in lines[1:] if not ln.endswith("\t1")]) + "\n")
    first_dev_1 = next(i for i, ln in enumerate((glue / "WNLI" / "dev.tsv").read_text().splitlines(), 1)
                       if ln.endswith("\t1"))
    proc = cli("--glue-dir", str(glue), "--tasks", "WNLI", "--spm-model", model, "--dict", dict_path,
               "--out-dir", str(tmp_path / "out"), check=False)
    assert proc.returncode == 1
    assert f"dev.tsv, line {first_dev_1}: label '1' never occurs in" in proc.stderr


@pytest.mark.parametrize("content", ["", "sentence\tlabel\n"], ids=["0-byte", "header-only"])
def test_empty_split_is_refused_naming_the_file(tmp_path, spm_files, content, starts_process):
    model, dict_path = spm_files
    glue = tmp_path / "glue"
    shutil.copytree(os.path.join(FIXTURES, "SST-2"), glue / "SST-2")
    (glue / "SST-2" / "dev.tsv").write_text(content)
    proc = cli("--glue-dir", str(glue), "--tasks", "SST-2", "--spm-model", model, "--dict", dict_path,
               "--out-dir", str(tmp_path / "out"), check=False)
    assert proc.returncode == 1
    assert f"{glue / 'SST-2' / 'dev.tsv'}: empty SST-2 split" in proc.stderr
    assert os.listdir(tmp_path / "out") == []


def write_custom_task(folder, labels=("neg", "pos")):
    """A custom single-sentence task: SST-2's fixture rows with other label names."""
    folder.mkdir(parents=True)
    for fname in ("train.tsv", "dev.tsv"):
        rows = [r.split("\t") for r in open(os.path.join(FIXTURES, "SST-2", fname), encoding="utf-8").read().splitlines()]
        body = [f"{text}\t{labels[int(label)]}" for text, label in rows[1:]]
        (folder / fname).write_text("\n".join(["sentence\tlabel"] + body) + "\n", encoding="utf-8")
    return rows[1:]


def test_all_skips_absent_tasks_and_binarizes_custom_tasks(tmp_path, spm_files, starts_process):
    model, dict_path = spm_files
    glue = tmp_path / "glue"
    shutil.copytree(os.path.join(FIXTURES, "RTE"), glue / "RTE")
    dev_rows = write_custom_task(glue / "Reviews")
    (glue / "notes").mkdir()  # neither GLUE nor SST-2's layout: ignored
    (glue / "notes" / "train.tsv").write_text("a\tb\tc\n")
    out = tmp_path / "out"
    proc = cli("--glue-dir", str(glue), "--tasks", "ALL", "--spm-model", model, "--dict", dict_path,
               "--out-dir", str(out))
    assert "--tasks ALL: no folder for CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, WNLI in" in proc.stderr
    assert sorted(os.listdir(out)) == ["RTE-bin", "Reviews-bin"]
    manifest = json.loads((out / "Reviews-bin" / "glue_binarize.json").read_text())
    assert manifest["custom_task"] is True and manifest["splits"]["valid"]["written"] == len(dev_rows)
    labels = [line.split()[0] for line in (out / "Reviews-bin" / "label" / "dict.txt").read_text().splitlines()]
    assert sorted(x for x in labels if not x.startswith("madeupword")) == ["neg", "pos"]
    assert not json.loads((out / "RTE-bin" / "glue_binarize.json").read_text())["custom_task"]
    ids = load_bin(str(out / "Reviews-bin" / "input0" / "valid"), str(out / "Reviews-bin" / "input0" / "dict.txt"))
    assert ids == [expected_ids(text, model, dict_path) for text, _ in dev_rows]
    # a named task that is neither GLUE nor SST-2's layout is refused with the choices
    bad = cli("--glue-dir", str(glue), "--tasks", "notes", "--spm-model", model, "--dict", dict_path,
              "--out-dir", str(out), check=False)
    assert bad.returncode == 2 and "unknown task 'notes'" in bad.stderr and "SST-2's layout" in bad.stderr


def test_dict_of_another_model_is_refused(tmp_path, spm_files, starts_process):
    model, dict_path = spm_files
    lines = open(dict_path, encoding="utf-8").read().splitlines(keepends=True)
    wrong = tmp_path / "dict.txt"
    wrong.write_text("".join(lines[1:] + lines[:1]), encoding="utf-8")  # same pieces, shifted ids
    proc = cli("--glue-dir", FIXTURES, "--tasks", "RTE", "--spm-model", model, "--dict", str(wrong),
               "--out-dir", str(tmp_path / "out"), check=False)
    assert proc.returncode == 1 and "does not belong to" in proc.stderr
    assert os.listdir(tmp_path / "out") == []


# ---- reruns ------------------------------------------------------------------------------------


def test_rerun_skips_force_rebuilds_and_foreign_folders_are_kept(glue_out, spm_files, tmp_path, starts_process):
    src, _ = glue_out
    model, dict_path = spm_files
    out = tmp_path / "out"
    out.mkdir()
    shutil.copytree(os.path.join(src, "RTE-bin"), out / "RTE-bin")
    args = ["--glue-dir", FIXTURES, "--spm-model", model, "--dict", dict_path, "--out-dir", str(out)]
    train_bin = out / "RTE-bin" / "input0" / "train.bin"
    stamp = train_bin.stat().st_mtime_ns
    manifest = (out / "RTE-bin" / "glue_binarize.json").read_text()

    proc = cli(*args, "--tasks", "RTE")
    assert "already complete, skipped" in proc.stderr
    assert train_bin.stat().st_mtime_ns == stamp

    (out / "RTE-bin.partial").mkdir()  # left by a killed run
    proc = cli(*args, "--tasks", "RTE", "--force")
    assert "replacing" in proc.stderr and "removing unfinished" in proc.stderr
    assert sorted(os.listdir(out)) == ["RTE-bin"]
    assert json.loads((out / "RTE-bin" / "glue_binarize.json").read_text())["splits"] == json.loads(manifest)["splits"]
    assert filecmp.cmp(train_bin, os.path.join(src, "RTE-bin", "input0", "train.bin"), shallow=False)

    (out / "RTE-bin" / "glue_binarize.json").write_text('{"splits": ')  # a damaged copy: a line, not a traceback
    proc = cli(*args, "--tasks", "RTE", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        "glue_binarize.json cannot be read (a damaged copy?); pass --force to rebuild the task or choose another "
        "--out-dir.") and "Traceback" not in proc.stderr
    cli(*args, "--tasks", "RTE", "--force")
    assert json.loads((out / "RTE-bin" / "glue_binarize.json").read_text())["splits"] == json.loads(manifest)["splits"]

    (out / "WNLI-bin").mkdir()
    (out / "WNLI-bin" / "mine.txt").write_text("user data")
    proc = cli(*args, "--tasks", "WNLI", "--force", check=False)
    assert proc.returncode == 2 and "was not written by this tool" in proc.stderr
    assert (out / "WNLI-bin" / "mine.txt").read_text() == "user data"


# ---- a cluster's stop, a second run, a full disk (issue 62) ---------------------------------------------------
# RTE then WNLI, the two smallest tasks: RTE finished, WNLI under way when the run is stopped or its disk is full.


def pair_args(spm_files, out) -> list:
    model, dict_path = spm_files
    return ["--glue-dir", FIXTURES, "--tasks", "RTE,WNLI", "--spm-model", model, "--dict", dict_path,
            "--out-dir", str(out)]


def assert_as_uninterrupted(out, reference: str) -> None:
    """``out`` holds RTE-bin and WNLI-bin alone (no .partial, no lock), each file byte for byte an uninterrupted
    run's (``glue_out``); the manifest's creation time aside."""
    assert sorted(os.listdir(out)) == ["RTE-bin", "WNLI-bin"]
    for task in ("RTE-bin", "WNLI-bin"):
        ours, theirs = os.path.join(out, task), os.path.join(reference, task)
        files = sorted(os.path.relpath(os.path.join(d, f), ours) for d, _, fs in os.walk(ours) for f in fs)
        assert files == sorted(os.path.relpath(os.path.join(d, f), theirs) for d, _, fs in os.walk(theirs) for f in fs)
        for name in files:
            a, b = os.path.join(ours, name), os.path.join(theirs, name)
            if name == "glue_binarize.json":
                created = lambda path: {**json.load(open(path, encoding="utf-8")), "created": None}  # noqa: E731
                assert created(a) == created(b), task
            else:
                assert filecmp.cmp(a, b, shallow=False), f"{task}/{name}"


@pytest.mark.parametrize("group", [False, True], ids=["kill-PID", "scancel-every-process"])
def test_a_stop_mid_task_ends_the_pool_with_one_line_and_the_rerun_gives_an_uninterrupted_runs_files(
        glue_out, spm_files, tmp_path, starts_process, group):
    """SIGTERM while WNLI is encoded by two tokenizer processes (each sleeping 60 s a chunk: the hook), to the command
    alone or to every process of it: exit 143 at once, the stop line last, no process left, WNLI's .partial and the
    lock removed, RTE (finished before) kept; the same command then writes what an uninterrupted run wrote. While it
    runs, a second run into the same --out-dir is refused at once, exit 2, naming the first's pid and host."""
    import socket

    from process_tree import command_lines, start, stop_cleanly, tree, wait_for

    out = tmp_path / "out"
    out.mkdir()
    shutil.copytree(os.path.join(glue_out[0], "RTE-bin"), out / "RTE-bin")  # finished by an earlier run
    cmd = [sys.executable, "-m", "tupe_preprocess.glue_binarize", *pair_args(spm_files, out), "--workers", "2"]
    p = start(cmd, {**ENV, "GLUE_BINARIZE_TEST_SLEEP": "60"}, cwd=REPO)
    wait_for(lambda: p.poll() is not None or (out / "WNLI-bin.partial" / "input0" / "dict.txt").exists(), 60,
             "WNLI was not started")
    procs = tree(p.pid)
    assert len(procs) == 2 and all("tupe_preprocess.glue_binarize" in c for c in command_lines(procs)), command_lines(procs)  # the pool
    second = cli(*cmd[3:], check=False)
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip().splitlines()[-1].startswith(
        f"glue_binarize: error: {os.path.realpath(out)} is in use by another run (pid {p.pid} on {socket.gethostname()}, ")
    stop_cleanly(p, signal.SIGTERM, "glue_binarize: error: stopped by SIGTERM; rerun the same command to resume "
                 "(finished outputs are kept)", timeout=20, procs=procs, group=group)
    assert sorted(os.listdir(out)) == ["RTE-bin"]
    cli(*cmd[3:])
    assert_as_uninterrupted(out, glue_out[0])


# python -m tupe_preprocess.glue_binarize ARGS whose writes of a .bin under FULL_IN fail after FULL_AFTER bytes
FULL_DISK = full_disk_script("tupe_preprocess.fairseq_dict", "tupe_preprocess.glue_binarize",
                             'os.environ["FULL_IN"] in path and path.endswith(".bin")')


def test_a_full_disk_mid_task_is_one_line_keeps_the_finished_task_and_the_rerun_completes(glue_out, spm_files,
                                                                                         tmp_path, starts_process):
    """ENOSPC while WNLI's first binary is written (RTE finished in the same run, 2 tokenizer processes): one error
    line naming the task's folder and what to do, exit 1, WNLI's .partial removed and RTE kept, no process left; the
    rerun, space back (1 process), writes what an uninterrupted run wrote."""
    out = tmp_path / "out"
    args = pair_args(spm_files, out)
    from process_tree import assert_none_left, marked

    full = marked({**ENV, "FULL_IN": "WNLI-bin.partial", "FULL_AFTER": "100"})
    p = subprocess.run([sys.executable, "-c", FULL_DISK, *args, "--workers", "2"], capture_output=True, text=True,
                       cwd=REPO, env=full, timeout=120)
    assert p.returncode == 1, p.stderr[-3000:]
    assert_none_left(full)  # the tokenizer processes too
    assert p.stderr.rstrip().splitlines()[-1] == (
        f"glue_binarize: error: {out / 'WNLI-bin'}: no space left on its disk while writing it (the half-written "
        "file is removed); free space there, or write to a folder on another disk")
    assert p.stderr.count("error:") == 1 and "Traceback" not in p.stderr
    assert "[RTE] done" in p.stderr and sorted(os.listdir(out)) == ["RTE-bin"]
    cli(*args)
    assert_as_uninterrupted(out, glue_out[0])


def test_tokenizer_hook_is_replaceable(tmp_path, spm_files, monkeypatch):
    """A registered ``text -> token strings`` function is all another tokenizer needs."""
    from fairseq.data import Dictionary

    from tupe_preprocess import glue_binarize

    _, dict_path = spm_files
    monkeypatch.setitem(glue_binarize.TOKENIZERS, "words", lambda opts: lambda text: ["▁" + w for w in text.split()])
    rc = glue_binarize.main(["--glue-dir", FIXTURES, "--tasks", "SST-2", "--tokenizer", "words", "--dict", dict_path,
                             "--out-dir", str(tmp_path)])
    assert rc == 0
    d = Dictionary.load(dict_path)
    want = [[d.index("▁" + w) for w in r[0].split()] + [2] for r in raw_rows("SST-2", "dev.tsv")]
    assert load_bin(str(tmp_path / "SST-2-bin" / "input0" / "valid"), dict_path) == want
    assert any(i != 3 for ids in want for i in ids[:-1])  # some words are whole pieces in the dict


def test_fixtures_are_reproducible(tmp_path):
    make_glue_fixtures.make_all(str(tmp_path))
    for task in RAW:
        for fname in RAW[task]:
            assert filecmp.cmp(tmp_path / task / fname, os.path.join(FIXTURES, task, fname), shallow=False), fname


def test_help(starts_process):
    proc = cli("--help")
    assert "--glue-dir" in proc.stdout and "--workers" in proc.stdout and "--force" in proc.stdout


def test_fairseq_dict_reads_orders_and_saves_as_fairseqs_dictionary(tmp_path):
    """tupe_preprocess.fairseq_dict (what glue_binarize uses instead of importing fairseq) against fairseq's own
    Dictionary: the same ids after loading (an overwrite flag included), the same label order and padding after
    finalize (counts with ties), the same saved file, and a malformed line refused by number."""
    from fairseq.data import Dictionary

    from tupe_preprocess.fairseq_dict import FairseqDict

    text = tmp_path / "dict.txt"
    text.write_text("▁the 50\nof 7\nzeta 7\nalpha 3\n<unk> 1 #fairseq:overwrite\nx y 2\n", encoding="utf-8")
    ours, theirs = FairseqDict.load(str(text)), Dictionary.load(str(text))
    assert ours.symbols == theirs.symbols and ours.indices == theirs.indices and ours.count == theirs.count
    assert (ours.unk(), ours.eos(), ours.index("nowhere")) == (theirs.unk(), theirs.eos(), theirs.index("nowhere"))
    ours.save(str(tmp_path / "ours.txt"))
    theirs.save(str(tmp_path / "theirs.txt"))
    assert (tmp_path / "ours.txt").read_bytes() == (tmp_path / "theirs.txt").read_bytes()
    labels = ["b", "a", "c", "a", "b", "d", "c", "e", "f", "g", "h", "i"]  # ties at 2 and at 1
    ours, theirs = FairseqDict(), Dictionary()
    for label in labels:
        ours.add_symbol(label)
        theirs.add_symbol(label)
    ours.finalize(padding_factor=8)
    theirs.finalize(threshold=0, nwords=-1, padding_factor=8)
    assert ours.symbols == theirs.symbols and ours.indices == theirs.indices and len(ours) % 8 == 0
    assert ours.symbols[4:7] == ["a", "b", "c"] and ours.symbols[-1].startswith("madeupword")
    for bad in ("word\n", "a 1\na 2\n", "a one\n"):
        text.write_text(bad, encoding="utf-8")
        with pytest.raises(ValueError, match=f"{text}: not a fairseq dict.txt \\(line [12]:"):
            FairseqDict.load(str(text))


def test_a_dict_belongs_to_its_sentencepiece_model_line_by_line(spm_dir, tmp_path):
    """tupe_preprocess.spm_dict.check_dict (C4 and GLUE binarizers alike): the model's pieces in order, then at most
    fairseq's madeupword padding; the first line that differs is named."""
    from tupe_preprocess.fairseq_dict import FairseqDict
    from tupe_preprocess.spm_dict import check_dict, dict_pieces, load_spm

    sp = load_spm(str(spm_dir / "spm.model"))
    pieces = dict_pieces(sp)
    d = FairseqDict.load(str(spm_dir / "dict.txt"))
    assert d.symbols[4:] == pieces
    check_dict(sp, pieces, "dict.txt", "spm.model")
    check_dict(sp, pieces + ["madeupword0000", "madeupword0001"], "dict.txt", "spm.model")  # fairseq's padding
    for symbols, what in [
        (pieces[1:2] + pieces[:1] + pieces[2:], f"line 1 is {pieces[1]!r} where the model has {pieces[0]!r}"),
        (pieces[:-1], f"it ends at line {len(pieces) - 1}, the model has {len(pieces)} pieces"),
        (pieces + ["madeupword0000", "extra"], f"line {len(pieces) + 2} is 'extra', after the model's"),
    ]:
        with pytest.raises(ValueError, match="^dict.txt does not belong to the sentencepiece model spm.model "
                                             f"\\({re.escape(what)}"):
            check_dict(sp, symbols, "dict.txt", "spm.model")


def test_a_downloads_unfinished_folder_is_not_a_custom_task(tmp_path):
    """tupe-glue-download writes OUT/TASK.partial and renames it when complete: a download stopped after
    SST-2's train and dev files leaves a folder of SST-2's layout, which is not a task of its own."""
    from tupe_glue.tasks import custom_task_names

    write_custom_task(tmp_path / "Reviews")
    write_custom_task(tmp_path / "SST-2.partial")
    assert custom_task_names(str(tmp_path)) == ["Reviews"]


# ---- unlabelled examples (Hugging Face's label -1) ---------------------------------------------------------------


def test_a_label_minus_one_in_train_or_dev_is_refused_naming_file_and_line(tmp_path):
    """-1 is how Hugging Face datasets label an unlabelled example (every row of a GLUE test split). A custom task took
    it as a class of its own: its label dictionary gained '-1' (the head one output more), unlabelled rows were
    trained on and counted in dev accuracy. Test files have no label column, so their reading is unchanged."""
    from tupe_glue.tasks import TASKS, custom_task
    from tupe_preprocess.glue_binarize import GlueInputError, read_task

    def append(path, line):
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return sum(1 for _ in open(path, encoding="utf-8"))

    glue = tmp_path / "glue"
    write_custom_task(glue / "Reviews", labels=("0", "1"))
    lineno = append(glue / "Reviews" / "train.tsv", "a review nobody labelled .\t-1")
    with pytest.raises(GlueInputError) as e:
        read_task(custom_task("Reviews"), str(glue / "Reviews"))
    assert str(e.value).startswith(f"{glue / 'Reviews' / 'train.tsv'}, line {lineno}: label '-1' marks an unlabelled "
                                   "example")
    assert "--label-map=-1=NAME" in str(e.value)  # the way out where -1 is a class of the data

    for task, fname, line in [("SST-2", "dev.tsv", "a film nobody labelled .\t-1"),
                              ("STS-B", "train.tsv", "\t".join(["9", "", "", "", "", "", "", "A man.", "A dog.", "-1.0"]))]:
        shutil.copytree(os.path.join(FIXTURES, task), glue / task)
        lineno = append(glue / task / fname, line)
        with pytest.raises(GlueInputError, match=re.escape(f"{glue / task / fname}, line {lineno}: label ") +
                           ".* marks an unlabelled example"):
            read_task(TASKS[task], str(glue / task))

    splits = read_task(TASKS["SST-2"], os.path.join(FIXTURES, "SST-2"))
    assert [s.spec.out for s in splits] == ["train", "valid", "test"] and splits[2].labels == []


def test_glue_download_refuses_an_unlabelled_row_of_a_labelled_split(tmp_path, capsys):
    """The hub's -1 in a train or dev split was an index into the classes: quietly the last class (RTE's
    not_entailment, MNLI's contradiction). It stops the task naming the split and row; a test split, all -1, is
    written without labels as before."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from tupe_glue.tasks import TASKS
    from tupe_preprocess import glue_download

    for task, label in [("MNLI", -1), ("RTE", -1), ("STS-B", -1.0), ("RTE", 2), ("SST-2", None)]:
        with pytest.raises(ValueError):
            glue_download.label_text(TASKS[task], label)

    def mirror(name, train_labels):
        folder = tmp_path / name / "rte"
        folder.mkdir(parents=True)
        for split, labels in [("train", train_labels), ("validation", [1, 0]), ("test", [-1, -1])]:
            n = len(labels)
            pq.write_table(pa.table({"sentence1": [f"premise {i}" for i in range(n)],
                                     "sentence2": [f"hypothesis {i}" for i in range(n)],
                                     "label": labels, "idx": list(range(n))}),
                           folder / f"{split}-00000-of-00001.parquet")
        return str(tmp_path / name)

    out = tmp_path / "glue_data"
    args = ["--out-dir", str(out), "--tasks", "RTE", "--from-dir"]
    assert glue_download.main(args + [mirror("bad", [0, -1, 1])]) == 1
    assert "rte/train, row 2 (idx 1): label -1: the hub's mark of an unlabelled example" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == [".parquet"]  # no RTE, no RTE.partial
    assert glue_download.main(args + [mirror("good", [0, 1, 1])]) == 0
    train = [line.split("\t") for line in (out / "RTE" / "train.tsv").read_text().splitlines()]
    assert [f[3] for f in train[1:]] == ["entailment", "not_entailment", "not_entailment"]
    test = [line.split("\t") for line in (out / "RTE" / "test.tsv").read_text().splitlines()]
    assert test == [["index", "sentence1", "sentence2"], ["0", "premise 0", "hypothesis 0"],
                    ["1", "premise 1", "hypothesis 1"]]
