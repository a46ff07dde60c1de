"""The GPU kit on CPU: the carried wheel folder (bench/gpu_wheels.py: derived requirements, a cp312 download that
fits, an offline install of this machine's wheels) and ``make gpu-check`` (bench/gpu_check.py) in its dry run,
its refusal without CUDA and its report when a section fails. The downloads need the package index; without it
they skip."""
from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402
import gpu_wheels  # noqa: E402

CARRY_LIMIT = 64 * 2**20  # what a borrowed GPU machine takes: the work tree and the carried folders


def index_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


needs_index = pytest.mark.skipif(not index_reachable(), reason="pypi.org is unreachable: the wheel download needs it")


def cli(*args: str, env=None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)


# --- the wheel folder ---------------------------------------------------------------------------------------------


def test_requirements_are_derived_pinned_and_never_torch():
    wanted = gpu_wheels.derive("3.12")
    pins = gpu_wheels.pins()
    for name in ("ve-fairseq", "hydra-core", "omegaconf", "antlr4-python3-runtime", "bitarray", "sacremoses", "pytest"):
        assert wanted[name] == pins[name]
    assert all(wanted[n] == pins[n] for n in wanted)  # every one at its constraints.txt version
    torch_side = {"torch", "torchaudio", "sympy", "networkx", "jinja2", "filelock", "fsspec", "typing-extensions"}
    assert not torch_side & set(wanted) and not any(n.startswith("nvidia-") for n in wanted)
    carried = gpu_wheels.carried(wanted)
    assert "ve-fairseq" in carried and "scipy" not in carried and "numpy" not in carried  # the machine has these
    assert gpu_wheels.carried(wanted, everything=True) == wanted
    # markers are evaluated for the target: tomli and exceptiongroup are pytest's on Python < 3.11 only
    assert "tomli" not in wanted and "exceptiongroup" not in wanted


def tracked_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    return sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file())


@needs_index
def test_download_for_cp312_resolves_and_fits_with_the_work_tree(tmp_path):
    folder = tmp_path / "wheels"
    p = cli("bench/gpu_wheels.py", "download", "--dir", str(folder), "--python-version", "3.12")
    assert p.returncode == 0, p.stderr
    wheels = sorted(folder.glob("*.whl"))
    listed = gpu_wheels.read_requirements(folder)
    assert {n for n, (_, carried) in listed.items() if carried} == {gpu_wheels.parse_wheel_filename(w.name)[0] for w in wheels}
    for w in wheels:
        tags = gpu_wheels.parse_wheel_filename(w.name)[3]
        assert all(t.interpreter in ("cp312", "py3", "py2") and t.platform in ("any", *gpu_wheels.PLATFORMS) for t in tags), w
    assert not [w for w in wheels if w.name.startswith(("torch", "nvidia", "triton"))]
    assert sum(w.stat().st_size for w in wheels) + tracked_bytes() < CARRY_LIMIT


@needs_index
def test_offline_install_of_this_machines_wheels_leaves_torch_alone(tmp_path):
    """This machine's wheels, downloaded, then installed with --no-index into a folder; with it first on
    PYTHONPATH, fairseq and hydra come from the folder and torch is still this environment's."""
    folder, site = tmp_path / "wheels", tmp_path / "site"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    p = cli("bench/gpu_wheels.py", "download", "--dir", str(folder), "--python-version", version)
    assert p.returncode == 0, p.stderr
    p = cli("bench/gpu_wheels.py", "install", "--dir", str(folder), "--target", str(site))
    assert p.returncode == 0, p.stderr
    assert "installed" in p.stdout and "missing" not in p.stdout  # every expected package is here
    assert not list(site.glob("torch*")) and not list(site.glob("nvidia*"))
    probe = "import fairseq, hydra, omegaconf, torch; print(fairseq.__file__, hydra.__file__, torch.__file__)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    p = cli("-c", probe, env=env)
    fairseq_file, hydra_file, torch_file = p.stdout.split()
    assert fairseq_file.startswith(str(site)) and hydra_file.startswith(str(site))
    assert torch_file == torch.__file__


def test_install_without_a_folder_says_what_to_do(tmp_path):
    p = cli("bench/gpu_wheels.py", "install", "--dir", str(tmp_path / "none"), "--target", str(tmp_path / "site"))
    assert p.returncode == 1 and "make gpu-wheels" in p.stderr


# --- make gpu-check ---------------------------------------------------------------------------------------------


def test_without_cuda_it_says_so_in_one_line_and_exits_1(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = cli("bench/gpu_check.py", "--out", str(tmp_path))
    assert p.returncode == 1 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "no CUDA device" in p.stderr


PEAK = 2.0  # TFLOP/s given to the dry run, so that it computes MFU


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dry")
    p = cli("bench/gpu_check.py", "--out", str(out), "--dry-run", "--variants", "deberta_rel",
            "--peak-tflops", str(PEAK))
    with open(out / "gpu_check.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return p, (out / "report.md").read_text(encoding="utf-8"), rows


def values(rows, section: str, **match) -> dict:
    return {r["metric"]: r["value"] for r in rows if r["section"] == section
            and all(r[k] == v for k, v in match.items())}


def test_dry_run_passes_every_section_and_reports_each(dry_run):
    p, report, rows = dry_run
    assert p.returncode == 0, report
    for name in gpu_check.SECTIONS:
        assert f"| {name} | ok |" in report and f"## {name}" in report
    assert "Loss falls, overflow skips counted" in report
    env = values(rows, "environment")
    assert env["torch"] == torch.__version__ and env["peak_bf16_tflops"] == f"{PEAK:g}"
    assert int(values(rows, "cuda_tests")["skipped"]) >= 1  # no CUDA here: they skip, the dry run says so


def test_dry_run_sdpa_section_checks_every_dtype_and_the_pitfalls(dry_run):
    _, _, rows = dry_run
    for dtype in ("fp32", "bf16", "fp16"):
        found = values(rows, "sdpa", subject="deberta_rel", setting=dtype)
        assert found["ok"] == found["mask_aligned"] == found["mask_in_q_dtype"] == found["all_padding_row_finite"] == "True"
        assert float(found["features_rel_error_sdpa"]) <= 2 * float(found["features_rel_error_explicit"]) + 0.02
        assert found["backend_padded"] in ("math", "flash (CPU)")  # the CPU's; CUDA names its own


def test_dry_run_train_loss_falls_and_timing_columns_follow_from_the_measurements(dry_run):
    _, _, rows = dry_run
    for launcher in ("cli", "hydra"):  # fairseq-train and fairseq-hydra-train (bf16's way on a GPU)
        train = values(rows, "train", setting=f"fp32 {launcher}")
        assert train["loss_falls"] == "True" and float(train["last_loss"]) < float(train["first_loss"])
        assert train["overflow_skips"] == "0"
    for length in (16, 32):
        t = {k: float(v) for k, v in values(rows, "timing", subject="deberta_rel", setting=f"T={length}").items()}
        tokens = t["batch"] * length
        assert t["variant_tokens_per_s"] == pytest.approx(tokens / (t["variant_ms"] / 1e3))
        assert t["variant_mfu"] == pytest.approx(t["variant_flops"] / (t["variant_ms"] / 1e3) / (PEAK * 1e12))
        assert t["time_ratio"] == pytest.approx(t["variant_ms"] / t["roberta_ms"])
        assert t["variant_flops"] > t["roberta_flops"] > 0 and t["variant_peak_mib"] > 0


def test_a_failing_section_is_in_the_report_and_the_exit_status(tmp_path):
    p = cli("bench/gpu_check.py", "--out", str(tmp_path), "--dry-run", "--sections", "timing", "--variants", "nosuch")
    assert p.returncode == 1
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| timing | failed |" in report and "unknown ['nosuch']" in report
    assert (tmp_path / "gpu_check.csv").is_file()


# --- the parts the report is made of -------------------------------------------------------------------------------


def test_pytest_summary_and_fairseq_log_are_read():
    assert gpu_check.pytest_counts("...\n3 passed, 1 skipped, 9 deselected in 2.1s\n") == {
        "passed": 3, "skipped": 1, "deselected": 9}
    log = ("epoch 001:      5 / 40 loss=9.012, nll_loss=9.0, loss_scale=128, wps=1\n"
           "fairseq.optim.fp16_optimizer | NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0\n"
           "epoch 001:     10 / 40 loss=7.5, loss_scale=64, wps=1\n")
    facts = gpu_check.train_log_facts(log.replace("epoch 001:", "train_inner | epoch 001:"))
    assert facts == {"losses": [9.012, 7.5], "overflows": 1, "loss_scale": "64"}


def test_bf16_never_goes_through_fairseq_train_whose_command_line_makes_it_tpu():
    from fairseq import options

    argv = ["data", "--task", "masked_lm", "--arch", "tupe_r_tiny", "--bf16", "--user-dir", str(ROOT / "tupe_plugin")]
    assert options.parse_args_and_arch(options.get_training_parser(), argv).tpu  # fairseq 0.12: --bf16 => --tpu
    gpu = gpu_check.settings(dry_run=False)
    assert ("bf16", "hydra") in gpu.train_runs and ("fp16", "cli") in gpu.train_runs
    command = gpu_check.train_command(gpu, "bf16", "hydra", Path("bin"), Path("run"))
    assert "common.bf16=true" in command and "common.fp16=false" in command and "common.cpu=false" in command
    with pytest.raises(ValueError, match="--tpu"):
        gpu_check.train_command(gpu, "bf16", "cli", Path("bin"), Path("run"))


def test_peak_rate_by_card_name():
    assert gpu_check.peak_tflops("NVIDIA H100 80GB HBM3", None) == 989.4
    assert gpu_check.peak_tflops("NVIDIA H100 PCIe", None) == 756.0
    assert gpu_check.peak_tflops("NVIDIA H200", None) == 989.4
    assert gpu_check.peak_tflops("Some GPU", None) is None and gpu_check.peak_tflops("Some GPU", 100.0) == 100.0
