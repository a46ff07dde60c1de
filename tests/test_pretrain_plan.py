"""tupe_pretrain/pretrain.py in process: the precision settings (BF16, FP16) and the command they give; VARIANT and
ARCH (agreeing, registered, recorded), END_LR at most LR."""
from __future__ import annotations

import os
import re
import sys

import pytest

from conftest import BIN
from tupe_pretrain import pretrain
from tupe_common.errors import UsageError
from tupe_preprocess.c4_data import DataError


def settings(**values: str) -> pretrain.PretrainConfig:
    """Tiny, unless an ARCH says the size."""
    return pretrain.PretrainConfig(**{"DATA": "/data", **({} if "ARCH" in values else {"SIZE": "tiny"}), **values})


@pytest.fixture(autouse=True)
def venv_on_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # where fairseq-train is found


def test_bf16_on_a_gpu_replaces_fp16_and_runs_the_parse_that_keeps_it_bf16():
    run = pretrain.plan(settings(BF16="1", GPUS="1"), environ={})
    args = pretrain.fairseq_args(run)
    assert "--bf16" in args and "--fp16" not in args and "--cpu" not in args
    assert pretrain.command(run)[:3] == [sys.executable, "-m", "tupe_pretrain.fairseq_train"]
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
    assert pretrain.launch_environment(run)["FAIRSEQ_TRAIN"] == f"{sys.executable} -m tupe_pretrain.fairseq_train"
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


def test_an_arch_that_is_not_registered_is_refused_with_the_closest_names():
    """An ARCH typo failed inside fairseq 40 s in, after SAVE_DIR/settings.json was written: plan() refuses it."""
    with pytest.raises(UsageError, match=r"^ARCH=tupe_r_tyni is not a registered architecture \(the closest: "
                                         r"tupe_r_tiny.*\); ARCH is VARIANT_SIZE"):
        pretrain.plan(settings(ARCH="tupe_r_tyni", GPUS="0"), environ={})
    with pytest.raises(UsageError, match=r"^ARCH=xyz is not a registered architecture; "):
        pretrain.plan(settings(ARCH="xyz", GPUS="0"), environ={})


@pytest.mark.parametrize("values, variant, arch", [
    ({}, "tupe-r", "tupe_r_tiny"),
    ({"VARIANT": "bert_a"}, "bert-a", "bert_a_tiny"),
    ({"ARCH": "bert_a_base"}, "bert-a", "bert_a_base"),  # VARIANT=auto: the arch's
    ({"ARCH": "tupe_roberta_large"}, "tupe-r", "tupe_roberta_large"),
    ({"ARCH": "bert_a_tiny", "VARIANT": "bert-a"}, "bert-a", "bert_a_tiny"),
])
def test_variant_and_arch_agree_and_the_variant_is_the_archs(values, variant, arch):
    c = pretrain.plan(settings(GPUS="0", **values), environ={}).config
    assert (c.VARIANT, c.ARCH) == (variant, arch)


def test_fairseqs_own_arch_is_taken_as_it_is_without_a_variant():
    """ARCH=roberta_base (bench/gpu_check's baseline) is fairseq's: trained as fairseq defines it, VARIANT recorded as
    fairseq; a VARIANT beside it is refused (it would name a positional encoding the model does not have)."""
    c = pretrain.plan(settings(ARCH="roberta_base", GPUS="0"), environ={}).config
    assert (c.VARIANT, c.ARCH) == ("fairseq", "roberta_base")
    with pytest.raises(UsageError, match=r"^ARCH=roberta_base is fairseq's own architecture, of no positional variant "
                                         r"of ours: leave VARIANT unset \(it is bert-a\)"):
        pretrain.plan(settings(ARCH="roberta_base", VARIANT="bert-a", GPUS="0"), environ={})


@pytest.mark.parametrize("values, size", [({}, "base"), ({"SIZE": "large"}, "large"), ({"ARCH": "bert_a_tiny"}, "tiny"),
                                          ({"ARCH": "bert_a_tiny", "SIZE": "tiny"}, "tiny")])
def test_size_is_the_archs_and_is_said_resolved(values, size):
    c = pretrain.plan(pretrain.PretrainConfig(DATA="/data", GPUS="0", **values), environ={}).config
    assert c.SIZE == size and c.ARCH.endswith(f"_{size}")


@pytest.mark.parametrize("values, message", [
    ({"ARCH": "bert_a_large", "SIZE": "base"}, "ARCH=bert_a_large is of size large, not SIZE=base: set only one"),
    ({"ARCH": "roberta_base", "SIZE": "tiny"}, "ARCH=roberta_base is of size base, not SIZE=tiny: set only one"),
    ({"ARCH": "roberta_prenorm", "SIZE": "base"}, "ARCH=roberta_prenorm is of no size of ours, not SIZE=base"),
])
def test_a_size_other_than_the_archs_is_refused(values, message):
    """SIZE=base ARCH=bert_a_large printed SIZE=base and trained the large model."""
    with pytest.raises(UsageError, match="^" + re.escape(message)):
        pretrain.plan(pretrain.PretrainConfig(DATA="/data", GPUS="0", **values), environ={})


def test_a_variant_other_than_the_archs_is_refused():
    """VARIANT=bert-a ARCH=tupe_r_tiny printed bert-a and trained TUPE-R."""
    with pytest.raises(UsageError, match=r"^ARCH=tupe_r_tiny is of variant tupe-r, not VARIANT=bert-a: set only one"):
        pretrain.plan(settings(ARCH="tupe_r_tiny", VARIANT="bert-a", GPUS="0"), environ={})


def test_archs_without_fairseq_are_the_plugins_registered_archs():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import tupe_plugin  # noqa: F401  (registers the archs)
    from tupe_core.registry import archs

    registered = {a for a, model in ARCH_MODEL_REGISTRY.items() if model is ARCH_MODEL_REGISTRY["tupe_r_base"]
                  and not a.startswith("toy_")}  # test_extending's toy variant stays in fairseq's registry
    assert set(archs()) == registered


def test_an_end_lr_above_the_peak_is_refused():
    """END_LR=1 above LR=1e-4 was accepted: the schedule climbed."""
    with pytest.raises(UsageError, match=r"^END_LR=1 is above LR=1e-4: the learning rate decays linearly"):
        pretrain.plan(settings(END_LR="1", GPUS="0"), environ={})
    with pytest.raises(UsageError, match=r"^END_LR=5e-4 is above LR=2e-4"):  # ELECTRA's LR (auto)
        pretrain.plan(settings(END_LR="5e-4", OBJECTIVE="electra", GPUS="0"), environ={})
    assert pretrain.plan(settings(END_LR="1e-4", GPUS="0"), environ={}).config.END_LR == 1e-4  # constant: allowed


def test_a_record_without_the_variant_resumes_and_gets_it(tmp_path):
    """VARIANT is recorded since 2026-12: an older SAVE_DIR/settings.json lacks it and still resumes (a changed
    value of a setting it has is still refused)."""
    import json

    import torch

    from tupe_pretrain.check_resume import main as check_resume

    torch.save({"optimizer_history": [{"num_updates": 5}]}, tmp_path / "checkpoint_last.pt")
    (tmp_path / "settings.json").write_text(json.dumps({"ARCH": "bert_a_tiny", "LR": "1e-4"}))
    assert check_resume([str(tmp_path), "--setting=ARCH=bert_a_tiny", "--setting=LR=1e-4",
                         "--added-setting=VARIANT=bert-a"]) == 0
    assert json.loads((tmp_path / "settings.json").read_text()) == {"ARCH": "bert_a_tiny", "LR": "1e-4",
                                                                   "VARIANT": "bert-a"}
    assert check_resume([str(tmp_path), "--setting=ARCH=bert_a_tiny", "--setting=LR=1e-4",
                         "--added-setting=VARIANT=tupe-r"]) == 2  # recorded now: compared
    assert check_resume([str(tmp_path), "--setting=ARCH=bert_a_tiny", "--setting=LR=2e-4",
                         "--added-setting=VARIANT=bert-a"]) == 2
    assert check_resume([str(tmp_path), "--setting=ARCH=bert_a_tiny", "--setting=LR=0.0001",
                         "--added-setting=VARIANT=bert-a"]) == 0  # one value, however spelt (it was refused)


def test_the_request_keeps_its_autos_and_the_resolved_run_has_none():
    request = settings(GPUS="0")
    run = pretrain.plan(request, environ={})
    assert run.request is request and (request.LR, request.TOTAL_UPDATES, request.UPDATE_FREQ, request.FP16) == (
        None, None, None, None)
    c = run.config
    assert isinstance(c, pretrain.ResolvedPretrainConfig)
    assert (c.text("LR"), c.TOTAL_UPDATES, c.UPDATE_FREQ, c.FP16, c.NPROC_PER_NODE, c.MAX_POSITIONS) == (
        "1e-4", 1000000, 16, False, 1, 512)
    assert (c.ARCH, c.DDP_BACKEND, c.MASTER_ADDR) == ("tupe_r_tiny", "legacy_ddp", "127.0.0.1")
    with pytest.raises(UsageError, match="^GPUS must be a whole number, not 'auto'$"):
        pretrain.ResolvedPretrainConfig.of(c, GPUS=None)  # a resolved run holds no auto
    with pytest.raises(ValueError, match="with SAVE_DIR auto"):
        pretrain.ResolvedPretrainConfig.of(c, SAVE_DIR="auto")


def test_a_batch_fairseq_would_round_down_is_refused():
    """fairseq rounds a batch down to --required-batch-size-multiple (8 by default): MAX_SENTENCES=12 trained
    batches of 8 while the run said and recorded 12 x 16 = 192. At most 8, or a multiple of 8, is what it says."""
    with pytest.raises(UsageError, match=r"^MAX_SENTENCES=12 is not a multiple of 8: fairseq rounds each batch down"):
        pretrain.plan(settings(GPUS="1", MAX_SENTENCES="12", SENTENCES_PER_UPDATE="192"), environ={})
    for size in ("4", "8", "24"):
        run = pretrain.plan(settings(GPUS="1", MAX_SENTENCES=size, SENTENCES_PER_UPDATE="96"), environ={})
        assert "--required-batch-size-multiple" not in pretrain.fairseq_args(run) and run.effective == 96


@pytest.mark.parametrize("extra, env_extra, says", [
    ([], "--update-freq 4", "--update-freq, which the recipe sets from UPDATE_FREQ"),
    (["--lr", "5e-4", "--max-update", "500"], "", "--lr, which the recipe sets from LR"),
    (["--seed=3"], "--total-num-update 9 --warmup-updates 2",
     "--seed, --total-num-update, --warmup-updates, which the recipe sets from SEED, TOTAL_UPDATES, WARMUP")])
def test_extra_arguments_that_repeat_a_recipe_setting_are_refused(extra, env_extra, says):
    """fairseq takes the last of a repeated flag: EXTRA_ARGS='--update-freq 4' trained a batch of 512 while the run
    printed and recorded 256. A flag without a setting (--distributed-backend), --log-format (the study's json) and
    --max-update (stop early on the schedule of TOTAL_UPDATES) may be given again."""
    with pytest.raises(UsageError, match=rf"^EXTRA_ARGS or the arguments repeat {re.escape(says)}: set those instead"):
        pretrain.plan(settings(GPUS="0", EXTRA_ARGS=env_extra), environ={}, extra=extra)
    run = pretrain.plan(settings(GPUS="0", EXTRA_ARGS="--log-format json --max-update 12"), environ={},
                        extra=["--distributed-backend", "gloo"])
    assert pretrain.fairseq_args(run)[-6:] == ["--log-format", "json", "--max-update", "12", "--distributed-backend",
                                               "gloo"]
    assert set(pretrain.SETTING_OF_FLAG) <= set(pretrain.fairseq_args(pretrain.plan(settings(
        GPUS="1", NPROC_PER_NODE="1", NNODES="2", MASTER_ADDR="h", OBJECTIVE="electra"), environ={})))


def test_torchrun_over_several_nodes_needs_node_zeros_address_and_only_node_zero_holds_save_dir():
    """Without SLURM, MASTER_ADDR=auto was 127.0.0.1 on every node (node 1 waited for itself); and every node
    took SAVE_DIR's lock, so nodes 1.. were refused by node 0's."""
    several = dict(GPUS="1", NNODES="2", MAX_SENTENCES="8")
    with pytest.raises(UsageError, match=r"^NNODES=2 without SLURM: set MASTER_ADDR to node 0's hostname"):
        pretrain.plan(settings(NODE_RANK="1", **several), environ={})
    node1 = pretrain.plan(settings(NODE_RANK="1", MASTER_ADDR="10.0.0.1", **several), environ={})
    node0 = pretrain.plan(settings(NODE_RANK="0", MASTER_ADDR="10.0.0.1", **several), environ={})
    assert not node1.leads and node0.leads and pretrain.plan(settings(GPUS="1"), environ={}).leads
    assert "--master-addr 10.0.0.1" in " ".join(pretrain.command(node1))
    said = []  # node 1 says where it waits, and for how long, before it waits (node 0 may have refused to start)
    with pytest.raises(DataError):  # no /data here: the say comes first
        pretrain.prepare(settings(NODE_RANK="1", MASTER_ADDR="10.0.0.1", **dict(several, GPUS="0")), environ={},
                         say=said.append)
    assert said == ["node 1 of 2: SAVE_DIR's lock and record are node 0's; this node waits for node 0 at "
                    "10.0.0.1:29500 (torchrun's rendezvous, up to its 600 s): if node 0 refused to start, its log "
                    "says why, and this node then fails"]


def test_a_warmup_as_long_as_the_run_is_said():
    lines = []
    run = pretrain.plan(settings(GPUS="0", TOTAL_UPDATES="100"), environ={})  # WARMUP 10000, the recipe's
    pretrain.show(run, lines.append)
    assert any(line.startswith("warning: WARMUP=10000 is not below TOTAL_UPDATES=100: the learning rate climbs for "
                               "the whole run, to LR x 100/10000 at most") for line in lines)
