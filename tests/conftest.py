"""Session fixtures: a sentencepiece model, fairseq binaries, and one tiny pre-trained TUPE-R."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import pytest

# One thread per process, the tests' and every process they start: make test runs a worker per core, and
# torch's default (a thread per core) in each oversubscribes them; OpenMP's waiting then made two concurrent tiny
# fairseq-train runs take 84 s instead of 11 s on this machine. A setting of the caller's is kept.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT))  # preprocess/ and glue/ are not installed: they run from the repository
BIN = Path(sys.executable).parent

from corpus import labelled, lm_lines  # noqa: E402
from warm_python import WarmPython  # noqa: E402


def setting_tables() -> Dict[str, list]:
    """Each script's settings tables (the classes of the variables it reads from the environment)."""
    from tupe_glue import finetune, grid
    from tupe_preprocess.c4 import pipeline
    from tupe_study.settings import StudyConfig
    from tupe_pretrain import pretrain

    return {"pretrain.sh": [pretrain.PretrainConfig], "finetune.sh": [finetune.FinetuneConfig],
            "grid.sh": [grid.GridConfig, finetune.FinetuneConfig], "c4": [pipeline.config_class()],
            "study.sh": [StudyConfig]}


def setting_names(script: str) -> List[str]:
    """The names of a script's settings (``setting_tables``)."""
    return [name for table in setting_tables()[script] for name in table.names()]


def drop_script_settings(environ: Dict[str, str]) -> List[str]:
    """Remove from ``environ`` every script setting in it; returns their names. The scripts read their settings
    from the environment, and the tests' processes inherit this one's: a setting exported in the caller's shell
    (a study's OUT, VARIANTS, ...) changed what the tests' scripts ran, and 55 tests failed. Each test sets the
    settings it means."""
    names = sorted({name for script in setting_tables() for name in setting_names(script)} & set(environ))
    for name in names:
        del environ[name]
    return names


DROPPED_SETTINGS = drop_script_settings(os.environ)


# ---- the `slow` marker: the tests that start a process -------------------------------------------------------
# A test or fixture that starts a process (a real fairseq CLI, a script, python -c) requests the fixture
# `starts_process` (which is `run`), in its signature or, for a module of such tests, with
# `pytestmark = pytest.mark.usefixtures("starts_process")`; a test that uses such a fixture (lm_bin, pretrained,
# ...) requests it through that fixture. Every test whose fixtures include it is marked `slow`, so
# `make test-fast` (pytest -m "not slow") leaves it out, however the process is started (a helper of its
# module or of another). Nothing is guessed: during every other test an audit hook turns any process start
# (subprocess, os.system, os.fork, os.exec*, posix_spawn) into an error that names the fixture
# (tests/test_slow_marker.py shows both).
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn",
                            "os.spawn"})
_unmarked_test: List[str] = []  # the node id of the running test when it is not `slow` (then no process may start)


def _refuse_processes_outside_slow_tests(event: str, _args) -> None:
    if _unmarked_test and event in PROCESS_EVENTS:
        raise RuntimeError(f"{_unmarked_test[0]} starts a process ({event}) but is not marked slow: request the "
                           "fixture `starts_process` in the test or in the fixture that starts it (tests/conftest.py)")


sys.addaudithook(_refuse_processes_outside_slow_tests)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts a process (requests the fixture starts_process); "
                                       "make test-fast skips it")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "starts_process" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    # Modules with the most process-starting tests first (stable: otherwise file order). Under pytest-xdist's
    # `--dist loadfile --no-loadscope-reorder` (make test) a free worker takes the next module in this order, so the
    # long modules start early and the run does not end with one worker on a long module and the other idle:
    # longest-first scheduling, with the count of `slow` tests standing in for a module's time (measured here: a
    # 2-worker run simulated from its own durations ends 23 s sooner than with xdist's default order by test count,
    # within 2 s of ordering by the measured times themselves).
    module = lambda item: item.nodeid.split("::")[0]  # noqa: E731
    slow_tests: Dict[str, int] = {}
    for item in items:
        slow_tests[module(item)] = slow_tests.get(module(item), 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow_tests[module(item)])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("slow") is None:
        _unmarked_test.append(item.nodeid)
    try:
        yield
    finally:
        _unmarked_test.clear()


@pytest.fixture(scope="session")
def starts_process():
    """``run``, for a test or fixture that starts a process: requesting it marks the tests that use it `slow`."""
    return run


def without_prefetch(argv: List[str], hydra: bool = False) -> List[str]:
    """fairseq-train's ``argv`` with no prefetch thread unless it sets one: the thread, left running by
    --max-update/--max-valid-steps mid-epoch, can abort the exit (status 134/-6) after a finished run; the
    project's scripts pass 0 too (tupe_pretrain/pretrain.py)."""
    if any("data-buffer-size" in str(a) or "data_buffer_size" in str(a) for a in argv):
        return argv
    return [*argv, "dataset.data_buffer_size=0" if hydra else "--data-buffer-size=0"]


# fairseq's CLIs and Python scripts started by ``run`` are forked from a warm interpreter that has imported torch
# and fairseq (tests/warm_python.py: ~0.1 s instead of ~7 s of CPU per start); TESTS_FRESH_PROCESSES=1 starts each
# in a fresh interpreter, as ``run(..., fresh=True)`` does for one command.
WARM = os.environ.get("TESTS_FRESH_PROCESSES", "") in ("", "0")


def run(cmd: List[str], cwd: Path = ROOT, check: bool = True, timeout: int = 600,
        env: Optional[Dict[str, str]] = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run a real CLI (fairseq-train, ...) from the venv; output captured as text. ``env``: the environment
    (default: this process's). ``fresh``: in a new interpreter even where the warm one could run it (a test of what
    happens at a process's start: import-time output, what it imports)."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    cmd = [str(c) for c in cmd]
    if cmd[0] in ("fairseq-train", "fairseq-hydra-train"):
        cmd = [cmd[0], *without_prefetch(cmd[1:], hydra=cmd[0] == "fairseq-hydra-train")]
    if os.sep not in cmd[0]:  # the file the name runs: the venv's first (fairseq-*, python: this interpreter)
        cmd[0] = shutil.which(cmd[0], path=env["PATH"]) or cmd[0]
    if WARM and not fresh and WarmPython.can_run(cmd, env):
        p = WarmPython.get().completed(cmd, cwd, env, timeout)
    else:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


def call_in_process(call: Callable[[], int], argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
    """``call()`` (the function a command's process would run) in this process, its stdout and stderr captured: its
    status (or SystemExit's) and output as a finished process's for ``argv``; ``check`` as in ``run``."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = call()
        except SystemExit as e:  # argparse's usage error
            code = e.code if isinstance(e.code, int) else 1
    p = subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({code}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


def command_in_process(argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
    """``argv`` (a ``tupe-*`` console script, by path or name, and its arguments) through the function that script
    calls (``tupe_tools.commands.dispatch``) in this process, which has torch and fairseq already: a process
    start (~7 s of CPU) fewer than ``run``. Its exit status and output as a finished process's; ``check`` as in
    ``run``. test_cli_errors runs every console script itself (``--help``)."""
    from tupe_tools.commands import dispatch

    return call_in_process(lambda: dispatch(Path(argv[0]).name, [str(a) for a in argv[1:]]), argv, check)


def fairseq_train_in_one_process(commands: Dict[str, List[str]], folder: Path, failing: Sequence[str] = (),
                                 env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """fairseq-train's own entry point once per command line (its arguments after ``fairseq-train``), all in one
    process (tests/fairseq_runs.py: one import of torch and fairseq), in the order given: each run's log by its
    name. A run fails the caller with its log unless it is named in ``failing``, which must fail (exit status not 0;
    its traceback ends its log): put those last, after the runs whose results are read. ``env``: as in ``run``."""
    runs = [{"argv": without_prefetch([*argv, *([] if "--save-dir" in argv else ["--save-dir", str(folder / name)])]),
             "log": str(folder / f"{name}.log")} for name, argv in commands.items()]
    (folder / "runs.json").write_text(json.dumps(runs))
    run([sys.executable, str(ROOT / "tests" / "fairseq_runs.py"), str(folder / "runs.json")], env=env)
    logs = {}
    for name, r in zip(commands, runs):
        log = Path(r["log"]).read_text()
        status = Path(r["log"] + ".status").read_text().strip()
        assert (status != "0") == (name in failing), f"{name} ended with status {status}:\n{log[-3000:]}"
        logs[name] = log
    return logs


def train_losses(log: str) -> List[float]:
    return [float(x) for x in re.findall(r"train_inner\W.*?loss=([0-9.]+)", log)]


def best_per_subset(log_path: str, metric: str) -> Dict[str, float]:
    """The maximum of ``metric`` per valid subset of a fairseq log, each subset on its own."""
    from tupe_glue.collect import parse_validations

    best: Dict[str, float] = {}
    for v in parse_validations(log_path, metric):
        best[v.subset] = max(best.get(v.subset, -math.inf), v.value)
    return best


def write_lines(path: Path, lines: List[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name``, written by ``build`` once for the whole test run: under pytest-xdist every worker asks
    for it, the first builds it under a file lock and the others wait, then read the same files (the session
    fixtures below are inputs that no test changes)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's folder, shared by its workers
    d = base / f"once-{name}"
    with FileLock(str(d) + ".lock"):
        if not (d / ".built").exists():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            build(d)
            (d / ".built").touch()
    return d


@pytest.fixture(scope="session")
def spm_dir(tmp_path_factory) -> Path:
    def build(d: Path) -> None:
        import sentencepiece as spm

        from tupe_preprocess.spm_dict import load_spm, write_fairseq_dict

        snli = [json.loads(line) for line in (ROOT / "tests/data/snli_sample.jsonl").open(encoding="utf-8")]
        snli_text = [r[k] for r in snli for k in ("sentence1", "sentence2")]
        text = write_lines(d / "corpus.txt", lm_lines(800, seed=0) + snli_text)
        spm.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(d / "spm"), vocab_size=300, model_type="unigram", hard_vocab_limit=False,
            character_coverage=1.0, minloglevel=2,
        )
        write_fairseq_dict(load_spm(str(d / "spm.model")), str(d / "dict.txt"))

    return once_per_run(tmp_path_factory, "spm", build)


def encode_pieces(spm_dir: Path, lines: List[str]) -> List[str]:
    from tupe_preprocess.spm_dict import load_spm

    sp = load_spm(str(spm_dir / "spm.model"))
    return [" ".join(sp.encode(line, out_type=str)) for line in lines]


@pytest.fixture(scope="session")
def lm_bin(spm_dir, tmp_path_factory, starts_process) -> Path:
    """masked_lm binaries made by the real fairseq-preprocess with the sentencepiece dict."""
    def build(d: Path) -> None:
        write_lines(d / "train.txt", encode_pieces(spm_dir, lm_lines(600, seed=1)))
        write_lines(d / "valid.txt", encode_pieces(spm_dir, lm_lines(60, seed=2)))
        run(["fairseq-preprocess", "--only-source", "--srcdict", str(spm_dir / "dict.txt"),
             "--trainpref", str(d / "train.txt"), "--validpref", str(d / "valid.txt"),
             "--destdir", str(d / "bin"), "--workers", "1"])

    return once_per_run(tmp_path_factory, "lm", build) / "bin"


@pytest.fixture(scope="session")
def cls_bin(spm_dir, tmp_path_factory, starts_process) -> Path:
    """sentence_prediction binaries: input0/ (text) and label/ (classes), as fairseq's GLUE layout."""
    def build(d: Path) -> None:
        splits = {"train": labelled(320, seed=3), "valid": labelled(80, seed=4)}
        for split, items in splits.items():
            write_lines(d / f"{split}.input0", encode_pieces(spm_dir, [s for s, _ in items]))
            write_lines(d / f"{split}.label", [str(y) for _, y in items])
        run(["fairseq-preprocess", "--only-source", "--srcdict", str(spm_dir / "dict.txt"),
             "--trainpref", str(d / "train.input0"), "--validpref", str(d / "valid.input0"),
             "--destdir", str(d / "bin" / "input0"), "--workers", "1"])
        run(["fairseq-preprocess", "--only-source",
             "--trainpref", str(d / "train.label"), "--validpref", str(d / "valid.label"),
             "--destdir", str(d / "bin" / "label"), "--workers", "1"])

    return once_per_run(tmp_path_factory, "cls", build) / "bin"


PRETRAIN_ARGS = [
    "--user-dir", "tupe_plugin", "--task", "masked_lm", "--criterion", "masked_lm",
    "--tokens-per-sample", "64", "--sample-break-mode", "complete", "--batch-size", "16",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "2e-3",
    "--lr-scheduler", "polynomial_decay", "--warmup-updates", "5", "--total-num-update", "200",
    "--cpu", "--log-format", "simple", "--log-interval", "5", "--seed", "1",
    "--no-epoch-checkpoints", "--num-workers", "0",
]


@pytest.fixture(scope="session")
def pretrained(lm_bin, tmp_path_factory, starts_process) -> Path:
    """A tiny TUPE-R pre-trained for 30 updates; returns its save dir (checkpoint_last.pt)."""
    def build(save: Path) -> None:
        run(["fairseq-train", str(lm_bin), *PRETRAIN_ARGS, "--arch", "tupe_roberta_tiny",
             "--max-update", "30", "--save-dir", str(save)])

    return once_per_run(tmp_path_factory, "pretrain", build)


def console_scripts() -> List[str]:
    """setup.py's console scripts, ``name=module:function``, read from its source (the list is a literal there)."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "CONSOLE_SCRIPTS")
