"""C4 pipeline (python -m tupe_preprocess.c4, its shell entry points run_all.sh and slurm_array.sbatch, and the step
modules preprocess/c4_*.py) on the bundled sample and the bad fixture.

Every step runs through its real command in a subprocess; binaries are checked against
sentencepiece ids, read back with fairseq's reader, and compared byte for byte with
fairseq-preprocess; the last test trains fairseq's roberta for two epochs on the data-bin layout.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import sentencepiece as spm

from full_disk import full_disk_script

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "preprocess" / "c4"
SAMPLE = REPO / "preprocess" / "samples" / "c4"
BAD = REPO / "tests" / "data" / "c4_bad" / "c4-train.00000-of-01024.json.gz"
TRAIN0, TRAIN1 = SAMPLE / "c4-train.00000-of-01024.json.gz", SAMPLE / "c4-train.00001-of-01024.json.gz"
VALID = SAMPLE / "c4-validation.00000-of-00008.json.gz"
BIN = Path(sys.executable).parent  # fairseq-preprocess / fairseq-train of this environment


def env(**extra: str) -> Dict[str, str]:
    e = dict(os.environ)
    e.update(PATH=f"{BIN}{os.pathsep}{e.get('PATH', '')}", PYTHON=sys.executable, PROGRESS_SECONDS="0",
             PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    for k in ("C4_BINARIZE_TEST_SLEEP", "C4_BINARIZE_TEST_KILL", "MAX_DOCS", "WORKERS", "FORCE"):
        e.pop(k, None)
    # no line splitting here: these tests compare with the standard route byte for byte (the sample has
    # a few lines over 511 tokens); splitting is tested in test_c4_no_text_lost.py
    e["TOKENS_PER_SAMPLE"] = "0"
    e.update(extra)
    return e


C4 = [sys.executable, "-m", "tupe_preprocess.c4"]
QUIET = ["--progress-seconds", "0"]


def extract(src: Path, out: Path) -> List:
    return [*C4, "extract", src, out, *QUIET]


def train_spm(spm_dir: Path, *texts: Path, vocab: int = 500) -> List:
    return [*C4, "spm", *texts, "--out-dir", spm_dir, "--vocab-size", vocab, *QUIET]


def binarize(spm_dir: Path, prefix: Path, *texts: Path, workers: int = 0, chunk: int = 0) -> List:
    """Step 3 without line splitting (see env()); ``workers``/``chunk`` 0: the command's defaults."""
    return [*C4, "binarize", *texts, "--out", prefix, "--spm-model", spm_dir / "spm.model", "--dict",
            spm_dir / "dict.txt", "--tokens-per-sample", "0", *QUIET, *(["--workers", workers] if workers else []),
            *(["--chunk-bytes", chunk] if chunk else [])]


def run(cmd: List, check: bool = True, **extra: str) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env(**extra), cwd=REPO)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def summary_numbers(stderr: str) -> Dict[str, int]:
    line = [ln for ln in stderr.splitlines() if "summary:" in ln][-1]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)(?![.\d])", line)}


def fairseq_ids(sp: spm.SentencePieceProcessor, line: str) -> List[int]:
    """What the standard route gives for one line: pieces -> dict ids (+1, unk -> 3) + eos."""
    return [3 if i == sp.unk_id() else i + 1 for i in sp.encode(line)] + [2]


def piece_file(sp: spm.SentencePieceProcessor, src: Path, dst: Path) -> None:
    """``spm_encode --output_format=piece`` (lines end at \\n only, like the CLI)."""
    with open(src, encoding="utf-8", newline="\n") as f, open(dst, "w", encoding="utf-8") as w:
        for line in f:
            w.write(" ".join(sp.encode(line.rstrip("\n"), out_type=str)) + "\n")


def fairseq_preprocess(dict_txt: Path, pieces: Path, dest: Path) -> Path:
    run([BIN / "fairseq-preprocess", "--only-source", "--srcdict", dict_txt, "--trainpref", pieces,
         "--destdir", dest, "--dataset-impl", "mmap", "--workers", "1"])
    return dest / "train"


def same_bytes(a: str, b: str) -> bool:
    return all(Path(f"{a}.{e}").read_bytes() == Path(f"{b}.{e}").read_bytes() for e in ("bin", "idx"))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("c4")


@pytest.fixture(scope="module")
def texts(work: Path, starts_process) -> Dict[str, Path]:
    out = {}
    for key, src in (("train0", TRAIN0), ("train1", TRAIN1), ("valid", VALID), ("bad", BAD)):
        out[key] = work / "text" / f"{key}.txt"
        p = run(extract(src, out[key]))
        out[key + "_stderr"] = p.stderr  # type: ignore[assignment]
    return out


@pytest.fixture(scope="module")
def spm_dir(work: Path, texts, starts_process) -> Path:
    d = work / "spm"
    run(train_spm(d, texts["train0"], texts["train1"]))
    return d


@pytest.fixture(scope="module")
def sp(spm_dir: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(spm_dir / "spm.model"))


# ---------------------------------------------------------------- step 1


def test_help_everywhere(starts_process):
    """The shell entry points and run/task list every setting with its default (a step's default is its
    module's: VOCAB_SIZE's is c4_spm's --vocab-size); each step has its options' help."""
    assert sorted(p.name for p in SCRIPTS.iterdir() if not p.name.endswith((".py", "__pycache__"))) == [
        "run_all.sh", "slurm_array.sbatch"]  # the steps are subcommands, not scripts
    for cmd in (["bash", SCRIPTS / "run_all.sh"], ["bash", SCRIPTS / "slurm_array.sbatch"], [*C4, "run"], [*C4, "task"]):
        p = run([*cmd, "--help"])
        assert "Usage:" in p.stdout and "Environment" in p.stdout, cmd
        assert re.search(r"^  VOCAB_SIZE +32768 ", p.stdout, re.M) and re.search(r"^  SPM_MAX_FILES +32 ", p.stdout, re.M)
    for step in ("download", "extract", "spm", "binarize", "layout"):
        assert f"usage: python -m tupe_preprocess.c4 {step}" in run([*C4, step, "--help"]).stdout
    assert "run [C4_DIR]" in run([*C4, "--help"]).stdout
    p = run([*C4, "nope"], check=False)
    assert p.returncode == 2 and "no subcommand 'nope'" in p.stderr


def test_sample_is_c4_format():
    for path in (TRAIN0, TRAIN1, VALID):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            recs = [json.loads(line) for line in f]
        assert len(recs) >= 80
        for r in recs:
            assert list(r) == ["text", "timestamp", "url"]
            assert re.fullmatch(r"2019-04-\d\dT\d\d:\d\d:\d\dZ", r["timestamp"])
            assert r["url"].startswith("https://") and r["text"].strip()
    total = sum(os.path.getsize(p) for p in (TRAIN0, TRAIN1, VALID))
    assert total < 3_000_000


def test_extract_bad_fixture_counts(texts):
    spec = importlib.util.spec_from_file_location("make_fixture", BAD.parent / "make_fixture.py")
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)  # type: ignore[union-attr]
    expected = fixture.EXPECTED
    nums = summary_numbers(texts["bad_stderr"])
    assert nums["documents"] == expected["documents"] == 6
    assert nums["input_lines"] == expected["input_lines"]
    for reason, n in expected["skipped_by_reason"].items():
        assert nums[reason] == n, reason
    assert nums["skipped"] == sum(expected["skipped_by_reason"].values()) == 13
    # Warnings name file:line for each kind.
    for lineno, reason in ((2, "non_utf8"), (3, "malformed_json"), (5, "missing_text"), (6, "non_string_text"),
                           (9, "empty_text"), (11, "not_object"), (14, "non_utf8")):
        assert f"c4-train.00000-of-01024.json.gz:{lineno}: skipped ({reason})" in texts["bad_stderr"]
    assert texts["bad"].read_text(encoding="utf-8") == (
        "Beginners BBQ Class Taking Place in Missoula!\nDo you want to get better at making delicious BBQ?\n\n"
        "Windows line ends\nsecond paragraph\nindented with spaces\n\n"
        "Tabs and non-breaking spaces\nafter a line separator with a NUL\n\n"
        "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u2014 na\u00efve r\u00e9sum\u00e9 \U0001F600 \u65e5\u672c\u8a9e\n\n"
        "One line only\n\n"
        "Leading and trailing blank paragraphs\n\n"
    )


def test_extract_sample_documents(texts):
    out = texts["train0"].read_text(encoding="utf-8")
    with gzip.open(TRAIN0, "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    assert out.endswith("\n\n") and "\n\n\n" not in out
    got = out[:-2].split("\n\n")
    assert len(got) == len(docs) == summary_numbers(texts["train0_stderr"])["documents"]
    for g, d in zip(got, docs):
        assert g.split("\n") == [" ".join(p.split()) for p in d.split("\n") if p.strip()]


def test_extract_to_a_gz_name_writes_gzip(tmp_path, texts, starts_process):
    """TEXT_EXT=.txt.gz: step 1 writes gzip (its temporary OUT.txt.gz.partial was written as plain text, which
    steps 2 and 3 then failed to decompress), the same text as the .txt output."""
    out = tmp_path / "train0.txt.gz"
    run(extract(TRAIN0, out))
    assert gzip.decompress(out.read_bytes()) == texts["train0"].read_bytes()


def test_extract_rerun_skips_and_corrupt_gzip_fails(tmp_path, texts, starts_process):
    mtime = texts["train0"].stat().st_mtime_ns
    p = run(extract(TRAIN0, texts["train0"]))
    assert "skip:" in p.stderr and texts["train0"].stat().st_mtime_ns == mtime
    truncated = tmp_path / "c4-train.00009-of-01024.json.gz"
    truncated.write_bytes(TRAIN0.read_bytes()[:50_000])
    p = run(extract(truncated, tmp_path / "t.txt"), check=False)
    assert p.returncode == 1 and "corrupt or truncated" in p.stderr
    assert not (tmp_path / "t.txt").exists() and not (tmp_path / "t.txt.partial").exists()


def step_reading_a_fifo(src: Path, cmd: list):
    """A C4 step ``cmd`` (a process of its own) whose input ``src`` is a FIFO made here, with the FIFO's write end open
    (blocking) once the step has opened its end: (the process's mark, the process, the write end's fd)."""
    import errno

    from process_tree import marked, start, wait_for

    os.mkfifo(src)
    mark = marked(env())
    proc = start([str(c) for c in cmd], mark, cwd=REPO)
    fd = []

    def opened() -> bool:  # the write end opens once the step has opened its end (ENXIO before): never blocks
        try:
            fd.append(os.open(src, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            assert e.errno == errno.ENXIO and proc.poll() is None, proc.communicate()
        return bool(fd)

    wait_for(opened, 60, "the step did not open its input")
    os.set_blocking(fd[0], True)
    return mark, proc, fd[0]


def test_a_stop_while_extracting_is_one_line_and_the_rerun_gives_the_same_text(tmp_path, texts, starts_process):
    """SIGTERM while step 1 reads its C4 file (a FIFO, fed half the sample's lines and then held open: the stop
    comes mid-file, whatever the machine's speed): exit 143, one line saying what stopped it and how it resumes, no
    output, no half-written OUT.partial, no record, no process left; the rerun on the whole file writes the text of
    an uninterrupted run (the module fixture's), byte for byte."""
    from process_tree import assert_none_left, stop_cleanly, wait_for

    with gzip.open(TRAIN0, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    src, out = tmp_path / "c4-train.00000-of-01024.json", tmp_path / "text" / "train0.txt"
    mark, proc, fd = step_reading_a_fifo(src, extract(src, out))
    with os.fdopen(fd, "wb") as feed:
        feed.write(b"".join(lines[: len(lines) // 2]))
        feed.flush()
        wait_for(lambda: Path(f"{out}.partial").exists() or proc.poll() is not None, 30, "no OUT.partial")
        time.sleep(0.3)  # the half read; the step waits for more
        assert proc.poll() is None, proc.communicate()
        stop_cleanly(proc, signal.SIGTERM, "tupe_preprocess.c4: error: stopped by SIGTERM; rerun the same command to "
                     "resume (finished tasks are skipped)", timeout=30, procs=[])
    assert_none_left(mark)
    assert sorted(p.name for p in tmp_path.rglob("*")) == [src.name]  # nothing written is left, nor the new folder
    src.unlink()
    src.write_bytes(b"".join(lines))
    p = run(extract(src, out))
    assert "a run cut short" not in p.stderr  # there was no output to redo: the stop removed it, and its record
    assert out.read_bytes() == texts["train0"].read_bytes()


def test_a_second_extract_into_an_output_being_written_is_refused(tmp_path, texts, starts_process):
    """An array task resubmitted while its first run still writes (the first reads a FIFO held open): the second run
    on the same OUTPUT exits 2 at once, one line naming OUTPUT's lock and the way out, and changes nothing; the first
    then finishes as if alone and removes its lock. (Without the lock the second took OUT.partial over, and the first
    renamed the second's half-written file onto OUT under a record of its own summary: a rerun skipped it.)"""
    from process_tree import assert_none_left, wait_for

    src, out = tmp_path / "c4-train.00000-of-01024.json", tmp_path / "text" / "train0.txt"
    mark, first, fd = step_reading_a_fifo(src, extract(src, out))
    lock = Path(os.path.realpath(out.parent)) / f"{out.name}.lock"
    with os.fdopen(fd, "wb") as feed:
        wait_for(lambda: Path(f"{out}.partial").exists() or first.poll() is not None, 30, "no OUT.partial")
        before = {f.name: f.read_bytes() for f in out.parent.iterdir() if f.is_file()}
        second = run(extract(TRAIN0, out), check=False)
        assert second.returncode == 2, second.stderr
        last = second.stderr.strip().splitlines()[-1]
        assert last.startswith(f"c4_extract: error: {lock.with_suffix('')} is in use by another run (pid {first.pid} "
                               f"on ") and f"lock {lock}): " in last and last.endswith(f"remove {lock} and rerun"), last
        assert {f.name: f.read_bytes() for f in out.parent.iterdir() if f.is_file()} == before
        assert first.poll() is None
        feed.write(gzip.decompress(TRAIN0.read_bytes()))
    assert first.wait(timeout=120) == 0, first.communicate()
    assert_none_left(mark)
    assert out.read_bytes() == texts["train0"].read_bytes()
    assert sorted(f.name for f in out.parent.iterdir()) == ["train0.txt", "train0.txt.settings.json"]


# ---------------------------------------------------------------- step 2


def test_spm_model_and_dict(spm_dir, sp, texts, starts_process):
    from tupe_preprocess.spm_dict import dict_pieces, id_offset

    assert sp.get_piece_size() == 500 and id_offset(sp) == 1
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    lines = (spm_dir / "dict.txt").read_text(encoding="utf-8").splitlines()
    assert [ln.rsplit(" ", 1)[0] for ln in lines] == dict_pieces(sp) and len(lines) == 497
    assert (spm_dir / "spm.vocab").is_file()
    summary = json.loads((spm_dir / "settings.json").read_text())["summary"]
    assert summary["threads"] == (os.cpu_count() or 1)  # --threads 0: all cores; a unigram model depends on them
    p = run(train_spm(spm_dir, texts["train0"], texts["train1"]))
    assert "skip:" in p.stderr
    # other inputs (a trial subset) or another vocabulary: refused, naming the setting, nothing changed
    mtime = (spm_dir / "spm.model").stat().st_mtime_ns
    p = run(train_spm(spm_dir, texts["train0"]), check=False)
    assert p.returncode == 2 and "inputs: recorded ['train0.txt', 'train1.txt'], now ['train0.txt']" in p.stderr
    p = run(train_spm(spm_dir, texts["train0"], texts["train1"], vocab=400), check=False)
    assert p.returncode == 2 and "vocab_size: recorded 500, now 400" in p.stderr and "FORCE=1" in p.stderr
    assert (spm_dir / "spm.model").stat().st_mtime_ns == mtime


def test_spm_is_made_again_when_its_text_is(tmp_path, texts, starts_process):
    """A text made again with other contents under the same name (step 1 re-run with another MAX_DOCS) is not the
    text the model was trained on: reuse is refused, naming the sizes. A record from before the sizes compares
    the names alone, as it did."""
    text = tmp_path / "train0.txt"
    text.write_bytes(texts["train0"].read_bytes())
    run(train_spm(tmp_path / "spm", text))
    text.write_bytes(texts["train0"].read_bytes()[: text.stat().st_size // 2])
    p = run(train_spm(tmp_path / "spm", text), check=False)
    assert p.returncode == 2 and "input_bytes: recorded" in p.stderr and "FORCE=1 for tupe-c4 run" in p.stderr
    record = tmp_path / "spm" / "settings.json"
    older = json.loads(record.read_text())
    del older["settings"]["input_bytes"]
    record.write_text(json.dumps(older))
    assert "skip:" in run(train_spm(tmp_path / "spm", text)).stderr


def test_spm_vocab_too_large_is_a_clear_error(tmp_path, texts, starts_process):
    p = run(train_spm(tmp_path / "a", texts["bad"], vocab=5000), check=False)
    assert p.returncode == 2 and "--vocab-size" in p.stderr and "--no-hard-vocab-limit" in p.stderr
    assert not (tmp_path / "a" / "spm.model").exists() and not (tmp_path / "a" / "dict.txt").exists()
    run([*train_spm(tmp_path / "b", texts["bad"], vocab=5000), "--no-hard-vocab-limit"])
    small = spm.SentencePieceProcessor(model_file=str(tmp_path / "b" / "spm.model"))
    assert 3 < small.get_piece_size() < 5000


def test_a_second_spm_into_a_folder_being_written_is_refused(tmp_path, texts, starts_process):
    """The spm task resubmitted while its first run still trains (the first reads a FIFO held open), here with another
    --vocab-size: the second exits 2 at once, one line naming OUT_DIR's lock and the way out, and changes nothing; the
    first then finishes as if alone. (Without the lock the second took the first's record, which has no summary yet,
    for an interrupted run's, trained and wrote its own model, dict.txt and record (exit 0), and the first then wrote
    its own over them.)"""
    from process_tree import assert_none_left

    src, out = tmp_path / "train0.txt", tmp_path / "spm"
    mark, first, fd = step_reading_a_fifo(src, train_spm(out, src))  # opened after its record: it samples the input
    lock = Path(os.path.realpath(out)) / ".run.lock"
    with os.fdopen(fd, "wb") as feed:
        before = {f.name: f.read_bytes() for f in out.iterdir()}
        second = run(train_spm(out, texts["train0"], vocab=400), check=False)
        assert second.returncode == 2, second.stderr
        assert sorted(before) == [".run.lock", "settings.json"]  # the first's record (no summary yet) and lock
        last = second.stderr.strip().splitlines()[-1]
        assert last.startswith(f"c4_spm: error: {lock.parent} is in use by another run (pid {first.pid} on ") and (
            f"lock {lock}): " in last and last.endswith(f"remove {lock} and rerun")), last
        assert {f.name: f.read_bytes() for f in out.iterdir()} == before
        assert first.poll() is None
        feed.write(texts["train0"].read_bytes())
    assert first.wait(timeout=120) == 0, first.communicate()
    assert_none_left(mark)
    assert sorted(f.name for f in out.iterdir()) == ["dict.txt", "settings.json", "spm.model", "spm.vocab"]
    assert json.loads((out / "settings.json").read_text())["settings"]["vocab_size"] == 500


def test_stride_and_reservoir_sampling(tmp_path):
    from tupe_preprocess.c4_spm import reservoir_sample, stride_select

    assert stride_select([f"f{i:02d}" for i in range(10)], 3) == ["f00", "f03", "f06"]
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.txt")
        paths[-1].write_text("".join(f"file{i} line{j}\n\n" for j in range(1000)))
    sample, stats = reservoir_sample([str(p) for p in paths], 300, seed=1, max_bytes=100, progress_seconds=0)
    assert len(sample) == 300 and stats["lines_seen"] == 3000 and len(set(sample)) == 300
    per_file = [sum(s.startswith(f"file{i} ".encode()) for s in sample) for i in range(3)]
    assert all(60 < n < 140 for n in per_file), per_file  # uniform over files, not just the first
    again, _ = reservoir_sample([str(p) for p in paths], 300, seed=1, max_bytes=100, progress_seconds=0)
    assert again == sample


# ---------------------------------------------------------------- step 3


@pytest.fixture(scope="module")
def reference_bin(work, spm_dir, texts, starts_process) -> str:
    """train0 binarized in one uninterrupted run with one worker."""
    prefix = work / "ref" / "train0"
    run(binarize(spm_dir, prefix, texts["train0"], workers=1))
    return str(prefix)


def test_binarize_ids_match_sentencepiece(work, spm_dir, sp, texts, reference_bin, starts_process):
    from fairseq.data import Dictionary, data_utils
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    prefix = work / "multi" / "train0"
    p = run(binarize(spm_dir, prefix, texts["train0"], workers=2, chunk=30000))
    assert same_bytes(str(prefix), reference_bin)  # many chunks over 2 workers: order kept
    lines = texts["train0"].read_text(encoding="utf-8").split("\n")[:-1]
    ds = data_utils.load_indexed_dataset(str(prefix), Dictionary.load(str(spm_dir / "dict.txt")), "mmap")
    assert isinstance(ds, MMapIndexedDataset) and len(ds) == len(lines)
    assert ds._index.dtype == np.uint16
    blank = 0
    for i, line in enumerate(lines):
        got = ds[i].tolist()
        assert got == fairseq_ids(sp, line), i
        blank += line == ""
        assert (got == [2]) == (line == "")
    nums = summary_numbers(p.stderr)
    assert nums["sequences"] == len(lines) and nums["blank_lines"] == blank == 381
    assert nums["tokens"] == sum(len(fairseq_ids(sp, ln)) for ln in lines)


def test_binarize_identical_to_fairseq_preprocess(tmp_path, spm_dir, sp, texts, starts_process):
    odd = tmp_path / "odd.txt"
    odd.write_bytes(
        "CRLF line\r\n\r\n   \n\ttabs\tand  spaces \u00a0nbsp\nx\ry lone CR\n\u00fcnic\u00f8de \u2603 \U0001F600\n"
        "nul\x00char\nno newline at end".encode()
    )
    mixed = tmp_path / "mixed.txt"
    sample_head = b"".join(texts["valid"].read_bytes().splitlines(keepends=True)[:400])
    mixed.write_bytes(texts["bad"].read_bytes() + sample_head + odd.read_bytes())
    piece_file(sp, mixed, tmp_path / "mixed.pieces")
    ref = fairseq_preprocess(spm_dir / "dict.txt", tmp_path / "mixed.pieces", tmp_path / "ref")
    ours = tmp_path / "ours" / "mixed"
    run(binarize(spm_dir, ours, mixed, workers=2, chunk=4096))
    assert same_bytes(str(ours), str(ref))
    # Several inputs are concatenated in order; a missing one is an error before anything is written.
    cmd = binarize(spm_dir, tmp_path / "ours2" / "mixed", texts["bad"], tmp_path / "rest.txt")
    p = run(cmd, check=False)
    assert p.returncode == 1 and "rest.txt: no such file or folder" in p.stderr and not (tmp_path / "ours2").exists()
    (tmp_path / "rest.txt").write_bytes(sample_head + odd.read_bytes())
    run(cmd)
    assert same_bytes(str(tmp_path / "ours2" / "mixed"), str(ref))


def test_encode_fallback_without_numpy_return_type(spm_dir, texts):
    from tupe_preprocess import c4_binarize as cb

    cb._init_worker(str(spm_dir / "spm.model"), "uint16")
    buf = texts["bad"].read_bytes() + texts["valid"].read_bytes()[:20000].rsplit(b"\n", 1)[0] + b"\n"
    fast = cb.encode_chunk(buf)

    class OldSpm:  # sentencepiece < 0.2.1 has no return_type="numpy"
        def __init__(self, sp):
            self.sp = sp

        def encode(self, lines, return_type=None, **kw):
            if return_type == "numpy":
                raise ValueError("unknown return_type")
            return self.sp.encode(lines, **kw)

    real = cb._SP
    cb._SP = OldSpm(real)
    try:
        slow = cb.encode_chunk(buf)
    finally:
        cb._SP = real
    assert fast[0] == slow[0] and np.array_equal(fast[1], slow[1]) and fast[2] == slow[2]


def children_of(pid: int) -> List[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d))
    return kids


def looks_complete_to_fairseq(prefix: Path) -> bool:
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    return MMapIndexedDataset.exists(str(prefix))


def test_sigkill_mid_run_then_rerun(tmp_path, spm_dir, texts, reference_bin, starts_process):
    """A second run on a prefix being written is refused (exit 2, one line naming PREFIX.lock and the way out) and
    changes nothing; SIGKILL leaves no loadable output and the lock, which the rerun (a resubmitted task on the same
    host) takes over at once: it redoes the shard byte for byte."""
    prefix = tmp_path / "bin" / "train0"
    cmd = [str(c) for c in binarize(spm_dir, prefix, texts["train0"], workers=2, chunk=20000)]
    # 1 s per chunk: the run is still going when the second one (which imports torch first) starts
    proc = subprocess.Popen(cmd, env=env(C4_BINARIZE_TEST_SLEEP="1.0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    partial = Path(f"{prefix}.bin.partial")
    deadline = time.time() + 60
    while not (partial.exists() and partial.stat().st_size > 40_000):
        assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
        assert time.time() < deadline
        time.sleep(0.05)
    workers = children_of(proc.pid)
    assert len(workers) == 2  # the pool
    lock = Path(os.path.realpath(prefix.parent)) / "train0.lock"
    held = lock.read_bytes()
    second = run(cmd, check=False)  # a second run on the same shard refuses to start
    last = second.stderr.strip().splitlines()[-1]
    assert second.returncode == 2 and last.startswith(
        f"c4_binarize: error: {lock.with_suffix('')} is in use by another run (pid {proc.pid} on ") and (
        f"lock {lock}): " in last and last.endswith(f"remove {lock} and rerun")), second.stderr
    assert lock.read_bytes() == held and not Path(f"{prefix}.bin").exists()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lock.read_bytes() == held  # a killed run leaves its lock
    for ext in ("bin", "idx", "done"):
        assert not Path(f"{prefix}.{ext}").exists(), ext
    assert not looks_complete_to_fairseq(prefix)
    deadline = time.time() + 10
    while any(Path(f"/proc/{w}").exists() for w in workers):  # orphaned workers exit by themselves
        assert time.time() < deadline, "pool workers outlived the killed parent"
        time.sleep(0.1)
    p = run(cmd)
    assert f"taking over {lock}: the run that held it (pid {proc.pid} " in p.stderr
    assert f"is gone: pid {proc.pid} is not running on this host" in p.stderr
    assert "incomplete (partial output of an interrupted run); redoing" in p.stderr
    assert same_bytes(str(prefix), reference_bin)
    assert not partial.exists() and not Path(f"{prefix}.idx.partial").exists()
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["train0.bin", "train0.done", "train0.idx"]


# SIGTERM only: SIGINT took the same path here (~3 s a case). The binarizer's handler is tupe_common.process's one
# _handle for every stop signal (install_stop_handlers: STOP_SIGNALS, each to _handle unless started ignored, which
# process_tree.start rules out), the pool's workers get every stop signal's default back at fork
# (_default_in_fork) and are ended by Pool.terminate()'s SIGTERM whichever signal the parent had; the signal's name
# and 128 + N in the last line, for SIGTERM, SIGINT and SIGHUP through the same exit_main, are
# tests/test_stop_signals.py's test_a_stop_ends_every_job_and_its_children_with_one_line.
@pytest.mark.parametrize("group", [False, True], ids=["kill-PID", "scancel-every-process"])
def test_a_stop_mid_run_ends_the_pool_with_one_line_and_the_rerun_gives_the_same_bytes(
        tmp_path, spm_dir, texts, reference_bin, starts_process, group):
    """SIGTERM to the binarizer alone (kill PID) or to every process of it (scancel: the pool's too, which left the
    pool's queue lock held when a worker died waiting for work, and the stop hung): its pool ends with it, exit 143,
    one line saying what stopped it and how it resumes, nothing that looks finished; the rerun gives the bytes of an
    uninterrupted run."""
    sig = signal.SIGTERM
    from process_tree import start, stop_cleanly, tree

    prefix = tmp_path / "bin" / "train0"
    cmd = [str(c) for c in binarize(spm_dir, prefix, texts["train0"], workers=2, chunk=20000)]
    proc = start(cmd, env(C4_BINARIZE_TEST_SLEEP="1.0"), cwd=REPO)
    partial = Path(f"{prefix}.bin.partial")
    deadline = time.time() + 60
    while not (partial.exists() and partial.stat().st_size > 40_000):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    workers = tree(proc.pid)
    assert len(workers) >= 2  # the pool
    stop_cleanly(proc, sig, f"tupe_preprocess.c4: error: stopped by {signal.Signals(sig).name}; rerun the same command to "
                 "resume (finished tasks are skipped)", timeout=30, procs=workers, group=group)
    assert not any(Path(f"{prefix}.{ext}").exists() for ext in ("bin", "idx", "done"))
    assert not looks_complete_to_fairseq(prefix)
    run(cmd)
    assert same_bytes(str(prefix), reference_bin)
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["train0.bin", "train0.done", "train0.idx"]


# The binarizer as `python -m tupe_preprocess.c4 ARGS`, its writes to a PREFIX.bin.partial failing once FULL_AFTER bytes
# were written
FULL_DISK = full_disk_script("tupe_preprocess.c4_binarize", "tupe_preprocess.c4", 'path.endswith(".bin.partial")')


def test_a_full_disk_while_binarizing_is_one_line_and_the_rerun_gives_the_same_bytes(tmp_path, spm_dir, texts,
                                                                                      reference_bin, starts_process):
    """ENOSPC in the middle of a shard (2 workers): one error line naming the shard being written, exit 1, only
    that shard's files removed (an earlier finished shard in the folder is kept byte for byte), nothing that looks
    finished; the rerun once space is back gives the bytes of an uninterrupted run."""
    out = tmp_path / "bin"
    run(binarize(spm_dir, out / "train1", texts["train1"]))  # an earlier, finished shard
    kept = {f.name: f.read_bytes() for f in out.iterdir()}
    prefix = out / "train0"
    cmd = [str(c) for c in binarize(spm_dir, prefix, texts["train0"], workers=2, chunk=20000)]
    from process_tree import assert_none_left, marked

    full = marked(env(FULL_AFTER="100000"))
    p = subprocess.run([sys.executable, "-c", FULL_DISK, *cmd[3:]], capture_output=True, text=True, cwd=REPO, env=full,
                       timeout=120)
    assert p.returncode == 1, p.stderr[-3000:]
    assert_none_left(full)  # the pool's 2 workers too
    assert p.stderr.rstrip().splitlines()[-1] == (
        f"tupe_preprocess.c4: error: {prefix}.bin: no space left on its disk while writing it (the half-written file is "
        "removed); free space there, or write to a folder on another disk")
    assert p.stderr.count("error:") == 1 and "Traceback" not in p.stderr
    assert {f.name: f.read_bytes() for f in out.iterdir()} == kept  # train0's partial files and lock gone, train1 kept
    run(cmd)
    assert same_bytes(str(prefix), reference_bin)
    assert sorted(f.name for f in out.iterdir()) == sorted([*kept, "train0.bin", "train0.done", "train0.idx"])


def test_sigkill_between_renames_then_rerun(tmp_path, spm_dir, texts, reference_bin, starts_process):
    from fairseq.data import Dictionary, data_utils

    prefix = tmp_path / "bin" / "train0"
    cmd = binarize(spm_dir, prefix, texts["train0"])
    p = run(cmd, check=False, C4_BINARIZE_TEST_KILL="after_bin_rename")
    assert p.returncode == -signal.SIGKILL
    assert Path(f"{prefix}.bin").exists() and not Path(f"{prefix}.idx").exists()
    assert not Path(f"{prefix}.done").exists() and not looks_complete_to_fairseq(prefix)
    d = Dictionary.load(str(spm_dir / "dict.txt"))
    assert data_utils.load_indexed_dataset(str(prefix), d, "mmap") is None
    p = run(cmd)
    assert "incomplete (outputs without .done); redoing" in p.stderr
    assert same_bytes(str(prefix), reference_bin) and Path(f"{prefix}.done").exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_line_that_is_not_utf8_is_named_by_file_and_line(tmp_path, spm_dir, workers, starts_process):
    """The decoder of a worker knows only its chunk's byte: the error names the file, the line and the byte in it."""
    text = tmp_path / "t.txt"
    lines = [f"line {i} of plain text".encode() for i in range(1, 40)]
    lines[27] = b"caf\xe9 is latin-1"  # line 28
    text.write_bytes(b"\n".join(lines) + b"\n")
    p = run(binarize(spm_dir, tmp_path / "bin" / "t", text, workers=workers, chunk=64), check=False)
    assert p.returncode == 1 and f"{text}:28: not UTF-8 (invalid continuation byte at byte 4 of the line)" in p.stderr
    assert not list((tmp_path / "bin").glob("t.*"))


def test_binaries_this_command_did_not_write_are_kept(tmp_path, spm_dir, texts, starts_process):
    """A prefix's .bin/.idx without its .done or .writing (say fairseq-preprocess's, or a copy) are no run of this
    command cut short: refused (exit 2), kept byte for byte; --force rewrites them. A run's own files carry
    PREFIX.writing until PREFIX.done is written, so a run cut short is still redone (test_sigkill_* below)."""
    prefix = tmp_path / "bin" / "train"
    prefix.parent.mkdir()
    for ext in ("bin", "idx"):
        Path(f"{prefix}.{ext}").write_bytes(b"theirs")
    p = run(binarize(spm_dir, prefix, texts["train0"]), check=False)
    assert p.returncode == 2 and f"{prefix}.bin exists without {prefix}.done or {prefix}.writing" in p.stderr
    assert Path(f"{prefix}.bin").read_bytes() == b"theirs" == Path(f"{prefix}.idx").read_bytes()
    run([*binarize(spm_dir, prefix, texts["train0"]), "--force"])
    assert Path(f"{prefix}.bin").read_bytes() != b"theirs" and Path(f"{prefix}.done").is_file()
    assert not Path(f"{prefix}.writing").exists()


def test_rerun_skips_finished_and_redoes_stale(tmp_path, spm_dir, texts, reference_bin, starts_process):
    text = tmp_path / "t.txt"
    shutil.copy(texts["bad"], text)
    prefix = tmp_path / "bin" / "t"
    cmd = binarize(spm_dir, prefix, text)
    n1 = summary_numbers(run(cmd).stderr)["sequences"]
    mtime = Path(f"{prefix}.bin").stat().st_mtime_ns
    p = run(cmd)
    assert "skip:" in p.stderr and "summary" not in p.stderr
    assert Path(f"{prefix}.bin").stat().st_mtime_ns == mtime
    with open(text, "a") as f:
        f.write("one more line\n")
    p = run(cmd)
    assert "stale" in p.stderr and summary_numbers(p.stderr)["sequences"] == n1 + 1
    # A dict.txt that does not belong to the model is refused.
    bad_dir = tmp_path / "baddict"
    bad_dir.mkdir()
    shutil.copy(spm_dir / "spm.model", bad_dir / "spm.model")
    lines = (spm_dir / "dict.txt").read_text().splitlines()
    (bad_dir / "dict.txt").write_text("\n".join([lines[1], lines[0]] + lines[2:]) + "\n")
    p = run(binarize(bad_dir, tmp_path / "bin" / "x", text), check=False)
    assert p.returncode == 1 and "does not belong to the sentencepiece model" in p.stderr and "line 1 is" in p.stderr


# ---------------------------------------------------------------- step 4, driver, SLURM script, fairseq-train


def check_layout(data_bin: Path, n: int) -> None:
    shards = (data_bin / "data_path.txt").read_text().strip().split(":")
    assert shards == [f"shard{k}" for k in range(n)]  # relative to data-bin: the folder can be moved
    for k in range(n):
        d = data_bin / f"shard{k}"
        assert sorted(os.listdir(d)) == ["dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx"]
        assert (d / "valid.bin").read_bytes() == (data_bin / "shard0" / "valid.bin").read_bytes()
    assert (data_bin / "shard0" / "train.bin").read_bytes() != (data_bin / "shard1" / "train.bin").read_bytes()


def test_driver_layout_and_fairseq_train(tmp_path, starts_process):
    out = tmp_path / "out"
    kw = dict(OUT_DIR=str(out), VOCAB_SIZE="500", JOBS="2", MAX_DOCS="40", VALID_MAX_DOCS="20")
    p = run([SCRIPTS / "run_all.sh", SAMPLE], **kw)
    assert "VOCAB_SIZE=500" in p.stderr and "JOBS=2" in p.stderr  # settings printed at start
    data_bin = out / "data-bin"
    check_layout(data_bin, 2)
    assert os.path.samefile(data_bin / "shard1" / "train.bin", out / "bin" / "c4-train.00001-of-01024.bin")
    assert summary_numbers([ln for ln in p.stderr.splitlines() if "validation.00000" in ln and "summary" in ln][0])[
        "documents"] == 20
    p = run([SCRIPTS / "run_all.sh", SAMPLE], **kw)  # rerun: everything is skipped
    assert p.stderr.count("skip:") == 3 + 1 + 3 and "0 datasets placed" in p.stderr
    # a rerun with another setting into the same OUT_DIR is refused, naming it; FORCE=1 redoes the step
    p = run([SCRIPTS / "run_all.sh", SAMPLE], check=False, **{**kw, "VOCAB_SIZE": "400", "STEPS": "12"})
    assert p.returncode == 2 and "vocab_size: recorded 500, now 400" in p.stderr.splitlines()[-1]
    p = run([SCRIPTS / "run_all.sh", SAMPLE], check=False, **{**kw, "MAX_DOCS": "30", "STEPS": "1"})
    assert p.returncode == 2 and "max_docs: recorded 40, now 30" in p.stderr  # a usage error, as one task's
    p = run([SCRIPTS / "run_all.sh", SAMPLE], **{**kw, "VOCAB_SIZE": "400", "STEPS": "2", "FORCE": "1"})
    assert json.loads((out / "spm" / "settings.json").read_text())["settings"]["vocab_size"] == 400

    check = run([sys.executable, "-m", "tupe_preprocess.c4_data", data_bin, "--tokens-per-sample", "64",
                 "--max-skip-fraction", "1"])
    assert re.search(r"train: \d+ of \d+ lines \([\d.]+%\) are longer than a block", check.stderr)
    data_path = check.stdout
    assert data_path.strip() == f"{data_bin / 'shard0'}:{data_bin / 'shard1'}"
    train = run([
        BIN / "fairseq-train", data_path.strip(), "--task", "masked_lm",
        "--criterion", "masked_lm", "--arch", "roberta_base", "--encoder-layers", "1", "--encoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2", "--tokens-per-sample", "64",
        "--max-update", "100", "--batch-size", "64", "--optimizer", "adam", "--lr", "1e-4", "--cpu", "--no-save",
        "--save-dir", tmp_path / "ckpt", "--sample-break-mode", "complete", "--max-epoch", "2",
        "--skip-invalid-size-inputs-valid-test", "--num-workers", "0", "--log-format", "simple", "--seed", "1",
    ])
    log = train.stdout + train.stderr
    assert re.search(r"loaded 1,174 examples from: \S*shard0/train", log)
    assert re.search(r"loaded 1,209 examples from: \S*shard1/train", log)  # epoch 2 reads shard1
    assert re.search(r"loaded 720 examples from: \S*shard0/valid", log)
    assert "| train | epoch 002 |" in log and "done training" in log


def test_driver_stops_on_a_corrupt_shard(tmp_path, starts_process):
    c4 = tmp_path / "c4"
    c4.mkdir()
    shutil.copy(TRAIN0, c4 / TRAIN0.name)
    shutil.copy(VALID, c4 / VALID.name)
    (c4 / TRAIN1.name).write_bytes(TRAIN1.read_bytes()[:30_000])  # a truncated download
    p = run([SCRIPTS / "run_all.sh", c4], check=False, OUT_DIR=str(tmp_path / "out"), VOCAB_SIZE="500")
    assert p.returncode != 0 and "corrupt or truncated" in p.stderr
    assert not (tmp_path / "out" / "spm").exists() and not (tmp_path / "out" / "data-bin").exists()


SBATCH_LINE = re.compile(r"(?P<job>\w+)=\$\((?:TASK_OFFSET=(?P<offset>\d+) )?sbatch --parsable "
                         r"--array=0(?:-(?P<last>\d+))?(?:%\d+)?(?: --dependency=afterok:(?P<after>\S+))? "
                         r"preprocess/c4/slurm_array\.sbatch (?P<step>\w+)\)")


def arrays(text: str) -> List[dict]:
    """The sbatch lines of ``text`` (``slurm``'s, the script header's, the manual's): each line's job, step,
    TASK_OFFSET, largest array index, the tasks it runs (TASK_OFFSET + each index) and the jobs it waits for."""
    found = []
    for m in SBATCH_LINE.finditer(text):
        offset, last = int(m["offset"] or 0), int(m["last"] or 0)
        found.append(dict(job=m["job"], step=m["step"], offset=m["offset"], last=last,
                          tasks=[offset + i for i in range(last + 1)],
                          after=m["after"].replace("$", "").split(":") if m["after"] else []))
    return found


def test_slurm_array_script_as_plain_tasks(tmp_path, starts_process):
    """The lines `slurm` prints with ARRAY_CHUNK=2, run as SLURM runs them (the script with SLURM_ARRAY_TASK_ID per
    index and the line's TASK_OFFSET): each C4 file extracted once, then the steps after; an index past the last task
    does nothing. A TASK_OFFSET that is no whole number, or one left set for a one-task step (every task of the
    array would do nothing), is a usage error (exit 2) writing nothing."""
    kw = dict(C4_DIR=str(SAMPLE), OUT_DIR=str(tmp_path / "out"), VOCAB_SIZE="500", MAX_DOCS="30",
              VALID_MAX_DOCS="10")
    sbatch = SCRIPTS / "slurm_array.sbatch"
    for step, offset, says in (("extract", "1k", "TASK_OFFSET must be a whole number, not '1k'"),
                               ("spm", "1", "TASK_OFFSET=1 is past the 1 task(s) of spm: ")):
        p = run(["bash", sbatch, step], check=False, SLURM_ARRAY_TASK_ID="0", TASK_OFFSET=offset, **kw)
        assert p.returncode == 2 and says in p.stderr.strip().splitlines()[-1], p.stderr
    assert not (tmp_path / "out").exists()
    lines = arrays(run([*C4, "slurm"], ARRAY_CHUNK="2", **kw).stdout)
    assert [(a["step"], a["offset"], a["last"]) for a in lines] == [  # 3 extract tasks, 3 binarize tasks
        ("extract", "0", 1), ("extract", "2", 0), ("spm", None, 0), ("binarize", "0", 1), ("binarize", "2", 0),
        ("layout", None, 0)]
    extracted = []
    for a in lines:
        shift = {"TASK_OFFSET": a["offset"]} if a["offset"] else {}
        cpus = {"SLURM_CPUS_PER_TASK": "2"} if a["step"] == "binarize" else {}
        for index in range(a["last"] + 1):
            p = run(["bash", sbatch, a["step"]], SLURM_ARRAY_TASK_ID=str(index), **shift, **cpus, **kw)
            extracted += re.findall(r"summary: (\S+\.json\.gz): documents=", p.stderr)
    assert sorted(extracted) == sorted(map(str, (TRAIN0, TRAIN1, VALID)))  # each file once
    p = run(["bash", sbatch, "extract"], SLURM_ARRAY_TASK_ID="1", TASK_OFFSET="2", **kw)  # one task too many
    assert "nothing to do for extract task 3" in p.stderr
    check_layout(tmp_path / "out" / "data-bin", 2)
    done = json.loads((tmp_path / "out" / "bin" / "valid.done").read_text())
    assert done["workers"] == 2 and done["blank_lines"] == 10


def test_slurm_cuts_arrays_past_max_array_size_and_runs_every_task_once(tmp_path, starts_process):
    """SLURM refuses an array index past MaxArraySize - 1 (1000 by default), so all of C4 (1024 train files and one
    validation file: 1025 extract and 1025 binarize tasks) could not be submitted as --array=0-1024. `slurm` cuts such
    a step into arrays of at most ARRAY_CHUNK=1000 tasks, whose TASK_OFFSETs run each task once, and the next step
    waits for all of them, each array with the script's own limit of tasks at once (%64, which a line's --array
    would otherwise drop); the script's header and the manual show these lines, and its own --array stays within 0-1000."""
    c4 = tmp_path / "c4"
    c4.mkdir()
    for k in range(1024):
        (c4 / f"c4-train.{k:05d}-of-01024.json.gz").touch()
    (c4 / "c4-validation.00000-of-00008.json.gz").touch()
    p = run([*C4, "slurm", c4], OUT_DIR=str(tmp_path / "out"), TASK_OFFSET="7")  # TASK_OFFSET: never passed on
    printed = [ln for ln in p.stdout.splitlines() if "sbatch --parsable" in ln]
    lines = arrays(p.stdout)
    assert len(lines) == len(printed) == 6 and not any("TASK_OFFSET" in ln for ln in p.stdout.splitlines()
                                                       if ln.startswith("export"))
    tasks = {"extract": 1025, "spm": 1, "binarize": 1025, "layout": 1}
    for step, n in tasks.items():
        mine = [a for a in lines if a["step"] == step]
        assert sorted(t for a in mine for t in a["tasks"]) == list(range(n)), step
        assert max(a["last"] for a in mine) <= 999, step
    assert [a["after"] for a in lines] == [[], [], ["extract0", "extract1"], ["spm"], ["spm"],
                                           ["binarize0", "binarize1"]]
    header = (SCRIPTS / "slurm_array.sbatch").read_text()
    own = re.search(r"^#SBATCH --array=0-(\d+)%(\d+)", header, re.MULTILINE)
    assert int(own[1]) <= 1000 and all(f"%{own[2]} " in ln for ln in printed if "--array=0-" in ln)  # its limit too
    manual = (REPO / "docs" / "data_pipeline.md").read_text()
    for text in (header, manual):
        shown = [ln.strip(" #") for ln in text.splitlines() if "sbatch --parsable" in ln]
        assert shown == printed


def test_run_one_job_at_a_time_and_usage_errors(tmp_path, starts_process):
    """JOBS=1 runs a step's tasks in the one process, in order; a setting, a step or an index that is wrong is
    a usage error (exit 2) naming it, before anything is written."""
    out = tmp_path / "out"
    p = run([*C4, "run", SAMPLE], OUT_DIR=str(out), JOBS="1", STEPS="1", MAX_DOCS="5", VALID_MAX_DOCS="5")
    assert sorted(f.name for f in (out / "text").glob("*.txt")) == [
        "c4-train.00000-of-01024.txt", "c4-train.00001-of-01024.txt", "c4-validation.00000-of-00008.txt"]
    assert "started" not in p.stderr  # no task process
    assert [summary_numbers(ln)["documents"] for ln in p.stderr.splitlines() if "summary" in ln] == [5, 5, 5]
    for jobs in ("1", "2"):  # outputs made with other settings: a usage error (exit 2), in one process or many
        p = run([*C4, "run", SAMPLE], check=False, OUT_DIR=str(out), JOBS=jobs, STEPS="1", MAX_DOCS="6",
                VALID_MAX_DOCS="5")
        assert p.returncode == 2 and "max_docs: recorded 5, now 6" in p.stderr, (jobs, p.stderr)
        assert p.stderr.rstrip().endswith("or FORCE=1 to redo outputs made with other settings (an output in use: "
                                       "wait for the run that holds its lock)"), p.stderr
    for cmd, kw, says in (
            ([*C4, "run", SAMPLE], {"STEPS": "15"}, "STEPS: the step numbers to run"),
            ([*C4, "run", SAMPLE], {"JOBS": "two"}, "JOBS must be auto or a positive whole number, not 'two'"),
            ([*C4, "run", SAMPLE], {"TRAIN_GLOB": "c5-*"}, "no c5-* in "),
            ([*C4, "run", SAMPLE], {"MODEL_TYPE": "wordpiece"}, "MODEL_TYPE must be bpe or unigram, not 'wordpiece'"),
            ([*C4, "run", SAMPLE], {"LINK_MODE": "move"}, "LINK_MODE must be one of hardlink, symlink, copy, not 'move'"),
            ([*C4, "task", "tokenize", "0"], {"C4_DIR": str(SAMPLE)}, "STEP must be one of: extract spm binarize layout"),
            ([*C4, "task", "extract", "first"], {"C4_DIR": str(SAMPLE)}, "INDEX must be a task number")):
        p = run(cmd, check=False, OUT_DIR=str(tmp_path / "out2"), **kw)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (cmd, kw, p.stderr)
    p = run([*C4, "run", tmp_path / "none"], check=False, OUT_DIR=str(tmp_path / "out2"))  # a bad input: exit 1
    assert p.returncode == 1 and f"{tmp_path / 'none'}: no such file or folder" in p.stderr, p.stderr
    assert not (tmp_path / "out2").exists()
    p = run([*C4, "task", "layout", "1"], C4_DIR=str(SAMPLE), OUT_DIR=str(tmp_path / "out2"))
    assert "nothing to do for layout task 1" in p.stderr


def test_a_second_run_into_a_held_out_dir_is_refused_at_once(tmp_path, starts_process):
    """While a run holds OUT_DIR's lock (this process, through tupe_common.lock as the pipeline takes it), a second
    `run` into that OUT_DIR exits 2 at once with one line naming the holder's pid and host, and writes nothing."""
    from tupe_common import lock

    out = tmp_path / "out"
    path = out / lock.LOCK_NAME
    with lock.hold(str(path), "tupe_preprocess.c4 run", "OUT_DIR"):
        record = path.read_bytes()
        second = env(OUT_DIR=str(out), STEPS="1", MAX_DOCS="5", VALID_MAX_DOCS="5")
        second.pop(lock.ENV)  # the holder's token: its children are part of its run, a second run is not
        p = subprocess.run([*map(str, C4), "run", str(SAMPLE)], capture_output=True, text=True, env=second, cwd=REPO,
                           timeout=60)
        assert p.returncode == 2, p.stderr[-3000:]
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith(f"tupe_preprocess.c4 run: error: {out} is in use by another run (pid {os.getpid()} on "
                               f"{lock.host()}, started ") and f"lock {path}): " in last and "OUT_DIR" in last, last
        assert os.listdir(out) == [lock.LOCK_NAME] and path.read_bytes() == record


def test_slurm_prints_one_array_per_step_sized_to_its_tasks(tmp_path, starts_process):
    p = run([*C4, "slurm", SAMPLE], OUT_DIR=str(tmp_path / "out"), VOCAB_SIZE="500", STEPS="1234")
    lines = p.stdout.splitlines()
    assert f"export C4_DIR={SAMPLE}" in lines and f"export OUT_DIR={tmp_path / 'out'}" in lines
    assert "export VOCAB_SIZE=500" in lines and not any("STEPS" in ln or "SPM_MAX_FILES" in ln for ln in lines)
    sbatch = [ln for ln in lines if "sbatch" in ln and not ln.startswith("#")]
    assert sbatch == [  # 2 train files + 1 validation file: 3 extract tasks; 2 train shards + the validation set
        "extract=$(sbatch --parsable --array=0-2%64 preprocess/c4/slurm_array.sbatch extract)",
        "spm=$(sbatch --parsable --array=0 --dependency=afterok:$extract preprocess/c4/slurm_array.sbatch spm)",
        "binarize=$(sbatch --parsable --array=0-2%64 --dependency=afterok:$spm preprocess/c4/slurm_array.sbatch binarize)",
        "layout=$(sbatch --parsable --array=0 --dependency=afterok:$binarize preprocess/c4/slurm_array.sbatch layout)"]
    assert not (tmp_path / "out").exists()  # printing writes nothing
