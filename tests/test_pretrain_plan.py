"""train_scripts/pretrain.py in process: the precision settings (BF16, FP16) and the command they give."""
from __future__ import annotations

import os
import sys

import pytest

from conftest import BIN
from train_scripts import pretrain
from tupe_common.errors import UsageError


def settings(**values: str) -> pretrain.PretrainConfig:
    return pretrain.PretrainConfig(**{"DATA": "/data", "SIZE": "tiny", **values})


@pytest.fixture(autouse=True)
def venv_on_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # where fairseq-train is found


def test_bf16_on_a_gpu_replaces_fp16_and_runs_the_parse_that_keeps_it_bf16():
    run = pretrain.plan(settings(BF16="1", GPUS="1"), environ={})
    args = pretrain.fairseq_args(run)
    assert "--bf16" in args and "--fp16" not in args and "--cpu" not in args
    assert pretrain.command(run)[:3] == [sys.executable, "-m", "train_scripts.fairseq_train"]
    default = pretrain.plan(settings(GPUS="1"), environ={})  # the GPU default: fp16, fairseq-train itself
    assert "--fp16" in pretrain.fairseq_args(default) and "--bf16" not in pretrain.fairseq_args(default)
    assert pretrain.command(default)[0] == str(BIN / "fairseq-train")


def test_the_command_is_found_on_the_path_of_the_environment_it_will_run_in(tmp_path):
    """fairseq-train and torchrun are looked up on the PATH of ``environ`` (where the command will run), and srun's
    --cpus-per-task comes from it, not from this process's environment."""
    for name in ("fairseq-train", "torchrun"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    here = {"PATH": str(tmp_path)}
    assert pretrain.command(pretrain.plan(settings(GPUS="1"), environ=here))[0] == str(tmp_path / "fairseq-train")
    assert pretrain.command(pretrain.plan(settings(GPUS="2"), environ=here))[0] == str(tmp_path / "torchrun")
    srun = pretrain.command(pretrain.plan(settings(GPUS="2", LAUNCHER="srun"), environ={**here, "SLURM_CPUS_PER_TASK": "6"}))
    assert srun[0] == "srun" and srun[srun.index("--cpus-per-task") + 1] == "6"


def test_bf16_reaches_every_rank_through_the_launcher():
    run = pretrain.plan(settings(BF16="1", GPUS="2"), environ={})
    assert run.launcher == "torchrun" and "--bf16" in pretrain.command(run)
    assert pretrain.launch_environment(run)["FAIRSEQ_TRAIN"] == f"{sys.executable} -m train_scripts.fairseq_train"
    # fairseq logs to stdout: unbuffered, so a killed run keeps the lines of the checkpoints it saved
    assert pretrain.launch_environment(run)["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize("values, message", [
    ({"BF16": "1", "FP16": "1", "GPUS": "1"}, "FP16=1 and BF16=1: choose one"),
    ({"BF16": "yes"}, "BF16 must be 0 or 1, not 'yes'"),
])
def test_contradictory_precisions_are_refused(values, message):
    with pytest.raises(UsageError, match=message):
        pretrain.plan(settings(**values), environ={})


def test_gpu_settings_this_machine_cannot_run_are_one_line_before_any_work():
    with pytest.raises(UsageError, match=r"^GPUS=2 but this machine sees 0 CUDA device\(s\): set GPUS=auto"):
        pretrain.check_devices(pretrain.plan(settings(GPUS="2"), environ={}), visible=0)
    pretrain.check_devices(pretrain.plan(settings(GPUS="2"), environ={}), visible=2)  # a node with the GPUs
    with pytest.raises(UsageError, match=r"^FP16=1 needs a GPU, but this run is on CPU \(GPUS=0\)"):
        pretrain.check_devices(pretrain.plan(settings(GPUS="0", FP16="1"), environ={}), visible=0)
    with pytest.raises(UsageError, match=r"^BF16=1 needs a GPU"):
        pretrain.check_devices(pretrain.plan(settings(GPUS="0", BF16="1"), environ={}), visible=0)
