"""``make gpu-study`` on CPU: the carried data folder (bench/gpu_study_data.py) made from the fixtures without a
download, then the command behind ``make gpu-study`` (bench/gpu_study.py) in its dry run on that folder, with a
carried wheel installed offline, inside a network namespace without network where ``unshare`` allows, and with every
Python process's sockets refused and recorded. Its report has both models and the budget's lines; the gpu-9min
preset plans at least 100M tokens per model and its ELECTRA setting is accepted."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
BIN = Path(sys.executable).parent

import gpu_study  # noqa: E402
import gpu_study_data  # noqa: E402
from conftest import run  # noqa: E402
from corpus import study_inputs  # noqa: E402

pytestmark = pytest.mark.usefixtures("starts_process")  # its tests start processes (real CLIs, scripts)

# the dry run: the tiny preset, the vocabulary the fixture corpus can fill, 4 updates with 2 validations
TINY = {"PRESET": "tiny", "VOCAB_SIZE": "300", "HARD_VOCAB_LIMIT": "0", "TOTAL_UPDATES": "4", "VALID_POINTS": "2",
        "PREP_JOBS": "1", "OMP_NUM_THREADS": "1"}
# Every Python process of the dry run imports this first (PYTHONPATH): a socket that connects anywhere, or a
# name looked up, is written to NETWORK_GUARD_LOG and refused.
GUARD = '''import os, socket
_log = os.environ.get("NETWORK_GUARD_LOG")
if _log:
    def _refuse(what):
        with open(_log, "a") as f:
            f.write(f"{os.getpid()} {what!r}\\n")
        raise OSError("the test's network guard refused " + repr(what))
    _connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
    def connect(self, address):
        if self.family != socket.AF_UNIX:
            _refuse(address)
        return _connect(self, address)
    def connect_ex(self, address):
        if self.family != socket.AF_UNIX:
            _refuse(address)
        return _connect_ex(self, address)
    def getaddrinfo(host, *args, **kwargs):
        _refuse(host)
    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
'''


def environment(**more: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("OUT", "PRESET")}
    env.update(PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
    env.update(more)
    return env


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The data folder from the fixtures: C4-format text of tests/corpus.py and the SST-2 fixture task."""
    d = tmp_path_factory.mktemp("gpu_study_data")
    study_inputs(d)
    p = run([sys.executable, "bench/gpu_study_data.py", "--c4-dir", str(d / "c4"), "--tasks-dir", str(d / "tasks"),
             "--dir", str(d / "carry"), "--work", str(d / "work")], env=environment(**TINY), timeout=600)
    return d / "carry", p


def test_the_data_folder_holds_the_prep_the_tasks_and_a_manifest_that_counts_them(data):
    carry, p = data
    manifest = json.loads((carry / "manifest.json").read_text())
    assert manifest["preset"] == "tiny" and manifest["tasks"] == ["SST-2"]
    assert manifest["prep"] == {"VOCAB_SIZE": "300", "TOKENS_PER_SAMPLE": "64", "MAX_SHARDS": "0", "MAX_DOCS": "0"}
    files = {str(f.relative_to(carry)): f.stat().st_size for f in carry.rglob("*") if f.is_file()}
    assert files.pop("manifest.json") > 0 and files == manifest["files"]  # every file listed, with its size
    for needed in ("c4/spm/spm.model", "c4/spm/dict.txt", "c4/data-bin/data_path.txt", "c4/data-bin/shard0/train.bin",
                   "c4/data-bin/shard0/valid.idx", "locality/heldout.txt", "tasks-bin/SST-2-bin/input0/train.bin",
                   "tasks/SST-2/train.tsv", "tasks/SST-2/dev.tsv"):
        assert needed in files, needed
    assert not [f for f in carry.rglob("*") if f.is_symlink()]  # real files: a link may not travel
    # the corpus facts, against the binaries themselves: every train line's length, and blocks of at most T tokens
    from tupe_common.mmap_index import line_sizes

    sizes = line_sizes(str(carry / "c4/data-bin/shard0/train.idx"))
    corpus = manifest["corpus"]
    assert corpus["train_tokens"] == int(np.sum(sizes)) and corpus["train_lines"] == len(sizes)
    assert 1 < corpus["mean_block_tokens"] <= 64 and corpus["blocks"] <= corpus["train_lines"]
    assert corpus["blocks"] * corpus["mean_block_tokens"] == pytest.approx(corpus["train_tokens"] + corpus["blocks"], abs=1)
    assert manifest["tokens_per_model"] == round(4 * 8 * corpus["mean_block_tokens"])  # 4 updates x 8 blocks (tiny)
    assert f"wrote {carry} for PRESET=tiny" in p.stdout and "MiB (limit 35;" in p.stdout


def test_a_folder_over_the_limit_is_refused_and_the_old_one_kept(data, tmp_path):
    carry, _ = data
    before = (carry / "manifest.json").read_text()
    with pytest.raises(SystemExit, match="over --limit-mib 0.01"):
        gpu_study_data.assemble(carry.parent / "work" / "study", carry.parent / "tasks", ["SST-2"], carry, {}, 0.01)
    assert (carry / "manifest.json").read_text() == before and not (carry.parent / "carry.partial").exists()


def tiny_wheel(folder: Path) -> None:
    """A carried wheel folder as make gpu-wheels writes it, holding one pure-Python wheel made here."""
    folder.mkdir()
    dist = "gpu_study_probe-0.1.dist-info"
    files = {"gpu_study_probe/__init__.py": "CARRIED = True\n",
             f"{dist}/METADATA": "Metadata-Version: 2.1\nName: gpu-study-probe\nVersion: 0.1\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / "gpu_study_probe-0.1-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    (folder / "requirements.txt").write_text("gpu-study-probe==0.1  # carried\n")


def no_network_prefix() -> list:
    """``unshare -rn`` (a new user and network namespace: no interface up) where this machine allows it."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-rn"]
    return []


@pytest.fixture(scope="module")
def dry(data, tmp_path_factory):
    carry, _ = data
    d = tmp_path_factory.mktemp("gpu_study_dry")
    tiny_wheel(d / "wheels")
    (d / "guard").mkdir()
    (d / "guard" / "sitecustomize.py").write_text(GUARD)
    # LENGTH_FACTORS=1: no longer-inputs stage (two process starts for 1 s of work; tests/test_study.py runs it)
    env = environment(**TINY, LENGTH_FACTORS="1", NETWORK_GUARD_LOG=str(d / "network.log"), PYTHONPATH=str(d / "guard"))
    prefix = no_network_prefix()
    start = time.monotonic()
    p = subprocess.run([*prefix, sys.executable, "bench/gpu_study.py", "--out", str(d / "study"), "--data", str(carry),
                        "--wheels", str(d / "wheels"), "--site", str(d / "site"), "--dry-run", "--lanes", "2",
                        "--report-to", str(d / "report")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - start
    print(f"dry run: {seconds:.0f} s{' in a network namespace' if prefix else ''}")
    return p, d, prefix, seconds


def test_dry_run_writes_the_report_with_both_models(dry):
    p, d, _, _ = dry
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    md = (d / "study" / "report.md").read_text()
    loss_table = md.split("## Pre-training: validation MLM loss")[1].split("\n## ")[0]
    assert "| bert-a |" in loss_table and "| tupe-r |" in loss_table
    assert "| bert-a - tupe-r |" in md or "| tupe-r - bert-a |" in md  # the two compared downstream
    for model in ("bert-a", "tupe-r"):
        run = d / "study" / "finetune" / model / "seed1" / "SST-2" / "lr1e-3_seed1"
        assert (run / "result.json").is_file() and (run / "predictions.json").is_file() and (run / "order.json").is_file()
        assert (d / "study" / "locality" / model / "seed1.csv").is_file()
        assert (d / "study" / "pretrain" / model / "seed1" / "pretrain.done").is_file()
    # the carried wheel went in offline, into the site folder, and the report names it
    assert (d / "site" / "gpu_study_probe" / "__init__.py").is_file()
    assert "installed 1 wheels from" in (d / "study" / "install.log").read_text()
    # what comes back from a borrowed machine: the report, the budget, the figure and the logs, no checkpoint
    back = {f.name for f in (d / "report").rglob("*") if f.is_file()}
    assert {"report.md", "budget.md", "overview.png", "study.csv", "settings.env", "pretrain_bert-a_seed1.log",
            "pretrain_tupe-r_seed1.log"} <= back
    assert not [n for n in back if n.endswith(".pt")]


def test_dry_run_accounts_for_its_budget(dry):
    p, d, _, seconds = dry
    budget = (d / "study" / "budget.md").read_text()
    assert budget in (d / "study" / "report.md").read_text()  # appended to the report
    assert budget.strip() in p.stdout  # and printed: a borrowed machine's command output shows it
    rows = dict(re.findall(r"^\| ([a-z -]+) \| (\d+) \| ", budget, re.M))
    assert list(rows) == ["start-up", "install", "data", "study plan", "pre-training", "after pre-training", "report"]
    total = int(re.search(r"^\| \*\*total\*\* \| \*\*(\d+)\*\* \| of 540 \|", budget, re.M).group(1))
    assert abs(total - sum(map(int, rows.values()))) <= len(rows)  # each row rounded on its own
    assert 0 < total <= seconds + 1 and int(rows["pre-training"]) > 0 and int(rows["after pre-training"]) > 0
    assert "within the budget" in budget and "installed 1 wheels" in budget
    assert "| 4 part(s) (locality 2, fine-tuning with the dev predictions and word-order sets 2), 2 at once |" in budget
    for model in ("bert-a", "tupe-r"):
        row = re.search(rf"^\| {model} seed 1 \| (\d+) \| ([0-9,]+) \| ([0-9.]+) \| (\d+) \|", budget, re.M)
        updates, tokens = int(row.group(1)), int(row.group(2).replace(",", ""))
        # against the log's own lines: every update's tokens (train_inner, logged at each of the 4 updates here)
        log = (d / "study" / "pretrain" / model / "seed1" / "train.log").read_text()
        per_update = [int(float(x)) for x in re.findall(r'\| train_inner \| \{.*"wpb": "([0-9.]+)"', log)]
        assert updates == 4 and len(per_update) == 4 and abs(tokens - sum(per_update)) <= 1  # wpb: 1 decimal
        assert 4 * 8 <= tokens <= 4 * 8 * 64  # 8 blocks of 1 to 64 tokens per update


def test_dry_run_needs_no_network(dry):
    _, d, prefix, _ = dry
    refused = (d / "network.log").read_text() if (d / "network.log").exists() else ""
    assert refused == "", f"the dry run tried the network:\n{refused}"
    probe = subprocess.run([sys.executable, "-c", "import socket; socket.create_connection(('pypi.org', 443), 3)"],
                           env=environment(NETWORK_GUARD_LOG=str(d / "probe.log"), PYTHONPATH=str(d / "guard")),
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "pypi.org" in (d / "probe.log").read_text()  # the guard does record and refuse


def test_a_part_past_the_budget_is_stopped_and_the_report_written_from_what_finished(data, tmp_path):
    """A pre-training far longer than the budget: stopped (its process group: no fairseq-train left behind) when
    the budget less the reserve is spent; the report is written from what finished and says so."""
    carry, _ = data
    out = tmp_path / "study"
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(out), "--data", str(carry), "--dry-run",
                        "--budget-s", "70", "--reserve-s", "50"], cwd=ROOT,
                       env=environment(**dict(TINY, TOTAL_UPDATES="100000")), capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    budget = (out / "budget.md").read_text()
    assert "**parts stopped at the budget**" in budget
    for model in ("bert-a", "tupe-r"):
        assert re.search(rf"Stopped at the budget: pre-training {model} 1 \(at update \d+\)", budget), budget
        assert not (out / "pretrain" / model / "seed1" / "pretrain.done").exists()
    total = int(re.search(r"^\| \*\*total\*\* \| \*\*(\d+)\*\* \|", budget, re.M).group(1))
    assert total <= 70 + 5
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert left == [], "processes of the stopped study are still running"
    md = (out / "report.md").read_text()
    assert "## Missing parts" in md and "bert-a" in md.split("## Missing parts")[1] and budget in md


def test_data_prepared_for_other_settings_is_refused_before_any_work(data, tmp_path):
    carry, _ = data
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(tmp_path / "study"), "--data", str(carry),
                        "--dry-run"], cwd=ROOT, env=environment(**dict(TINY, VOCAB_SIZE="1000")), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and "VOCAB_SIZE=1000 (the data: 300)" in p.stderr
    assert not (tmp_path / "study").exists()  # nothing was changed
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(tmp_path / "study"), "--data",
                        str(tmp_path / "none"), "--dry-run"], cwd=ROOT, env=environment(), capture_output=True, text=True)
    assert p.returncode == 2 and "make gpu-study-data" in p.stderr


def test_without_cuda_it_says_so_in_one_line_and_exits_1(data, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    carry, _ = data
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(tmp_path / "study"), "--data", str(carry)],
                       cwd=ROOT, env=environment(**TINY), capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "no CUDA device" in p.stderr


# ---- the gpu-9min preset ------------------------------------------------------------------------------------------

MEAN_BLOCK_NPM = 113.8  # tokens per block of the npm corpus at T=128 with its 8k vocabulary (make gpu-study-data, 2026-11-26)


def test_gpu_9min_plans_100m_tokens_per_model_within_its_checks():
    from study.settings import preset_path, read_preset

    p = read_preset(preset_path("gpu-9min"))
    updates, batch = int(p["TOTAL_UPDATES"]), int(p["BATCH_SIZE"])
    assert batch % int(p["MAX_SENTENCES"]) == 0 and updates % int(p["VALID_POINTS"]) == 0
    assert updates % (4 * (updates // int(p["VALID_POINTS"]))) == 0 and int(p["WARMUP"]) < updates
    assert updates * batch * MEAN_BLOCK_NPM >= 100e6
    assert updates * batch * int(p["TOKENS_PER_SAMPLE"]) < 1.2 * 100e6 / (MEAN_BLOCK_NPM / 128)  # not far beyond


def test_gpu_9min_takes_the_electra_setting_with_the_drivers_generator_divisor(tmp_path):
    from study.plan import Plan
    from study.settings import UsageError

    env = dict(PRESET="gpu-9min", OUT=str(tmp_path / "s"), TASKS="none", VARIANTS="bert-a", OBJECTIVES="mlm electra")
    plan = Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR=gpu_study.DEFAULTS["GENERATOR_SIZE_DIVISOR"]))
    assert plan.pretrain_parts() == [("bert-a", 1), ("bert-a+electra", 1)]
    with pytest.raises(UsageError, match="GENERATOR_SIZE_DIVISOR"):  # auto is 3 at SIZE=base: 512 is not divisible
        Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR="auto"))
