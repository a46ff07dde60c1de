"""The GPU kit on CPU: the carried wheel folder (bench/gpu_wheels.py: derived requirements, a cp312 download that
fits, an offline install of this machine's wheels) and ``make gpu-check`` (bench/gpu_check/) in its dry run,
its refusal without CUDA and its report when a section fails. The downloads need the package index; without it
they skip."""
from __future__ import annotations

import csv
import os
import shlex
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from conftest import run  # noqa: E402
import gpu_wheels  # noqa: E402
from gpu_check.attention import ERROR_COLUMNS  # noqa: E402
from gpu_check.cuda_tests import pytest_counts  # noqa: E402
from gpu_check.environment import peak_tflops  # noqa: E402
from gpu_check.driver import QUICK_BUDGET_S  # noqa: E402
from gpu_check.sections import BY_NAME, NAMES, QUICK_SECTIONS, SECTION_RESERVE_S, quick_estimate_s  # noqa: E402
from gpu_check.settings import QUICK_VARIANTS, settings  # noqa: E402
from gpu_check.sync import SYNC_STEPS  # noqa: E402
from gpu_check.throughput import pretrain_command, throughput_log_facts, write_token_data  # noqa: E402
from gpu_check.train import train_command, train_log_facts  # noqa: E402

pytestmark = pytest.mark.usefixtures("starts_process")  # its tests start processes (real CLIs, scripts)

CARRY_LIMIT = 64 * 2**20  # what a borrowed GPU machine takes: the work tree and the carried folders


def index_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


needs_index = pytest.mark.skipif(not index_reachable(), reason="pypi.org is unreachable: the wheel download needs it")


def cli(*args: str, env=None, timeout: int = 300) -> subprocess.CompletedProcess:
    return run([sys.executable, *args], cwd=ROOT, check=False, env=env, timeout=timeout)


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


def runs_on_cp312(tag) -> bool:
    """A wheel tag that CPython 3.12 installs: cp312, pure Python, or the stable ABI of 3.x <= 3.12 (psutil's cp36-abi3)."""
    stable = tag.abi == "abi3" and tag.interpreter.startswith("cp3") and int(tag.interpreter[3:]) <= 12
    return tag.interpreter in ("cp312", "py3", "py2") or stable


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
        assert any(runs_on_cp312(t) and t.platform in ("any", *gpu_wheels.PLATFORMS) for t in tags), w  # one tag fits
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
    p = cli("bench/gpu_check", "--out", str(tmp_path))
    assert p.returncode == 1 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "no CUDA device" in p.stderr


@pytest.mark.parametrize("bad, line", [
    (["--out", "{file}"], "--out: {file}: is not a folder (it, or a folder above it, is a file), where a folder is "
                          "expected"),
    (["--out", "{file}/report"], "--out: {file}: is not a folder (it, or a folder above it, is a file), where a "
                                 "folder is expected"),
    (["--out", "{dir}", "--steps", "0"], "argument --steps: '0' is not a positive whole number"),
    (["--out", "{dir}", "--warmup", "-1"], "argument --warmup: '-1' is not a whole number"),
    (["--out", "{dir}", "--budget-s", "0"], "argument --budget-s: '0' is not a number > 0"),
    (["--out", "{dir}", "--peak-tflops", "abc"], "argument --peak-tflops: 'abc' is not a number > 0"),
])
def test_a_bad_argument_is_one_usage_line_before_any_work(bad, line, tmp_path, capsys):
    """argparse's one line and exit 2, nothing written (--out on a file was a FileExistsError's traceback)."""
    from gpu_check.driver import main

    (tmp_path / "a_file").write_text("mine")
    names = {"file": tmp_path / "a_file", "dir": tmp_path / "out"}
    with pytest.raises(SystemExit) as exited:
        main([a.format(**names) for a in bad] + ["--dry-run"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "python bench/gpu_check: error: " + line.format(**names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"] and (tmp_path / "a_file").read_text() == "mine"


PEAK = 2.0  # TFLOP/s given to the dry run, so that it computes MFU
VARIANTS = ("deberta_rel",)  # more FLOPs than RoBERTa (bert_a, the reference, comes with every timing group)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dry")
    p = cli("bench/gpu_check", "--out", str(out), "--dry-run", "--variants", *VARIANTS, "--peak-tflops", str(PEAK),
            timeout=3000)
    with open(out / "gpu_check.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return p, (out / "report.md").read_text(encoding="utf-8"), rows


def values(rows, section: str, **match) -> dict:
    return {r["metric"]: r["value"] for r in rows if r["section"] == section
            and all(r[k] == v for k, v in match.items())}


def numbers(rows, section: str, **match) -> dict:
    """The numeric values of ``values``."""
    found = {}
    for metric, value in values(rows, section, **match).items():
        try:
            found[metric] = float(value)
        except ValueError:
            pass
    return found


def test_dry_run_passes_every_section_and_reports_each(dry_run):
    p, report, rows = dry_run
    assert p.returncode == 0, report
    assert NAMES == ("environment", "cuda_tests", "sdpa", "attention", "verdict", "train", "throughput", "sync",
                     "timing")
    for name in NAMES:
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


def test_dry_run_attention_times_every_path_and_checks_triton_against_float64(dry_run):
    _, report, rows = dry_run
    assert "Triton runs here: True" in report  # the dry run's child runs Triton's interpreter
    dry = settings(dry_run=True)
    for length in dry.attention_lengths:
        for dropout in ("0", "0.1"):
            base = numbers(rows, "attention", subject="sdpa", setting=f"T={length} dropout={dropout} bias=none")
            assert base["ratio_to_sdpa_no_bias"] == 1.0
            for bias in ("none", "fixed", "learned", "per_sequence"):
                setting = f"T={length} dropout={dropout} bias={bias}"
                for path in ("sdpa", "explicit", "triton"):
                    t = numbers(rows, "attention", subject=path, setting=setting)
                    assert t["ms"] > 0 and t["ratio_to_sdpa_no_bias"] == pytest.approx(t["ms"] / base["ms"])
                flex = values(rows, "attention", subject="flex", setting=setting)
                if dropout == "0":  # off CUDA FlexAttention has no backward for q, k, v: a row that says so
                    assert "ms" not in flex and "no FlexAttention backward" in flex["note"]
                else:  # no dropout in FlexAttention: no row at all
                    assert flex == {}
            assert values(rows, "attention", subject="sdpa", setting=f"T={length} dropout={dropout} bias=none")[
                "sdpa_backend"] in ("math", "flash (CPU)")
        errors = {path: numbers(rows, "attention", subject=path, setting=f"T={length} errors")
                  for path in ("triton", "explicit")}
        assert values(rows, "attention", subject="triton", setting=f"T={length} errors")["ok"] == "True"
        for column in ERROR_COLUMNS:  # fp32 in the interpreter: both at fp32 rounding of float64
            assert 0 < errors["triton"][f"{column}_rel_error"] < 1e-5
            assert 0 < errors["explicit"][f"{column}_rel_error"] < 1e-5


def test_quick_check_runs_its_five_sections_on_trainings_batches(tmp_path):
    """--quick (make gpu-check QUICK=1): environment, attention, verdict, throughput and timing only; the attention
    table at one length with training's padding in every bias layout (and the unpadded SDPA baseline its ratios
    divide by), no FlexAttention; the verdict of TUPE-R's and DeBERTa's layers; pretrain.sh's wps of RoBERTa and
    TUPE-R; the step ratios of the quick variants and of TUPE-R at twice the length."""
    p = cli("bench/gpu_check", "--out", str(tmp_path), "--dry-run", "--quick", timeout=1200)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert p.returncode == 0, report
    assert report.startswith("# GPU check (quick) (dry run on CPU)")
    for name in NAMES:
        assert (f"| {name} | ok |" in report) == (name in QUICK_SECTIONS), name
    with open(tmp_path / "gpu_check.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    quick = settings(dry_run=True, quick=True)
    T = quick.attention_lengths[0]
    timed = {(r["subject"], r["setting"]) for r in rows if r["section"] == "attention" and r["metric"] == "ms"}
    for dropout in ("0", "0.1"):
        assert ("sdpa", f"T={T} dropout={dropout} bias=none") in timed  # the baseline
        for bias in ("none", "fixed", "learned", "permuted", "offset", "per_sequence"):
            for path in ("sdpa", "explicit", "triton"):
                assert (path, f"T={T} dropout={dropout} bias={bias} padded") in timed, (path, bias, dropout)
    assert not any(path == "flex" or ("padded" not in setting and path != "sdpa") for path, setting in timed)
    archs = {r["subject"] for r in rows if r["section"] == "throughput" and r["metric"] == "wps"}
    assert archs == {"roberta_base", "tupe_r_tiny"}
    timing = {(r["subject"], r["setting"]) for r in rows if r["section"] == "timing" and r["metric"] == "time_ratio"}
    length = quick.timing[0].length
    assert {v for v, setting in timing if setting == f"T={length} mlm"} == set(QUICK_VARIANTS)
    assert {v for v, setting in timing if setting == f"T={2 * length} mlm"} == {"bert_a", "tupe_r"}
    import kernel_sass
    import triton

    assert values(rows, "environment")["triton"] == triton.__version__
    # compiled in a subprocess, as the verdict does (this process may run Triton's interpreter); Triton's cache: fast
    shape = [str(kernel_sass.BASE[k]) for k in "BHTD"]
    estimate = {r.bias: r for r in kernel_sass.csv_rows(kernel_sass.start_csv(
        ["--shape", *shape, "--bias", "shared", "per_sequence", "--padding", "1", "--dropout", "0.1"]))
        if r.kernel == "layer"}
    for name, kind in (("TUPE-R", "shared"), ("DeBERTa", "per_sequence")):  # measured in Triton's interpreter here
        found = numbers(rows, "verdict", subject=name)
        assert found["triton_ms"] > 0 and found["target_ms"] == kernel_sass.TARGET_LAYER_MS
        assert found["realistic_ms"] == estimate[kind].realistic_ms and found["floor_ms"] == estimate[kind].floor_ms
        assert values(rows, "verdict", subject=name)["tiles"].startswith("untuned: forward ")  # tuned on CUDA only
    assert values(rows, "verdict", subject="triton") == {"version": triton.__version__, "self_check": "passed"}
    assert values(rows, "verdict", subject="baseline")["sdpa_backend"] in ("math", "flash (CPU)")
    assert "## verdict" in report and "| TUPE-R (learned bias) | " in report


def test_dry_run_throughput_reads_fairseqs_wps_from_pretrain_sh(dry_run):
    _, report, rows = dry_run
    dry = settings(dry_run=True)
    # the GPU's three rows rehearsed: fairseq's roberta (at the tiny sizes), our bert_a and tupe_r
    assert [a.split("_")[0] for a in dry.throughput_archs] == ["roberta", "bert", "tupe"]
    per_token = {a: float(values(rows, "throughput", subject=a)["flops_per_token"]) for a in dry.throughput_archs}
    assert per_token["roberta_base"] < per_token["tupe_r_tiny"]  # TUPE's positional projections on top
    for arch in dry.throughput_archs:
        found = values(rows, "throughput", subject=arch)
        intervals = [float(w) for w in found["wps_intervals"].split()]
        assert len(intervals) == dry.throughput_updates // dry.throughput_log_interval
        wps, per_token = float(found["wps"]), float(found["flops_per_token"])
        assert wps == pytest.approx(statistics.median(intervals[1:]))  # the first interval (start-up) left out
        assert float(found["mfu"]) == pytest.approx(per_token * wps / (PEAK * 1e12))
        assert per_token > 6 * 2 * 64 * 64  # at least the tiny encoder's 2 layers' dense matrix products
        assert int(found["update_freq"]) == dry.throughput_sentences // dry.throughput_batch
        assert found["bf16"] == found["tpu"] == "False"  # the dry run trains in fp32 (bf16 needs CUDA)


def test_dry_run_sync_counts_every_step(dry_run):
    _, _, rows = dry_run
    dry = settings(dry_run=True)
    for family, objective in SYNC_STEPS:
        found = values(rows, "sync", subject=family, setting=f"{objective} T={dry.sync_length}")
        sites = [site.rsplit(" x", 1) for site in found["sites"].split(" | ")]
        assert int(found["syncs"]) == sum(int(n) for _, n in sites) >= 1
        assert found["counted_by"] == "sync-forcing ops recorded on CPU"  # bench/sync_count.py without CUDA
        # the plugin's blocks take `auto`'s path: explicit on CPU in training with attention dropout
        assert found["attention_path"] == ("fairseq's" if family == "roberta" else "explicit")


def test_dry_run_timing_ratios_follow_from_the_measurements(dry_run):
    _, _, rows = dry_run
    for launcher in ("cli", "hydra"):  # fairseq-train and fairseq-hydra-train (bf16's way on a GPU)
        train = values(rows, "train", setting=f"fp32 {launcher}")
        assert train["loss_falls"] == "True" and float(train["last_loss"]) < float(train["first_loss"])
        assert train["overflow_skips"] == "0"
    dry = settings(dry_run=True)
    assert {g.length for g in dry.timing} == {32, 64}  # T=512, 1024 (and 128) on the GPU
    for group in dry.timing:
        setting = f"T={group.length} {group.objective}"
        bert_a = numbers(rows, "timing", subject="bert_a", setting=setting)
        assert bert_a["ratio_to_bert_a"] == pytest.approx(1.0)
        for variant in ["bert_a"] + [v for v in VARIANTS if group.variants is None or v in group.variants]:
            t = numbers(rows, "timing", subject=variant, setting=setting)
            assert values(rows, "timing", subject=variant, setting=setting)["attention_path"] == "explicit"
            tokens = t["batch"] * group.length
            assert t["variant_tokens_per_s"] == pytest.approx(tokens / (t["variant_ms"] / 1e3))
            assert t["variant_mfu"] == pytest.approx(t["variant_flops"] / (t["variant_ms"] / 1e3) / (PEAK * 1e12))
            assert t["time_ratio"] == pytest.approx(t["variant_ms"] / t["roberta_ms"])
            assert t["ratio_to_bert_a"] == pytest.approx(t["time_ratio"] / bert_a["time_ratio"])
            assert t["variant_flops"] >= t["roberta_flops"] > 0 and t["variant_peak_mib"] > 0
            if variant == "deberta_rel":  # its own attention block: more matrix work
                assert t["variant_flops"] > t["roberta_flops"]
            if group.objective == "electra":  # generator + discriminator: more work than the MLM step
                mlm = numbers(rows, "timing", subject=variant, setting=f"T={group.length} mlm")
                assert t["electra_to_mlm"] == pytest.approx(t["time_ratio"] / mlm["time_ratio"])
                assert t["variant_flops"] > mlm["variant_flops"]
            else:
                assert "electra_to_mlm" not in t


def test_a_failing_section_is_in_the_report_and_the_exit_status(tmp_path):
    p = cli("bench/gpu_check", "--out", str(tmp_path), "--dry-run", "--sections", "timing", "--variants", "nosuch")
    assert p.returncode == 1
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| timing | failed |" in report and "unknown ['nosuch']" in report
    assert (tmp_path / "gpu_check.csv").is_file()


def test_the_quick_check_fits_its_budget_with_the_verdict():
    """The quick sections' estimated seconds on an H100 (``Section.quick_s``, docs/gpu.md) and the driver's reserve
    per section's process fit --quick's 240 s; the verdict runs before throughput and timing, which the budget cuts
    first (timing takes what is left)."""
    assert QUICK_SECTIONS == ("environment", "attention", "verdict", "throughput", "timing")
    assert all(BY_NAME[name].quick_s > 0 for name in QUICK_SECTIONS)
    assert quick_estimate_s() == sum(BY_NAME[n].quick_s for n in QUICK_SECTIONS) + len(QUICK_SECTIONS) * SECTION_RESERVE_S
    assert quick_estimate_s() <= QUICK_BUDGET_S == 240
    before_verdict = sum(BY_NAME[n].quick_s + SECTION_RESERVE_S for n in QUICK_SECTIONS[:QUICK_SECTIONS.index("verdict")])
    assert before_verdict + BY_NAME["verdict"].limit_s <= QUICK_BUDGET_S  # its whole limit, even at the estimates


# --- the parts the report is made of -------------------------------------------------------------------------------


def _findings(**changed):
    from gpu_check.verdict import Estimate, Findings

    found = Findings(device="cuda:0", dtype="bfloat16", shape="B32 H12 T512 D64", triton="3.6.0", self_check=None,
                     baseline_ms=0.5, baseline_backend="flash", backends_alone={"CUDNN_ATTENTION": "no (x)",
                                                                                "FLASH_ATTENTION": "runs"},
                     layer_ms={"TUPE-R": 0.8, "DeBERTa": 0.7}, sdpa_ms={"TUPE-R": 1.9, "DeBERTa": 2.0},
                     tiles={"TUPE-R": "tuned: forward 64x64 w4", "DeBERTa": "tuned: forward 128x64 w8"},
                     estimates={"TUPE-R": Estimate(0.4, 0.872), "DeBERTa": Estimate(0.5, 1.09)},
                     estimate_shape="B32 H12 T512 D64")
    for k, v in changed.items():
        setattr(found, k, v)
    return found


def test_the_verdict_judges_each_layer_against_the_target_and_the_estimate():
    """Measured numbers injected into the verdict's report: TUPE-R 0.8 ms misses 0.74 and the estimate 0.872 holds
    it; DeBERTa 0.7 meets both; the recalibrated factor is SDPA's baseline over the no-bias floor the estimate's
    factor implies (0.566 / 2.18 = 0.2596 ms)."""
    from gpu_check.verdict import lines
    from kernel_sass import SDPA_LAYER_MS

    said, records, failures = lines(_findings())
    text = "\n".join(said)
    assert "| TUPE-R (learned bias) | 0.800 | misses (+0.060 ms, +8%) | 0.872 | meets (-0.072 ms, -8%) | 0.400 | 2.00 | " \
           "1.900 | tuned: forward 64x64 w4 |" in text
    assert "| DeBERTa (per_sequence bias) | 0.700 | meets (-0.040 ms, -5%) | 1.090 | meets (-0.390 ms, -36%) | 0.500 | " \
           "1.40 |" in text
    factor = 0.872 / 0.4
    assert f"this card's factor is {0.5 / (SDPA_LAYER_MS / factor):.2f}" in text
    assert "0.500 ms on **flash**" in text and "CUDNN_ATTENTION: no (x), FLASH_ATTENTION: runs" in text
    assert "Triton 3.6.0; the kernel's first-use check of both configurations (dropout on, this shape) on cuda:0 in bfloat16: **passed**." in text
    by = {(subject, metric): value for subject, _, metrics in records for metric, value in metrics.items()}
    assert by[("TUPE-R", "meets_target")] is False and by[("DeBERTa", "meets_target")] is True
    assert by[("recalibration", "recalibrated_factor")] == pytest.approx(0.5 * factor / SDPA_LAYER_MS)
    assert by[("baseline", "alone_flash_attention")] == "runs" and failures == []


def test_the_verdict_fails_on_a_failed_self_check_a_missing_time_or_estimate():
    from gpu_check.verdict import lines

    said, _, failures = lines(_findings(self_check="its dq differs by 0.5", layer_ms={"TUPE-R": None, "DeBERTa": 0.7},
                                        estimates={}, estimate_error="RuntimeError: no ptxas"))
    text = "\n".join(said)
    assert "**failed**: its dq differs by 0.5" in text and "(RuntimeError: no ptxas)" in text
    assert "| TUPE-R (learned bias) | n/a | n/a | n/a | n/a | n/a | n/a |" in text and "Recalibration" not in text
    assert failures == ["TUPE-R: the Triton path gave no time", "the Triton self-check failed: its dq differs by 0.5",
                        "no realistic estimate: RuntimeError: no ptxas"]


def test_pytest_summary_and_fairseq_log_are_read():
    assert pytest_counts("...\n3 passed, 1 skipped, 9 deselected in 2.1s\n") == {
        "passed": 3, "skipped": 1, "deselected": 9}
    log = ("epoch 001:      5 / 40 loss=9.012, nll_loss=9.0, loss_scale=128, wps=1\n"
           "fairseq.optim.fp16_optimizer | NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0\n"
           "epoch 001:     10 / 40 loss=7.5, loss_scale=64, wps=1\n")
    facts = train_log_facts(log.replace("epoch 001:", "train_inner | epoch 001:"))
    assert facts == {"losses": [9.012, 7.5], "overflows": 1, "loss_scale": "64"}


def test_bf16_never_goes_through_fairseq_train_whose_command_line_makes_it_tpu():
    from fairseq import options

    argv = ["data", "--task", "masked_lm", "--arch", "tupe_r_tiny", "--bf16", "--user-dir", str(ROOT / "tupe_plugin")]
    assert options.parse_args_and_arch(options.get_training_parser(), argv).tpu  # fairseq 0.12: --bf16 => --tpu
    gpu = settings(dry_run=False)
    assert ("bf16", "hydra") in gpu.train_runs and ("fp16", "cli") in gpu.train_runs
    command = train_command(gpu, "bf16", "hydra", Path("bin"), Path("run"))
    assert "common.bf16=true" in command and "common.fp16=false" in command and "common.cpu=false" in command
    with pytest.raises(ValueError, match="--tpu"):
        train_command(gpu, "bf16", "cli", Path("bin"), Path("run"))


def test_peak_rate_by_card_name():
    assert peak_tflops("NVIDIA H100 80GB HBM3", None) == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", None) == 756.0
    assert peak_tflops("NVIDIA H200", None) == 989.4
    assert peak_tflops("Some GPU", None) is None and peak_tflops("Some GPU", 100.0) == 100.0


def test_throughput_runs_pretrain_sh_in_bf16_with_the_recipes_batch_on_one_gpu(tmp_path):
    """The GPU's throughput run: pretrain.sh's own command line (DRY_RUN=1 prints it), bf16 through BF16=1, which
    runs tupe_pretrain/fairseq_train.py: fairseq's parser, without the --tpu it sets for --bf16."""
    from tupe_pretrain.fairseq_train import config_keeping_bf16

    gpu = settings(dry_run=False)
    data = tmp_path / "data"
    data.mkdir()
    write_token_data(data, 500, 4000, 20, 60)
    cmd, env = pretrain_command(gpu, "tupe_r_base", data, tmp_path / "save")
    env = dict(os.environ, **env, DRY_RUN="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    printed = p.stderr.split("command:\n", 1)[1].splitlines()[0]
    argv = shlex.split(printed)
    assert argv[:3] == [sys.executable, "-m", "tupe_pretrain.fairseq_train"]  # LAUNCHER none: one process
    cfg = config_keeping_bf16(argv[3:])
    assert cfg.common.bf16 and not cfg.common.tpu and not cfg.common.fp16 and not cfg.common.cpu
    assert (cfg.dataset.batch_size, cfg.optimization.update_freq, cfg.task.tokens_per_sample) == (16, [16], 512)
    assert cfg.model.arch == "tupe_r_base" and cfg.optimization.max_update == gpu.throughput_updates
    assert cfg.checkpoint.no_save and cfg.dataset.disable_validation and cfg.common.log_interval == 4
    from fairseq import options  # fairseq's own parsing of the same line sets tpu: why the check needs its own
    assert options.parse_args_and_arch(options.get_training_parser(), argv[3:]).tpu


def test_throughput_log_and_written_data_are_fairseqs():
    log = ("2026-11-26 | INFO | train_inner | epoch 001:      4 / 17 loss=14.2, wps=301234.5, ups=2.1, wpb=131000\n"
           "2026-11-26 | INFO | train_inner | epoch 001:      8 / 17 loss=13.9, wps=335000, ups=2.5, wpb=131000\n"
           "{'_name': None, 'common': {'cpu': False, 'tpu': False, 'bf16': True, 'fp16': False}}\n")
    facts = throughput_log_facts(log)
    assert facts == {"wps": [301234.5, 335000.0], "bf16": True, "fp16": False, "tpu": False, "cpu": False}
    roberta = pretrain_command(settings(dry_run=True), "roberta_base", Path("d"), Path("s"))[0]
    assert "--encoder-layers=2" in roberta and "--encoder-embed-dim=64" in roberta  # fairseq has no roberta_tiny


def test_data_written_for_throughput_is_read_by_fairseq(tmp_path):
    from fairseq.data import Dictionary, data_utils

    write_token_data(tmp_path, 300, 5000, 20, 60)
    d = Dictionary.load(str(tmp_path / "dict.txt"))
    assert len(d) == 300 + d.nspecial
    train = data_utils.load_indexed_dataset(str(tmp_path / "train"), d)
    lines = [train[i] for i in range(len(train))]
    assert all(21 <= len(x) <= 61 and x[-1] == d.eos() and (x[:-1] >= d.nspecial).all() for x in lines)
    assert 0.9 * 5000 < sum(len(x) for x in lines) < 1.1 * 5000 + 61
    counts = torch.bincount(torch.cat(lines), minlength=len(d))
    assert counts[d.nspecial] > counts[d.nspecial + 100]  # Zipf: the first word far more frequent
