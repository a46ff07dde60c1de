"""What ``pip install .`` puts on the path: only this project's names (no site-wide ``glue``/``preprocess``), a
console script per job, and the data the pipelines read (hydra configs, study presets); the old
``python -m preprocess.X`` / ``glue.X`` / ``study`` paths still run from the repository root as shims. The last test
installs the package, not editable, into a fresh virtual environment and drives the demo's pipeline with the
console scripts from a folder outside the repository."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run
from tupe_tools.commands import COMMANDS

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process


PACKAGES = ["tupe_common", "tupe_core", "tupe_glue", "tupe_plugin", "tupe_preprocess", "tupe_pretrain", "tupe_study",
            "tupe_tools"]


def test_only_project_names_are_importable_outside_the_repository(tmp_path):
    names = ("glue", "preprocess", "study", "train_scripts", "tupe_plugin_cli", *PACKAGES)
    code = f"import importlib.util as u\nprint([n for n in {names!r} if u.find_spec(n)])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == str(PACKAGES), p.stdout + p.stderr


def test_documented_module_commands_run_from_the_repository_root():
    """The old `python -m` paths (published READMEs cite them) are shims that run the package's module."""
    for module, usage in (("preprocess.glue_binarize", "glue_binarize [-h]"), ("preprocess.probing_sets", "usage: "),
                          ("glue.collect", "usage: "), ("study", "study.sh"), ("train_scripts.check_resume", "usage: ")):
        p = run([sys.executable, "-m", module, "--help"], cwd=ROOT)
        assert usage in p.stdout + p.stderr, module


def console_scripts() -> list:
    code = ("import distutils.core, json\n"
            "dist = distutils.core.run_setup('setup.py', stop_after='init')\n"
            "print(json.dumps(dist.entry_points['console_scripts']))")
    return json.loads(run([sys.executable, "-c", code], cwd=ROOT).stdout.strip().splitlines()[-1])


def test_every_console_script_answers_help():
    """setup.py's console scripts (read, not installed): the tupe_tools commands' table is among them, names are
    unique, and each one's function answers --help with its own usage and exit 0 (all in one process)."""
    scripts = console_scripts()
    names = [s.partition("=")[0] for s in scripts]
    assert len(set(names)) == len(names) and set(COMMANDS) <= set(names)
    assert {"tupe-c4", "tupe-pretrain", "tupe-finetune", "tupe-grid", "tupe-collect", "tupe-study", "tupe-where"} <= set(names)
    code = ("import importlib, json, sys\n"
            "codes = {}\n"
            "for script in json.loads(sys.argv[1]):\n"
            "    name, _, target = script.partition('=')\n"
            "    module, _, function = target.partition(':')\n"
            "    sys.argv = [name, '--help']\n"
            "    try:\n"
            "        codes[name] = getattr(importlib.import_module(module), function)()\n"
            "    except SystemExit as e:\n"
            "        codes[name] = e.code\n"
            "print(json.dumps(codes))\n")
    p = run([sys.executable, "-c", code, json.dumps(scripts)], cwd=ROOT)
    codes = json.loads(p.stdout.strip().splitlines()[-1])
    assert codes == {name: codes[name] for name in names} and all(c in (0, None) for c in codes.values()), codes
    assert "usage: tupe-where" in p.stdout and "tupe_preprocess.c4" in p.stdout


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory):
    """A new virtual environment with the package installed from a wheel (not editable). Its dependencies (torch,
    fairseq, ...) come from this environment's site-packages through a .pth file (a .pth there, such as the
    editable install's, is not read from it), and their commands are written into the new bin/ as pip writes them
    (fairseq-train, run by tupe-pretrain and tupe-finetune)."""
    import shutil
    import sysconfig

    d = tmp_path_factory.mktemp("venv")
    env_dir, wheels = d / "env", d / "wheels"
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(env_dir)])
    python = env_dir / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    build = d / "src"  # a copy: the build leaves build/ and *.egg-info behind
    shutil.copytree(ROOT, build, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "*.egg-info", "build",
                                                                "__pycache__", ".toolchains", "demo_out"))
    run([str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(build)])
    wheel = next(wheels.glob("tupe_plugin-*.whl"))
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheel)])
    for tool in ("fairseq-train",):
        text = Path(shutil.which(tool)).read_text().splitlines()
        (env_dir / "bin" / tool).write_text("\n".join([f"#!{python}", *text[1:]]) + "\n")
        (env_dir / "bin" / tool).chmod(0o755)
    return env_dir, wheel


def test_a_wheel_install_runs_the_pipeline_from_another_folder(fresh_install, tmp_path):
    """From a folder outside the repository, with no PYTHONPATH: tupe-where finds the installed plugin and the
    packaged configs and presets; tupe-c4 makes the shards from the C4 sample, tupe-pretrain trains 2 updates,
    tupe-glue-binarize, tupe-grid (one run) and tupe-collect give the table."""
    import importlib.util
    import zipfile

    env_dir, wheel = fresh_install
    names = zipfile.ZipFile(wheel).namelist()
    assert {"tupe_pretrain/config/pretrain/tupe_base.yaml", "tupe_study/presets/tiny.env",
            "tupe_tools/hf/remote/modeling_tupe.py", "tupe_pretrain/rank.py"} <= set(names)
    assert not [n for n in names if n.split("/")[0] in ("glue", "preprocess", "study", "train_scripts", "tests")]
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def tool(*args, check=True, **more):  # not conftest.run: it puts this environment's bin/ first on PATH
        p = subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=tmp_path, env={**env, **more}, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0 or not check, f"{args} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
        return p

    refused = tool("tupe-pretrain", check=False)  # a console script's messages start with its name
    assert refused.returncode == 2 and refused.stderr.startswith("tupe-pretrain: error: DATA is required"), refused
    usage = tool("tupe-glue-binarize", "--bogus", check=False)  # argparse's usage names the console script too
    assert usage.returncode == 2 and usage.stderr.strip().splitlines()[-1].startswith("tupe-glue-binarize: error:")
    site = tool("tupe-where").stdout.strip()
    assert site.startswith(str(env_dir)) and site.endswith("tupe_plugin")
    assert (Path(tool("tupe-where", "config-dir").stdout.strip()) / "pretrain" / "tupe_base.yaml").is_file()
    assert (Path(tool("tupe-where", "presets").stdout.strip()) / "tiny.env").is_file()
    tool("tupe-c4", "run", str(ROOT / "preprocess" / "samples" / "c4"), OUT_DIR="c4", VOCAB_SIZE="400", JOBS="1",
         TOKENS_PER_SAMPLE="64")
    assert (tmp_path / "c4" / "data-bin" / "layout.json").is_file()
    tool("tupe-pretrain", DATA="c4/data-bin", SAVE_DIR="pt", VARIANT="tupe-r", SIZE="tiny", GPUS="0",
         TOKENS_PER_SAMPLE="64", SENTENCES_PER_UPDATE="4", MAX_SENTENCES="4", TOTAL_UPDATES="2", WARMUP="1",
         SAVE_INTERVAL_UPDATES="2", NUM_WORKERS="0")
    log = (tmp_path / "pt" / "train.log").read_text() if (tmp_path / "pt" / "train.log").exists() else ""
    assert (tmp_path / "pt" / "checkpoint_last.pt").is_file(), log[-2000:]
    tool("tupe-glue-binarize", "--glue-dir", str(ROOT / "tests" / "data" / "glue"), "--tasks", "RTE",
         "--spm-model", "c4/spm/spm.model", "--dict", "c4/spm/dict.txt", "--out-dir", "glue-bin")
    tool("tupe-grid", CHECKPOINT="pt/checkpoint_last.pt", GLUE_BIN="glue-bin", RUNS="runs", TASKS="RTE", LRS="1e-3",
         SEEDS="1", EPOCHS="1", SENTENCES_PER_BATCH="8", NUM_WORKERS="0", VALID_PER_EPOCH="1")
    assert "cpu-small" in tool("tupe-study", "--help").stdout  # the presets, read from the installed package
    if importlib.util.find_spec("transformers") is not None:  # the 'hf' extra: the remote code, from the package
        tool("tupe-export-hf", "pt/checkpoint_last.pt", "hf", "--spm-model", "c4/spm/spm.model")
        from tupe_tools.hf.remote import CORE_IMPORT  # the one rewrite of the copy: tupe_core imports made relative

        shipped = zipfile.ZipFile(wheel).read("tupe_tools/hf/remote/modeling_tupe.py").decode()
        assert (tmp_path / "hf" / "modeling_tupe.py").read_text() == CORE_IMPORT.sub(r"from .\1 import ", shipped)
    table = (tmp_path / "runs" / "glue_results.csv").read_text()
    assert "RTE" in table
    command = (tmp_path / "runs" / "RTE" / "lr1e-3_seed1" / "command.txt").read_text()
    assert f"--user-dir {site}" in command, command
