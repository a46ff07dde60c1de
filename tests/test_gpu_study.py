"""``make gpu-study`` on CPU: the carried data folder (bench/gpu_study_data.py) made from the fixtures without a
download, then the command behind ``make gpu-study`` (bench/gpu_study.py) in its dry run on that folder, twice, as
on two GPU loans: the first call (2 seeds, real fairseq training at the tiny preset, a carried wheel installed
offline, inside a network namespace without network where ``unshare`` allows, every Python process's sockets
refused and recorded) declares the endpoints and copies the study back without checkpoints; the second call, on
that copy, adds the next seed and reports the declared comparisons over all three. The time table's GPU seconds
against a reference; the gpu-9min preset plans about 35M tokens per model and its ELECTRA setting is accepted."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
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
from tupe_study import gpu_schedule  # noqa: E402
from conftest import run  # noqa: E402
from corpus import study_inputs  # noqa: E402

pytestmark = pytest.mark.usefixtures("starts_process")  # its tests start processes (real CLIs, scripts)

# the dry run: the tiny preset, the vocabulary the fixture corpus can fill, 4 updates with 2 validations
TINY = {"PRESET": "tiny", "VOCAB_SIZE": "300", "HARD_VOCAB_LIMIT": "0", "TOTAL_UPDATES": "4", "VALID_POINTS": "2",
        "PREP_JOBS": "1", "OMP_NUM_THREADS": "1"}
# every call of the dry runs: pre-training only (the stages after it are the study's own, tested in test_study*.py),
# no data-loader worker (a process each on 2 cores)
DRY = ["--dry-run", "--after", "none", "--pretrain-workers", "0", "--lanes", "2"]
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
    """Two calls on one study: the first (seeds 1 and 2) with --report-to ``back``, the second on ``back`` (seed 3),
    as a second GPU loan gets the folder the first one sent back."""
    carry, _ = data
    d = tmp_path_factory.mktemp("gpu_study_dry")
    tiny_wheel(d / "wheels")
    (d / "guard").mkdir()
    (d / "guard" / "sitecustomize.py").write_text(GUARD)
    env = environment(**TINY, NETWORK_GUARD_LOG=str(d / "network.log"), PYTHONPATH=str(d / "guard"))
    prefix = no_network_prefix()
    start = time.monotonic()
    first = subprocess.run([*prefix, sys.executable, "bench/gpu_study.py", "--out", str(d / "study"), "--data",
                            str(carry), "--wheels", str(d / "wheels"), "--site", str(d / "site"), "--seeds", "2", *DRY,
                            "--report-to", str(d / "back")], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    seconds = [time.monotonic() - start]
    back = d / "back"
    before = {str(p.relative_to(back)): p.read_bytes() for p in sorted(back.glob("pretrain/*/seed*/*")) if p.is_file()}
    copied = {str(p.relative_to(back)) for p in back.rglob("*") if p.is_file()}  # what the first call sent back
    start = time.monotonic()
    second = subprocess.run([*prefix, sys.executable, "bench/gpu_study.py", "--out", str(back), "--data", str(carry),
                             "--seeds", "1", *DRY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    seconds.append(time.monotonic() - start)
    print(f"dry runs: {seconds[0]:.0f} s and {seconds[1]:.0f} s{' in a network namespace' if prefix else ''}")
    return {"first": first, "second": second, "d": d, "back": back, "before": before, "copied": copied,
            "prefix": prefix}


def final_losses(study: Path, model: str) -> Dict[int, float]:
    """{seed: the last validation loss its train.log printed}, read here from the json lines."""
    out = {}
    for log in sorted(study.glob(f"pretrain/{model}/seed*/train.log")):
        losses = re.findall(r'\| valid \| \{.*"valid_loss": "([0-9.]+)"', log.read_text())
        out[int(log.parent.name[4:])] = float(losses[-1])
    return out


def test_the_first_call_declares_the_endpoints_and_tests_them_over_its_two_seeds(dry):
    p, d = dry["first"], dry["d"]
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    settings = (d / "study" / "settings.env").read_text()
    assert "ENDPOINTS=final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a\n" in settings
    assert "EQUIVALENCE_BITS=0.05\n" in settings
    assert settings.startswith("# declared ") and "\nVARIANTS=bert-a tupe-r\n" in settings
    assert f"{gpu_schedule.SEQUENTIAL}PRETRAIN_SEEDS=1 2\n" in settings  # the seeds so far, rewritten by each call
    for model in ("bert-a", "tupe-r"):
        assert sorted(final_losses(d / "study", model)) == [1, 2]
    rows = {r["measure"]: r for r in csv.DictReader(open(d / "study" / "endpoints.csv"))}
    assert set(rows) == {"final_loss", "loss_auc"} and {r["family_size"] for r in rows.values()} == {"2"}
    a, b = final_losses(d / "study", "tupe-r"), final_losses(d / "study", "bert-a")
    diffs = {int(k): float(v) for k, v in (x.split(":") for x in rows["final_loss"]["by_pretrain_seed"].split())}
    assert diffs == pytest.approx({s: a[s] - b[s] for s in (1, 2)}, abs=1e-6)  # TUPE-R - BERT-A per seed, from the logs
    budget = (d / "study" / "budget.md").read_text()
    assert "call 1 on this study folder, pre-training seed(s) 1, 2." in budget
    assert "- `final_loss: tupe-r - bert-a` over 2 seeds (1 2): mean " in budget
    # the carried wheel went in offline, into the site folder
    assert (d / "site" / "gpu_study_probe" / "__init__.py").is_file()
    assert "installed 1 wheels from" in (d / "study" / "install.log").read_text()


def test_report_to_is_the_study_without_checkpoints_or_data(dry):
    assert not list(dry["d"].glob("study/.run.lock*")) and not list(dry["back"].glob(".run.lock*"))  # released
    d, files = dry["d"], dry["copied"]
    assert not [f for f in files if ".run.lock" in f], files  # the lock the call held while it copied stays behind
    assert {"report.md", "budget.md", "endpoints.csv", "settings.env", "overview.png", "loss_seconds.csv",
            "loss_seconds.png", "gpu_calls.tsv", "timings.tsv"} <= files
    assert not [f for f in files if f.endswith(".pt") or f.startswith(("c4/", "tasks-bin/")) or "tensorboard" in f]
    assert any((d / "study").rglob("*.pt"))  # they were there, in OUT
    for model in ("bert-a", "tupe-r"):
        for seed in (1, 2):
            assert f"pretrain/{model}/seed{seed}/pretrain.done" in dry["before"]


def test_the_second_call_adds_the_next_seed_and_keeps_the_earlier_ones(dry):
    p, back = dry["second"], dry["back"]
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    for rel, content in dry["before"].items():  # seeds 1 and 2 were not trained again
        assert (back / rel).read_bytes() == content, rel
    for model in ("bert-a", "tupe-r"):
        assert sorted(final_losses(back, model)) == [1, 2, 3]
        assert (back / "pretrain" / model / "seed3" / "checkpoint_last.pt").is_file()  # trained here, this call
    calls = list(csv.DictReader(open(back / "gpu_calls.tsv"), delimiter="\t"))
    assert [(c["seeds"], c["at_once"], c["exit"]) for c in calls] == [("1 2", "4", "0"), ("3", "2", "0")]
    a, b = final_losses(back, "tupe-r"), final_losses(back, "bert-a")
    rows = {r["measure"]: r for r in csv.DictReader(open(back / "endpoints.csv"))}
    diffs = {int(k): float(v) for k, v in (x.split(":") for x in rows["final_loss"]["by_pretrain_seed"].split())}
    assert diffs == pytest.approx({s: a[s] - b[s] for s in (1, 2, 3)}, abs=1e-6)
    d = [a[s] - b[s] for s in (1, 2, 3)]
    assert float(rows["final_loss"]["mean"]) == pytest.approx(sum(d) / 3, abs=1e-6)
    assert "seeds finished before: 1, 2; this call: 3;" in p.stdout
    settings = (back / "settings.env").read_text()  # the seeds line grew; the rest is as the first call declared it
    assert settings == (dry["d"] / "study" / "settings.env").read_text().replace("PRETRAIN_SEEDS=1 2\n",
                                                                                  "PRETRAIN_SEEDS=1 2 3\n")
    md = (back / "report.md").read_text()
    declared = md.split("## Declared comparisons (confirmatory)")[1].split("\n## ")[0]
    assert "| seed 1 | seed 2 | seed 3 |" in declared and "one Holm family of 2" in declared
    assert "fine-tuning run" not in md.split("## Missing parts and problems")[1]  # TASKS=none: none is missing
    budget = (back / "budget.md").read_text()
    assert budget in md and budget.strip() in p.stdout  # appended to the report and printed
    assert "call 2 on this study folder, pre-training seed(s) 3." in budget
    assert "- `final_loss: tupe-r - bert-a` over 3 seeds (1 2 3): mean " in budget
    from tupe_study.power import seeds_needed

    for r in rows.values():  # the seeds the effect so far needs, at Holm's first step of the family of 2
        d = abs(float(r["mean"])) / float(r["sd"])
        assert f"d = {d:.2f}: {seeds_needed(d, 0.8, 0.025)} seeds for 80% power" in budget


def test_the_time_table_holds_every_validation_with_its_gpu_seconds(dry):
    back = dry["back"]
    rows = list(csv.DictReader(open(back / "loss_seconds.csv")))
    assert sorted((r["model"], int(r["seed"]), int(r["update"])) for r in rows) == sorted(
        (m, s, u) for m in ("bert-a", "tupe-r") for s in (1, 2, 3) for u in (2, 4))
    for r in rows:
        assert 0 <= float(r["gpu_s"]) <= float(r["wall_s"]) + 0.05
    for m in ("bert-a", "tupe-r"):  # the table's loss at update 4: the mean of the seeds' final losses
        mean = sum(final_losses(back, m).values()) / 3
        cell = [float(r["valid_loss"]) for r in rows if r["model"] == m and r["update"] == "4"]
        assert sum(cell) / 3 == pytest.approx(mean, abs=1e-9)
    line = re.search(r"^\| 4 \| ([0-9.]+) \| \d+ \(\d+\) \| 3 \| ([0-9.]+) \| \d+ \(\d+\) \| 3 \|$",
                     (back / "budget.md").read_text(), re.M)
    assert line and float(line.group(1)) == pytest.approx(sum(final_losses(back, "bert-a").values()) / 3, abs=6e-5)


def test_the_dry_runs_need_no_network(dry):
    d = dry["d"]
    refused = (d / "network.log").read_text() if (d / "network.log").exists() else ""
    assert refused == "", f"the dry run tried the network:\n{refused}"
    probe = subprocess.run([sys.executable, "-c", "import socket; socket.create_connection(('pypi.org', 443), 3)"],
                           env=environment(NETWORK_GUARD_LOG=str(d / "probe.log"), PYTHONPATH=str(d / "guard")),
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "pypi.org" in (d / "probe.log").read_text()  # the guard does record and refuse


def test_a_call_that_changes_the_declared_comparisons_is_refused(dry, data):
    back, (carry, _) = dry["back"], data
    calls = (back / "gpu_calls.tsv").read_text()
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(back), "--data", str(carry), *DRY],
                       cwd=ROOT, env=environment(**TINY, ENDPOINTS="final_loss:tupe-r:bert-a"), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and "> ENDPOINTS=final_loss:tupe-r:bert-a" in p.stderr, p.stderr
    assert (back / "gpu_calls.tsv").read_text() == calls and not (back / "pretrain" / "bert-a" / "seed4").exists()


def test_shared_seconds_divides_each_second_among_the_processes_running():
    spans = [(0.0, 100.0), (0.0, 50.0)]
    assert gpu_study.shared_seconds(spans, spans[0], 100) == pytest.approx(50 / 2 + 50)  # shared, then alone
    assert gpu_study.shared_seconds(spans, spans[1], 50) == pytest.approx(25)
    assert gpu_study.shared_seconds(spans, spans[0], 20) == pytest.approx(10)
    assert gpu_study.shared_seconds([(5.0, 9.0)], (5.0, 9.0), 30) == pytest.approx(4)  # alone: its wall seconds, to its end
    three = [(0.0, 30.0), (10.0, 40.0), (20.0, 50.0)]  # the second: 10 s in two, 10 s in three, 10 s in two
    assert gpu_study.shared_seconds(three, three[1], 40) == pytest.approx(5 + 10 / 3 + 5)


def test_a_call_takes_the_first_seeds_not_finished():
    assert gpu_schedule.call_seeds([], 3) == [1, 2, 3]
    assert gpu_schedule.call_seeds([1, 2, 3], 3) == [4, 5, 6]
    assert gpu_schedule.call_seeds([1, 3], 2) == [2, 4]  # seed 2, stopped at the budget before, is redone


def test_a_part_past_the_budget_is_stopped_and_left_out_of_the_copy(data, tmp_path):
    """A pre-training far longer than the budget: stopped (its process group: no fairseq-train left behind) when
    the budget less the reserve is spent; the budget says so; the copy for the next call leaves the stopped
    pre-trainings out (without their checkpoints they cannot resume: the next call redoes them)."""
    carry, _ = data
    out = tmp_path / "study"
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(out), "--data", str(carry), "--seeds", "2",
                        *DRY, "--budget-s", "45", "--reserve-s", "25", "--report-to", str(tmp_path / "back")], cwd=ROOT,
                       env=environment(**dict(TINY, TOTAL_UPDATES="100000")), capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]  # each stopped part once, as stopped (not also as failed)
    assert re.fullmatch(r"gpu_study: error: (pre-training (bert-a|tupe-r) [12] \(at update \d+\) stopped at the budget; ){4}"
                        r"rerun the same command to resume \(finished runs are skipped\)", last), last
    budget = (out / "budget.md").read_text()
    assert "**parts stopped at the budget**" in budget
    for model in ("bert-a", "tupe-r"):
        for seed in (1, 2):
            assert re.search(rf"Stopped at the budget: pre-training {model} {seed} \(at update \d+\)", budget), budget
            assert not (out / "pretrain" / model / f"seed{seed}" / "pretrain.done").exists()
            assert (out / "pretrain" / model / f"seed{seed}" / "train.log").is_file()
            assert not (tmp_path / "back" / "pretrain" / model / f"seed{seed}").exists()
    total = int(re.search(r"^\| \*\*total\*\* \| \*\*(\d+)\*\* \|", budget, re.M).group(1))
    assert total <= 45 + 5
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert left == [], "processes of the stopped study are still running"
    assert (tmp_path / "back" / "budget.md").read_text() == budget
    assert "1 2\t4\t" in (tmp_path / "back" / "gpu_calls.tsv").read_text()  # the call is recorded, exit 1


def test_parts_past_the_budget_are_stopped_together_with_their_trees():
    """gpu_schedule.stop: TERM to every part's process group at once, then KILL to what is left of each part's tree
    after the grace period (10 s; 0.5 s here). Three parts that take 1 s to stop cleanly (a pre-training finishing
    its update and saving) end in about 1 s, not 3 (one after another, the reserve paid for each). A part whose
    child runs in a session of its own and ignores TERM (as a part's fairseq-train runs in a group of its own): the
    part ends at the TERM, and what it left, the child and its own child, is killed then."""
    from process_tree import assert_gone, tree, wait_for

    parts = [subprocess.Popen(["bash", "-c", "trap 'sleep 1; exit 0' TERM; sleep 100 & wait"], start_new_session=True)
             for _ in range(3)]
    stubborn = subprocess.Popen(["bash", "-c", "setsid bash -c \"trap '' TERM; sleep 100 & wait\" & wait"],
                                start_new_session=True)
    # the traps are set once each bash has started its sleep
    wait_for(lambda: all(any(c.name() == "sleep" for c in tree(p.pid)) for p in [*parts, stubborn]), 30,
             "the parts did not start")
    started = time.monotonic()
    gpu_schedule.stop(*parts)
    took = time.monotonic() - started
    assert [p.returncode for p in parts] == [0, 0, 0] and 1 <= took < 2.5, took
    left = tree(stubborn.pid)
    assert len({os.getpgid(c.pid) for c in left}) == 1 and os.getpgid(left[0].pid) != stubborn.pid  # its own group
    started = time.monotonic()
    gpu_schedule.stop(stubborn, grace_s=0.5)
    assert stubborn.returncode == -signal.SIGTERM and time.monotonic() - started < 2
    assert_gone(left)  # the child that ignored TERM in its own session, and its sleep: killed once the part ended
    ignoring = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 100 & sleep 100"], start_new_session=True)
    wait_for(lambda: len(tree(ignoring.pid)) == 2, 30, "the part did not start")
    left, started = tree(ignoring.pid), time.monotonic()
    gpu_schedule.stop(ignoring, grace_s=0.5)  # a part that ignores TERM itself: killed with its tree after the grace
    assert ignoring.returncode == -signal.SIGKILL and 0.5 <= time.monotonic() - started < 2
    assert_gone(left)


def test_sigterm_stops_every_pre_training_and_says_so_in_one_line(data, tmp_path):
    """SIGTERM to the command behind make gpu-study alone (kill PID) while its pre-trainings run: every process of
    its tree ends (the study parts and their fairseq-train, each in a process group of its own), exit 143, and the
    last line says what stopped it and how it resumes. While it runs, a second call into the same OUT is refused at
    once (exit 2, naming the first's pid and host)."""
    from process_tree import command_lines, start, stop_cleanly, tree, wait_for
    from tupe_common import lock

    carry, _ = data
    out = tmp_path / "study"
    p = start([sys.executable, "bench/gpu_study.py", "--out", out, "--data", carry, "--seeds", "2", *DRY],
              environment(**dict(TINY, TOTAL_UPDATES="100000")), cwd=ROOT)
    wait_for(lambda: p.poll() is not None or sum("fairseq-train" in c for c in command_lines(tree(p.pid))) >= 2,
             240, "the pre-trainings did not start")
    assert p.poll() is None, p.communicate()
    # a second call into the same OUT while the first runs: refused at once, naming the first (one call per OUT)
    holder = (lock.read_record(str(out / lock.LOCK_NAME)) or {}).get("pid")
    assert holder == p.pid, holder
    second = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(out), "--data", str(carry), *DRY],
                            cwd=ROOT, env=environment(**TINY), capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and second.stderr.strip().splitlines()[-1].startswith(
        f"gpu_study: error: {out} is in use by another run (pid {p.pid} on {lock.host()}, "), second.stderr[-2000:]
    stop_cleanly(p, signal.SIGTERM, "gpu_study: error: stopped by SIGTERM; rerun the same command to resume (finished "
                 "runs are skipped)", timeout=90)


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


def test_gpu_9min_plans_35m_tokens_per_model_within_its_checks():
    from tupe_study.settings import preset_path, read_preset

    p = read_preset(preset_path("gpu-9min"))
    updates, batch = int(p["TOTAL_UPDATES"]), int(p["SENTENCES_PER_UPDATE"])
    assert batch % int(p["MAX_SENTENCES"]) == 0 and updates % int(p["VALID_POINTS"]) == 0
    assert updates % (4 * (updates // int(p["VALID_POINTS"]))) == 0 and int(p["WARMUP"]) < updates
    assert 34e6 <= updates * batch * MEAN_BLOCK_NPM <= 36e6  # about 35M tokens per model
    assert int(p["VALID_POINTS"]) >= 8  # the curve of the declared loss_auc


def test_the_declared_comparisons_are_tupes_claim_only_when_both_of_its_models_are_there(monkeypatch, tmp_path):
    manifest = {"preset": "gpu-9min", "tasks": ["uci-sentiment"],
                "prep": {"VOCAB_SIZE": "8000", "TOKENS_PER_SAMPLE": "128", "MAX_SHARDS": "0", "MAX_DOCS": "0"}}
    for name in ("ENDPOINTS", "EQUIVALENCE_BITS", "VARIANTS", "OBJECTIVES", "TASKS", "PRESET", "PRETRAIN_SEEDS"):
        monkeypatch.delenv(name, raising=False)
    env, finished, seeds = gpu_schedule.settings_env(manifest, tmp_path / "data", tmp_path / "s", True, 3)
    assert env["ENDPOINTS"] == "final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a" and env["EQUIVALENCE_BITS"] == "0.05"
    assert (finished, seeds, env["PRETRAIN_SEEDS"], env["TASKS"]) == ([], [1, 2, 3], "1 2 3", "none")
    monkeypatch.setenv("VARIANTS", "bert-a")
    monkeypatch.setenv("OBJECTIVES", "mlm electra")
    monkeypatch.setenv("TASKS", "auto")
    env, _, _ = gpu_schedule.settings_env(manifest, tmp_path / "data", tmp_path / "s", True, 3)
    assert env["ENDPOINTS"] == "none" and env["EQUIVALENCE_BITS"] == "none" and env["TASKS"] == "uci-sentiment"


def test_gpu_9min_takes_the_electra_setting_with_the_drivers_generator_divisor(tmp_path):
    from tupe_study.plan import Plan
    from tupe_study.settings import UsageError

    env = dict(PRESET="gpu-9min", OUT=str(tmp_path / "s"), TASKS="none", VARIANTS="bert-a", OBJECTIVES="mlm electra")
    plan = Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR=gpu_schedule.DEFAULTS["GENERATOR_SIZE_DIVISOR"]))
    assert plan.pretrain_parts() == [("bert-a", 1), ("bert-a+electra", 1)]
    with pytest.raises(UsageError, match="GENERATOR_SIZE_DIVISOR"):  # auto is 3 at SIZE=base: 512 is not divisible
        Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR="auto"))


def test_a_second_call_into_a_held_out_is_refused_at_once(data, tmp_path):
    """One call per OUT: a live holder's lock (pid 1 runs) refuses the call before any work, exit 2, one line naming
    the holder's pid and host; the study and pre-trainings a call starts (its children) are let through (the dry
    runs above hold OUT while their study runs in it)."""
    from test_run_lock import plant
    from tupe_common import lock

    carry, _ = data
    study = tmp_path / "study"
    study.mkdir()
    plant(study / lock.LOCK_NAME, pid=1, host=lock.host())
    p = subprocess.run([sys.executable, "bench/gpu_study.py", "--out", str(study), "--data", str(carry), *DRY],
                       cwd=ROOT, env=environment(**TINY), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1].startswith(
        f"gpu_study: error: {study} is in use by another run (pid 1 on {lock.host()}, "), p.stderr[-2000:]
    assert sorted(x.name for x in study.iterdir()) == [lock.LOCK_NAME]  # nothing written


def test_a_full_disk_while_pre_training_names_the_file_and_keeps_what_finished(data, tmp_path):
    """The disk fills while TUPE-R's pre-training saves its checkpoint at update 4 (ENOSPC injected where the OS
    raises it, as in tests/test_full_disk_pretrain.py): the call ends with exit 1, its lines name the failed
    pre-training and the file being written, the half-written file is removed and the checkpoint of update 2 kept;
    BERT-A's pre-training is finished, and the report does not read the failed one's losses as final (one seed,
    nothing declared: the report's rule is tested in tests/test_study.py). The rerun is the study part's, whose
    resume after a full disk tests/test_study.py checks loss for loss."""
    from process_tree import assert_none_left, marked
    from test_full_disk_pretrain import SITECUSTOMIZE
    from tupe_pretrain.check_resume import num_updates

    carry, _ = data
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = tmp_path / "study"
    cmd = [sys.executable, "bench/gpu_study.py", "--out", str(out), "--data", str(carry), "--seeds", "1", *DRY]
    seed = out / "pretrain" / "tupe-r" / "seed1"
    env = marked(environment(**TINY, ENDPOINTS="none", PYTHONPATH=str(hooks),
                             FULL_SAVE="tupe-r/seed1/checkpoint_1_4.pt.tmp"))
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    assert_none_left(env)  # every part and its fairseq-train
    written = seed / "checkpoint_1_4.pt"
    assert re.search(rf"gpu_study: \[ *\d+ s\] pre-training tupe-r 1 ended with exit status 1: pre-training tupe-r "
                     rf"seed 1 failed: {re.escape(str(written))}: no space left on its disk while writing it", p.stdout)
    assert p.stderr.strip().splitlines()[-1] == ("gpu_study: error: pre-training tupe-r 1 failed; rerun the same "
                                                 "command to resume (finished runs are skipped)")
    assert "tupe-r seed 1: pre-training not finished (no pretrain.done beside" in (out / "report.md").read_text()
    assert not list(seed.glob("*.tmp")) and not written.exists() and not (seed / "pretrain.done").exists()
    assert num_updates(str(seed / "checkpoint_last.pt")) == 2
    assert (out / "pretrain" / "bert-a" / "seed1" / "pretrain.done").is_file()
