"""Hub downloads on local fixtures (no network): GLUE parquet -> raw GLUE files that read back as the
fixtures, SNLI parquet -> probing jsonl, C4 shards verified and resumable, and one line when offline."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from tupe_preprocess import glue_binarize  # noqa: E402
from tupe_preprocess.hub_files import HubError, HubFile, LocalRepo, download  # noqa: E402

GLUE = ROOT / "tests/data/glue"
OFFLINE = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))

# nyu-mll/glue, written down independently of tupe_preprocess/glue_download.py: config, text columns, labels
HUB_GLUE = {
    "CoLA": ("cola", ["sentence"], None), "SST-2": ("sst2", ["sentence"], None),
    "MRPC": ("mrpc", ["sentence1", "sentence2"], None), "STS-B": ("stsb", ["sentence1", "sentence2"], float),
    "QQP": ("qqp", ["question1", "question2"], None),
    "MNLI": ("mnli", ["premise", "hypothesis"], ["entailment", "neutral", "contradiction"]),
    "QNLI": ("qnli", ["question", "sentence"], ["entailment", "not_entailment"]),
    "RTE": ("rte", ["sentence1", "sentence2"], ["entailment", "not_entailment"]),
    "WNLI": ("wnli", ["sentence1", "sentence2"], None),
}
HUB_SPLIT = {"train.tsv": "train", "dev.tsv": "validation", "test.tsv": "test",
             "dev_matched.tsv": "validation_matched", "dev_mismatched.tsv": "validation_mismatched",
             "test_matched.tsv": "test_matched", "test_mismatched.tsv": "test_mismatched"}


def write_parquet(rows: dict, path: Path, shards: int = 1) -> None:
    """``rows``: column -> values; written as ``shards`` files SPLIT-0000k-of-0000n.parquet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(rows.values())))
    cut = [n * k // shards for k in range(shards + 1)]
    for k in range(shards):
        part = {c: v[cut[k]:cut[k + 1]] for c, v in rows.items()}
        pq.write_table(pa.table(part), path.parent / f"{path.name}-{k:05d}-of-{shards:05d}.parquet")


@pytest.fixture(scope="module")
def glue_mirror(tmp_path_factory) -> Path:
    """The hub's parquet files, made from the raw fixtures (QQP's bad lines are not on the hub)."""
    mirror = tmp_path_factory.mktemp("glue_mirror")
    for name, (config, columns, labels) in HUB_GLUE.items():
        for split in glue_binarize.read_task(glue_binarize.TASKS[name], str(GLUE / name)):
            rows = {c: texts for c, texts in zip(columns, split.texts)}
            if split.spec.label is None:
                ids = [-1] * split.written
            elif labels is float:
                ids = [float(v) for v in split.labels]
            else:
                ids = [labels.index(v) if labels else int(v) for v in split.labels]
            rows.update(label=ids, idx=list(range(split.written)))
            shards = 2 if (name, split.spec.file) == ("QQP", "train.tsv") else 1
            write_parquet(rows, mirror / config / HUB_SPLIT[split.spec.file], shards)
    return mirror


def test_glue_parquet_becomes_the_raw_layout_glue_binarize_reads(glue_mirror, tmp_path, starts_process):
    out = tmp_path / "glue_data"
    p = run([sys.executable, "-m", "tupe_preprocess.glue_download", "--out-dir", str(out), "--from-dir", str(glue_mirror)])
    assert "[QQP] train.tsv: 48 lines" in p.stderr  # progress: on stderr, as every command's
    for name in HUB_GLUE:
        fixture_files = sorted(f.name for f in (GLUE / name).iterdir())
        assert sorted(f.name for f in (out / name).iterdir()) == fixture_files
        for fname in fixture_files:
            ours = (out / name / fname).read_text(encoding="utf-8").split("\n")
            theirs = (GLUE / name / fname).read_text(encoding="utf-8").split("\n")
            if name != "CoLA" or fname == "test.tsv":  # CoLA train/dev have no header
                assert ours[0] == theirs[0], f"{name}/{fname} header"
            assert {len(line.split("\t")) for line in ours if line} == {len(theirs[0].split("\t"))}
        got = glue_binarize.read_task(glue_binarize.TASKS[name], str(out / name))
        want = glue_binarize.read_task(glue_binarize.TASKS[name], str(GLUE / name))
        assert [s.spec.file for s in got] == [s.spec.file for s in want]
        for g, w in zip(got, want):
            assert g.texts == w.texts and g.labels == w.labels, f"{name}/{g.spec.file}"
            assert sum(g.skipped.values()) == 0
    # CoLA's annotation column marks the unacceptable sentences, as the original files do
    cola = [line.split("\t") for line in (out / "CoLA/train.tsv").read_text().splitlines()]
    assert all((f[2] == "*") == (f[1] == "0") for f in cola)
    assert (out / "MRPC/train.tsv").read_bytes().startswith("\ufeffQuality".encode())

    again = run([sys.executable, "-m", "tupe_preprocess.glue_download", "--out-dir", str(out), "--from-dir", str(glue_mirror),
                 "--tasks", "RTE"])
    assert "exists, kept" in again.stderr


def test_a_cached_parquet_that_fails_verification_is_fetched_again(glue_mirror, tmp_path, starts_process):
    out = tmp_path / "glue_data"
    args = [sys.executable, "-m", "tupe_preprocess.glue_download", "--out-dir", str(out), "--from-dir", str(glue_mirror),
            "--tasks", "RTE"]
    run(args)
    cached = out / ".parquet/rte/train-00000-of-00001.parquet"
    cached.write_bytes(cached.read_bytes()[:-10])  # a truncated download
    (out / "RTE/dev.tsv").write_text("user edit\n")
    p = run(args + ["--force"])
    assert "size" in p.stderr and "fetching it again" in p.stderr
    assert (out / "RTE/dev.tsv").read_text().startswith("index\tsentence1\tsentence2\tlabel\n")
    assert not list(out.glob("*.partial")) and not list(out.rglob(".*.partial"))


def test_download_refuses_a_file_whose_hash_differs_from_the_listing(tmp_path):
    src = tmp_path / "repo/en"
    src.mkdir(parents=True)
    (src / "a.json.gz").write_bytes(b"x" * 100)

    class WrongHash(LocalRepo):  # a hub whose listing disagrees with the bytes it serves
        def list_files(self, folder=None):
            return [HubFile(f.path, f.size, "0" * 64) for f in super().list_files(folder)]

    repo = WrongHash(str(tmp_path / "repo"), "test/repo")
    with pytest.raises(HubError, match="failed verification .*SHA-256"):
        download(repo, repo.list_files("en"), tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []  # neither the file nor a .partial is left


def test_snli_parquet_becomes_the_jsonl_probing_sets_reads(tmp_path, starts_process):
    from tupe_preprocess.probing_sets import ReadStats, read_snli

    fixture = ROOT / "tests/data/snli_sample.jsonl"
    recs = [json.loads(line) for line in fixture.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels = ["entailment", "neutral", "contradiction"]
    write_parquet({"premise": [r["sentence1"] for r in recs], "hypothesis": [r["sentence2"] for r in recs],
                   "label": [labels.index(r["gold_label"]) if r["gold_label"] != "-" else -1 for r in recs]},
                  tmp_path / "mirror/plain_text/test")
    out = tmp_path / "snli"
    p = run([sys.executable, "-m", "tupe_preprocess.snli_download", "--out-dir", str(out), "--splits", "test",
             "--from-dir", str(tmp_path / "mirror")])
    assert f"{len(recs)} lines (2 without gold label)" in p.stderr
    got_stats, want_stats = ReadStats(), ReadStats()
    got = [(r["sentence1"], r["sentence2"], r["gold_label"]) for _, r in read_snli(str(out / "snli_1.0_test.jsonl"), got_stats)]
    want = [(r["sentence1"], r["sentence2"], r["gold_label"]) for _, r in read_snli(str(fixture), want_stats)]
    assert got == want and got_stats.no_gold_label == want_stats.no_gold_label == 2
    assert run([sys.executable, "-m", "tupe_preprocess.probing_sets", "--input", str(out / "snli_1.0_test.jsonl"),
                "--out-dir", str(tmp_path / "probing"), "--seed", "1"]).returncode == 0


@pytest.fixture
def c4_mirror(tmp_path) -> Path:
    en = tmp_path / "mirror/en"
    en.mkdir(parents=True)
    for f in (ROOT / "preprocess/samples/c4").glob("*.json.gz"):
        shutil.copy(f, en / f.name)
    return tmp_path / "mirror"


def c4_download(*args) -> subprocess.CompletedProcess:
    """``python -m tupe_preprocess.c4 download ARGS`` (the C4 pipeline's first subcommand)."""
    return subprocess.run([sys.executable, "-m", "tupe_preprocess.c4", "download", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_c4_shards_are_downloaded_verified_and_skipped_on_rerun(c4_mirror, tmp_path, starts_process):
    out = tmp_path / "c4/en"
    p = c4_download("--out-dir", out, "--shards", "0-1", "--valid-shards", "0", "--from-dir", c4_mirror)
    assert p.returncode == 0, p.stderr
    names = sorted(f.name for f in out.iterdir())
    assert names == ["c4-train.00000-of-01024.json.gz", "c4-train.00001-of-01024.json.gz",
                     "c4-validation.00000-of-00008.json.gz"]
    for n in names:
        assert (out / n).read_bytes() == (c4_mirror / "en" / n).read_bytes()
    with gzip.open(out / names[0], "rt") as f:
        assert "text" in json.loads(f.readline())
    again = c4_download("--out-dir", out, "--shards", "0-1", "--from-dir", c4_mirror)
    assert again.returncode == 0 and again.stderr.count("already verified") == 3
    missing = c4_download("--out-dir", out, "--shards", "0-2", "--from-dir", c4_mirror)
    assert missing.returncode == 1 and "c4-train.00002-of-01024.json.gz" in missing.stderr
    assert "Traceback" not in missing.stderr
    help_text = c4_download("--help").stdout
    assert "--shards" in help_text and "0-31" in help_text and "allenai/c4" in help_text


def test_shard_ranges():
    from tupe_preprocess.c4_download import parse_ranges, wanted_paths

    assert parse_ranges("0-3,8,2", 1024, "--shards") == [0, 1, 2, 3, 8]
    assert parse_ranges("", 8, "--valid-shards") == []
    for bad in ("3-1", "x", "0-1024"):
        with pytest.raises(ValueError):
            parse_ranges(bad, 1024, "--shards")
    assert wanted_paths([31], [0]) == ["en/c4-train.00031-of-01024.json.gz", "en/c4-validation.00000-of-00008.json.gz"]


@pytest.mark.parametrize("module, args, says", [
    ("glue_download", ["--tasks", "RTE,Nope"], "--tasks 'RTE,Nope': unknown task(s) Nope; choose from CoLA"),
    ("glue_download", ["--tasks", ","], "--tasks ',': no task named"),
    ("snli_download", ["--splits", "test,val"], "--splits 'test,val': unknown split(s) val; choose from train"),
    ("c4_download", ["--shards", "3-1"], "--shards '3-1': expected ranges like 0-31,40"),
    ("c4_download", ["--shards", "", "--valid-shards", ""], "name no shard"),
    ("snli_download", ["--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_usage_error_exits_2_and_writes_nothing(module, args, says, tmp_path, capsys):
    import importlib

    main = importlib.import_module(f"tupe_preprocess.{module}").main
    with pytest.raises(SystemExit) as stop:
        main([*args, "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and says in err and err.startswith("usage: python -m tupe_preprocess."), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cmd", [
    [sys.executable, "-m", "tupe_preprocess.glue_download", "--tasks", "RTE"],
    [sys.executable, "-m", "tupe_preprocess.snli_download", "--splits", "test"],
    [sys.executable, "-m", "tupe_preprocess.c4", "download"],
])
def test_without_network_one_clear_line(cmd, tmp_path, starts_process):
    env = dict(OFFLINE, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    p = subprocess.run(cmd + ["--out-dir", str(tmp_path / "o")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(errors) == 1, p.stderr
    assert "cannot list" in errors[0] and "Hugging Face hub" in errors[0] and "--from-dir" in errors[0]


def test_remote_repo_reads_the_hub_listing_and_downloads(tmp_path, monkeypatch):
    """RemoteRepo against a local stand-in for huggingface_hub's two calls (listing, download)."""
    import hashlib

    import huggingface_hub
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    from tupe_preprocess.hub_files import RemoteRepo

    files = {"en/c4-train.00000-of-01024.json.gz": b"big file " * 50, "README.md": b"# card\n"}

    def blob_id(data: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def tree(self, repo_id, path_in_repo=None, *, recursive=False, revision=None, repo_type=None, **kw):
        assert (repo_id, repo_type, recursive) == ("allenai/c4", "dataset", True)
        yield RepoFolder(path="en", oid="0" * 40)
        lfs = {"size": len(files["en/c4-train.00000-of-01024.json.gz"]), "pointerSize": 134,
               "oid": hashlib.sha256(files["en/c4-train.00000-of-01024.json.gz"]).hexdigest()}
        yield RepoFile(path="en/c4-train.00000-of-01024.json.gz", size=lfs["size"], oid="1" * 40, lfs=lfs)
        yield RepoFile(path="README.md", size=len(files["README.md"]), oid=blob_id(files["README.md"]))

    def hub_download(repo_id, filename, *, repo_type=None, revision=None, cache_dir=None, **kw):
        blob = Path(cache_dir) / "blobs" / filename.replace("/", "_")  # the cache layout: blob + snapshot link
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(files[filename])
        link = Path(cache_dir) / "snapshots/main" / filename
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(blob)
        return str(link)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_tree", tree)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub_download)
    repo = RemoteRepo("allenai/c4")
    listing = repo.list_files()
    assert [(f.path, f.sha256 is not None, f.blob_id is not None) for f in listing] == [
        ("en/c4-train.00000-of-01024.json.gz", True, False), ("README.md", False, True)]
    got = download(repo, listing, tmp_path / "out")
    assert [p.read_bytes() for p in got] == list(files.values())
    files["README.md"] = b"# cord\n"  # served bytes no longer match the listed blob id (same size)
    (tmp_path / "out/README.md").unlink()
    with pytest.raises(HubError, match="git blob id differs"):
        download(repo, listing[1:], tmp_path / "out")

    def offline(*a, **kw):
        raise ConnectionError("[Errno -2] Name or service not known\nmore detail")

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_tree", offline)
    with pytest.raises(HubError) as e:
        RemoteRepo("allenai/c4").list_files()
    assert str(e.value).startswith("cannot list allenai/c4 on the Hugging Face hub (ConnectionError: [Errno -2]")
    assert "\n" not in str(e.value)
