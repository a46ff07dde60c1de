"""No pre-training text lost, and a step's outputs belong to its settings (C4 steps, in-process).

A document with a 2,000-token paragraph goes through the real C4 steps (extract, sentencepiece,
binarize with --tokens-per-sample 512, layout); fairseq's own ``masked_lm`` task (not a mock) then
serves every token of the data in blocks of at most 512, in ``complete`` and ``complete_doc`` mode.
The steps are called through their ``main()`` (the same code the shell steps exec) to stay fast.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import sentencepiece as spm

from tupe_preprocess import c4_binarize, c4_data, c4_extract, c4_layout, c4_spm
from tupe_common.mmap_index import line_sizes

WORDS = ("the river carried old boats past quiet towns where people sold bread fish and salt "
         "while children watched the water turn from green to grey under a slow northern sky").split()


def write_c4(path: Path, texts: List[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t, "url": "u", "timestamp": "t"}) + "\n")
    return path


def paragraph(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, starts_process) -> Dict[str, Path]:
    """C4 files -> text -> spm (vocab 200, trained in a forked child: starts_process) -> binaries (--tokens-per-sample
    512) -> data-bin."""
    d = tmp_path_factory.mktemp("c4long")
    rng = random.Random(0)
    long_doc = "\n".join([paragraph(rng, 30), paragraph(rng, 2000), paragraph(rng, 20)])
    train_docs = [paragraph(rng, 40) + "\n" + paragraph(rng, 25) for _ in range(30)]
    train_docs.insert(7, long_doc)
    train = write_c4(d / "c4-train.00000-of-00001.json.gz", train_docs)
    valid = write_c4(d / "c4-validation.00000-of-00001.json.gz", [paragraph(rng, 30) for _ in range(5)] + [long_doc])
    for src in (train, valid):
        assert c4_extract.main([str(src), str(d / (src.name + ".txt")), "--progress-seconds", "0"]) == 0
    assert c4_spm.main([str(d / (train.name + ".txt")), "--out-dir", str(d / "spm"), "--vocab-size", "200",
                        "--no-hard-vocab-limit", "--progress-seconds", "0"]) == 0
    for name, src in (("train", train), ("valid", valid)):
        assert c4_binarize.main([str(d / (src.name + ".txt")), "--out", str(d / "bin" / name), "--spm-model",
                                 str(d / "spm" / "spm.model"), "--dict", str(d / "spm" / "dict.txt"), "--workers", "1",
                                 "--tokens-per-sample", "512", "--progress-seconds", "0"]) == 0
    assert c4_layout.main([str(d / "bin" / "train"), "--data-bin", str(d / "data-bin"), "--dict",
                           str(d / "spm" / "dict.txt"), "--valid", str(d / "bin" / "valid")]) == 0
    return {"dir": d, "train_txt": d / (train.name + ".txt"), "spm": d / "spm", "shard": d / "data-bin" / "shard0"}


def spm_ids_of_text(spm_dir: Path, text_path: Path) -> np.ndarray:
    """The fairseq ids of every non-empty line of the text, without any </s> (the plain reference)."""
    sp = spm.SentencePieceProcessor(model_file=str(spm_dir / "spm.model"))
    ids: List[int] = []
    for line in text_path.read_text(encoding="utf-8").split("\n"):
        if line:
            ids += [3 if i == sp.unk_id() else i + 1 for i in sp.encode(line)]
    return np.array(ids)


def test_the_long_paragraph_is_split_and_counted(prepared):
    sp = spm.SentencePieceProcessor(model_file=str(prepared["spm"] / "spm.model"))
    longest = max(len(sp.encode(line)) for line in prepared["train_txt"].read_text().split("\n"))
    assert longest >= 2000  # the paragraph really is 2,000+ tokens
    done = json.loads((prepared["dir"] / "bin" / "train.done").read_text())
    assert done["split_lines"] == 1 and done["max_line_tokens"] == 511
    assert done["settings"] == {"tokens_per_sample": 512}
    sizes = line_sizes(prepared["shard"] / "train.idx")
    assert sizes.max() <= 511
    # Nothing lost, nothing added but the </s> of each piece: the binary minus its </s> tokens is
    # exactly the sentencepiece encoding of the text.
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    stream = np.concatenate([np.asarray(t) for t in MMapIndexedDataset(str(prepared["shard"] / "train"))])
    np.testing.assert_array_equal(stream[stream != 2], spm_ids_of_text(prepared["spm"], prepared["train_txt"]))
    assert len(sizes) == done["sequences"]


@pytest.mark.parametrize("mode", ["complete", "complete_doc"])
def test_masked_lm_serves_every_token_in_blocks_of_at_most_512(prepared, mode):
    from fairseq.data.indexed_dataset import MMapIndexedDataset
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    task = MaskedLMTask.setup_task(MaskedLMConfig(data=str(prepared["shard"]), tokens_per_sample=512,
                                                  sample_break_mode=mode, seed=1))
    task.load_dataset("train")
    ds = task.dataset("train")
    pad = task.source_dictionary.pad()
    # every block passes fairseq's size filter (the one that drops over-long blocks in training)
    itr = task.get_batch_iterator(ds, max_sentences=4, max_positions=512, ignore_invalid_inputs=True, seed=1)
    served = sorted(i for batch in itr.frozen_batches for i in batch)
    assert served == list(range(len(ds)))
    blocks = []
    for i in range(len(ds)):
        item = ds[i]
        src, tgt = item["net_input.src_tokens"], item["target"]
        assert len(src) <= 512
        original = np.where(tgt.numpy() != pad, tgt.numpy(), src.numpy())  # undo the masking
        assert original[0] == task.source_dictionary.bos()
        blocks.append(original[1:])
    lines = [np.asarray(t) for t in MMapIndexedDataset(str(prepared["shard"] / "train"))]
    if mode == "complete_doc":  # document separators (a lone </s>) end blocks and are not served
        lines = [t for t in lines if len(t) > 1]
    np.testing.assert_array_equal(np.concatenate(blocks), np.concatenate(lines))


def test_split_long_lines_reference():
    """Pieces of at most max_line - 1 tokens + </s>, cut at a word start when one is near."""
    word_start = np.zeros(100, dtype=bool)
    word_start[50:] = True  # ids >= 50 start a word
    line = np.array([60, 1, 2, 3, 61, 4, 5, 6, 7, 8, 9, 10, 62, 11, 99])  # 14 tokens + the line's </s> (99)
    flat = np.concatenate([[70, 99], line])
    sizes = np.array([2, len(line)], dtype=np.int32)
    out, out_sizes, split = c4_binarize.split_long_lines(flat, sizes, 9, word_start)
    assert split == 1
    # max 8 tokens per piece, window (9-1)//4 = 2: positions 7, 8 -> none starts a word: hard cut at 8;
    # then 6 tokens remain (fits)
    pieces = np.split(out, np.cumsum(out_sizes)[:-1])
    assert [p.tolist() for p in pieces] == [[70, 99], [60, 1, 2, 3, 61, 4, 5, 6, 99], [7, 8, 9, 10, 62, 11, 99]]
    word_start[7] = True  # id 7 now starts a word
    line2 = np.array([60, 1, 2, 3, 61, 4, 7, 6, 5, 8, 99])  # id 7 at position 6: before the window (7, 8): hard cut
    out, out_sizes, _ = c4_binarize.split_long_lines(line2, np.array([11], dtype=np.int32), 9, word_start)
    assert [p.tolist() for p in np.split(out, np.cumsum(out_sizes)[:-1])] == [
        [60, 1, 2, 3, 61, 4, 7, 6, 99], [5, 8, 99]]
    line3 = np.array([60, 1, 2, 3, 61, 4, 5, 7, 6, 8, 99])  # id 7 at position 7: cut before it
    out, out_sizes, _ = c4_binarize.split_long_lines(line3, np.array([11], dtype=np.int32), 9, word_start)
    assert [p.tolist() for p in np.split(out, np.cumsum(out_sizes)[:-1])] == [
        [60, 1, 2, 3, 61, 4, 5, 99], [7, 6, 8, 99]]
    # lines that fit are returned as they are
    same, same_sizes, n = c4_binarize.split_long_lines(flat, sizes, 20, word_start)
    assert n == 0 and same is flat and same_sizes is sizes


def binarize_args(d: Path, text: Path, out: Path, tokens_per_sample: str) -> List[str]:
    return [str(text), "--out", str(out), "--spm-model", str(d / "spm" / "spm.model"), "--dict",
            str(d / "spm" / "dict.txt"), "--workers", "1", "--tokens-per-sample", tokens_per_sample,
            "--progress-seconds", "0"]


def test_outputs_belong_to_their_settings(prepared, tmp_path, capsys):
    d = prepared["dir"]
    out = tmp_path / "b"
    assert c4_binarize.main(binarize_args(d, prepared["train_txt"], out, "512")) == 0
    assert c4_binarize.main(binarize_args(d, prepared["train_txt"], out, "512")) == 0
    assert "skip:" in capsys.readouterr().err
    mtime = (tmp_path / "b.bin").stat().st_mtime_ns
    assert c4_binarize.main(binarize_args(d, prepared["train_txt"], out, "128")) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "tokens_per_sample: recorded 512, now 128" in err and "--force" in err
    assert (tmp_path / "b.bin").stat().st_mtime_ns == mtime  # nothing was touched
    assert c4_binarize.main([*binarize_args(d, prepared["train_txt"], out, "128"), "--force"]) == 0
    assert line_sizes(f"{out}.idx").max() <= 127


def test_empty_input_is_refused_at_the_step_that_reads_it(prepared, tmp_path, capsys):
    empty = tmp_path / "c4-train.00001-of-00002.json.gz"
    empty.write_bytes(b"")  # a 0-byte download
    assert c4_extract.main([str(empty), str(tmp_path / "e.txt")]) == 1
    err = capsys.readouterr().err
    assert f"{empty}: no usable document" in err and not (tmp_path / "e.txt").exists()
    write_c4(empty, ["   ", "\n\n"])  # documents, but none usable
    assert c4_extract.main([str(empty), str(tmp_path / "e.txt")]) == 1
    assert "empty_text=2" in capsys.readouterr().err
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n\n")
    assert c4_binarize.main(binarize_args(prepared["dir"], blank, tmp_path / "x", "512")) == 1
    assert f"no text in {blank}" in capsys.readouterr().err
    assert not (tmp_path / "x.bin").exists()


def test_data_bin_can_be_moved_and_is_checked(prepared, tmp_path, capsys):
    moved = tmp_path / "elsewhere"
    shutil.copytree(prepared["dir"] / "data-bin", moved)
    r = c4_data.check_data(str(moved))
    assert r["shards"] == [str(moved / "shard0")]  # the copy reads its own files
    assert r["over_length"] == {"train": (0, r["over_length"]["train"][1]), "valid": (0, r["over_length"]["valid"][1])}
    assert c4_data.main([str(moved)]) == 0 and capsys.readouterr().out.strip() == str(moved / "shard0")
    # over-length lines: counted per split, an error above the allowed fraction
    sizes = line_sizes(moved / "shard0" / "train.idx")
    n_long = int((sizes > 63).sum())
    assert 0 < n_long < len(sizes)
    assert c4_data.main([str(moved), "--tokens-per-sample", "64"]) == 1
    err = capsys.readouterr().err
    assert f"train: {n_long} of {len(sizes)} lines" in err and "MAX_SKIP_FRACTION" in err
    assert c4_data.main([str(moved), "--tokens-per-sample", "64", "--max-skip-fraction", "1"]) == 0
    assert c4_data.main([str(moved), "--tokens-per-sample", "64", "--sample-break-mode", "none"]) == 0
    # a replaced dictionary and a missing shard are named
    with open(moved / "shard0" / "dict.txt", "a") as f:
        f.write("extra 1\n")
    assert c4_data.main([str(moved)]) == 1
    assert "shard0/dict.txt is not the dictionary recorded in" in capsys.readouterr().err
    assert c4_data.main([f"{moved / 'shard0'}:{moved / 'shard0'}"]) == 1  # colon-joined shards: the same check
    assert f"is not the dictionary recorded in {moved / 'layout.json'}" in capsys.readouterr().err
    shutil.rmtree(moved / "shard0")
    assert c4_data.main([str(moved)]) == 1
    assert f"data folder {moved / 'shard0'} does not exist" in capsys.readouterr().err


def test_layout_refuses_binaries_of_another_dictionary(prepared, tmp_path, capsys):
    """A retrained dictionary (another vocabulary) with the old binaries: layout stops before writing anything, naming
    the prefix, both SHA-1s (as step 3 records them) and the fix; a .done without the dictionary's hash is refused."""
    d = prepared["dir"]
    train, valid = d / "bin" / "train", d / "bin" / "valid"
    other = tmp_path / "dict.txt"
    other.write_text((d / "spm" / "dict.txt").read_text() + "extra 1\n")
    made_with = hashlib.sha1((d / "spm" / "dict.txt").read_bytes()).hexdigest()
    given = hashlib.sha1(other.read_bytes()).hexdigest()
    data_bin = tmp_path / "data-bin"
    argv = [str(train), "--data-bin", str(data_bin), "--dict", str(other), "--valid", str(valid)]
    assert c4_layout.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"c4_layout: error: {train}: binarized with another dictionary ({train}.done records dict_sha1 {made_with}, "
        f"{other} has {given}); re-run the binarize step with --dict {other} (it redoes such a prefix; tupe-c4 run: "
        "STEPS=34)")
    assert not data_bin.exists()
    # a .done that records no dictionary hash
    old = tmp_path / "old" / "train"
    old.parent.mkdir()
    for ext in ("bin", "idx"):
        shutil.copyfile(f"{train}.{ext}", f"{old}.{ext}")
    done = json.loads((d / "bin" / "train.done").read_text())
    del done["identity"]
    Path(f"{old}.done").write_text(json.dumps(done))
    assert c4_layout.main([str(old), "--data-bin", str(data_bin), "--dict", str(d / "spm" / "dict.txt"),
                           "--valid", str(valid)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"c4_layout: error: {old}: {old}.done records no dictionary hash (identity.dict_sha1); re-run the binarize "
        f"step with --dict {d / 'spm' / 'dict.txt'} (it redoes such a prefix; tupe-c4 run: STEPS=34)")
    assert not data_bin.exists()


def test_a_second_layout_into_a_data_bin_being_written_is_refused(prepared, tmp_path, capsys):
    """While another live run holds DATA_BIN's lock (a resubmitted layout task with other shards; planted: pid 1 on
    this host), layout exits 2 with one line naming the lock and changes nothing (two runs mixed their shard lists);
    once that run is gone (a killed run's lock left behind), layout takes the lock over and arranges the shards."""
    from test_run_lock import dead_pid, plant
    from tupe_common import lock as run_lock

    d = prepared["dir"]
    data_bin = tmp_path / "data-bin"
    held = Path(os.path.realpath(data_bin)) / run_lock.LOCK_NAME
    plant(held, pid=1, host=run_lock.host())
    argv = [str(d / "bin" / "train"), "--data-bin", str(data_bin), "--dict", str(d / "spm" / "dict.txt"),
            "--valid", str(d / "bin" / "valid")]
    assert c4_layout.main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"c4_layout: error: {data_bin} is in use by another run (pid 1 ") and f"lock {held}" in last
    assert sorted(f.name for f in data_bin.iterdir()) == [run_lock.LOCK_NAME]
    plant(held, pid=dead_pid(), host=run_lock.host())
    assert c4_layout.main(argv) == 0
    assert sorted(f.name for f in data_bin.iterdir()) == ["data_path.txt", "layout.json", "shard0", "shards.tsv"]


@pytest.mark.parametrize("case", ["valid_is_train", "train_twice"])
def test_layout_refuses_a_prefix_given_twice(prepared, tmp_path, capsys, case):
    """The validation prefix among the train ones (validation documents trained on), or a train prefix twice (its
    documents trained twice as often), by any spelling of its path: a usage error (exit 2), one line, nothing
    written."""
    d = prepared["dir"]
    train, valid = d / "bin" / "train", d / "bin" / "valid"
    alias = d / "bin" / ".." / "bin" / "train"  # the same prefix, spelled otherwise
    trains, valid_arg = ([train], alias) if case == "valid_is_train" else ([train, alias], valid)
    data_bin = tmp_path / "data-bin"
    assert c4_layout.main([*map(str, trains), "--data-bin", str(data_bin), "--dict", str(d / "spm" / "dict.txt"),
                           "--valid", str(valid_arg)]) == 2
    expected = {"valid_is_train": f"--valid {alias} is also a train prefix ({train}); binarize the validation "
                                  "texts to a prefix of their own",
                "train_twice": f"train prefix {alias} is given twice (also as {train}); give each shard once"}[case]
    assert capsys.readouterr().err.strip() == f"c4_layout: error: {expected}"
    assert not data_bin.exists()


def test_a_gzip_output_closes_its_file_and_its_bytes_do_not_name_it(tmp_path):
    """Step 1's .gz output closes the file it writes (GzipFile leaves a file it was given open, for the garbage
    collector, which would lose an error such as a full disk: a ResourceWarning says so), and its header names
    neither the file (a .partial name) nor a time, so the same text gives the same bytes."""
    import gc
    import warnings

    from tupe_preprocess.c4_common import open_output

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for name in ("a.txt.gz.partial", "b.txt.gz"):
            with open_output(str(tmp_path / name), str(tmp_path / name.replace(".partial", ""))) as w:
                w.write(b"one line\n")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert (tmp_path / "a.txt.gz.partial").read_bytes() == (tmp_path / "b.txt.gz").read_bytes()
    assert gzip.decompress((tmp_path / "b.txt.gz").read_bytes()) == b"one line\n"
