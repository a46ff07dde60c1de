"""The plugin through the real fairseq CLIs (subprocesses), on tiny models and data, on CPU."""
from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import PRETRAIN_ARGS, ROOT, fairseq_train_in_one_process, run, train_losses
from tupe_core.registry import VARIANTS

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process

FINETUNE_ARGS = [
    "--user-dir", "tupe_plugin", "--task", "sentence_prediction", "--criterion", "sentence_prediction",
    "--num-classes", "2", "--init-token", "0", "--separator-token", "2", "--max-positions", "64",
    "--batch-size", "16", "--required-batch-size-multiple", "1",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.999)", "--adam-eps", "1e-6", "--weight-decay", "0.01",
    "--clip-norm", "1.0", "--lr", "1e-3", "--lr-scheduler", "warmup_ratio", "--warmup-ratio", "0.06",
    "--reset-optimizer", "--reset-dataloader", "--reset-meters", "--reset-lr-scheduler",
    "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric",
    "--cpu", "--log-format", "simple", "--log-interval", "5", "--seed", "1", "--num-workers", "0",
    "--no-epoch-checkpoints",
]


@pytest.fixture(scope="module")
def variant_logs(lm_bin, tmp_path_factory, starts_process) -> Dict[str, str]:
    """fairseq-train's 20 updates of every registered variant, all in one process: each variant's log."""
    return fairseq_train_in_one_process(
        {v: [str(lm_bin), *PRETRAIN_ARGS, "--arch", f"{v}_tiny", "--max-update", "20", "--no-save"] for v in VARIANTS},
        tmp_path_factory.mktemp("every_variant"))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_pretrain_every_variant_loss_falls(variant, variant_logs):
    log = variant_logs[variant]
    assert f"positional variant: {variant} " in log
    losses = train_losses(log)
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.3, losses  # about 1.8 bits at 20 updates (unigram statistics and more)


def finetune_args(pretrained: Path, cls_bin: Path, *extra: str) -> List[str]:
    return [str(cls_bin), *FINETUNE_ARGS, "--restore-file", str(pretrained / "checkpoint_last.pt"), *extra]


@pytest.fixture(scope="module")
def runs(pretrained, lm_bin, cls_bin, tmp_path_factory, starts_process) -> Dict[str, str]:
    """A resumed pre-training and three fine-tunings from the session's checkpoint (two refused), in one process:
    each run's log."""
    folder = tmp_path_factory.mktemp("cli_runs")
    shutil.copytree(pretrained, folder / "resume")
    return fairseq_train_in_one_process({
        "resume": [str(lm_bin), *PRETRAIN_ARGS, "--arch", "tupe_roberta_tiny", "--max-update", "40",
                   "--log-interval", "1"],
        "finetune": finetune_args(pretrained, cls_bin, "--arch", "tupe_roberta_tiny", "--max-epoch", "6"),
        "wrong_variant": finetune_args(pretrained, cls_bin, "--arch", "tupe_a_tiny", "--max-epoch", "1"),
        "other_max_positions": finetune_args(pretrained, cls_bin, "--arch", "tupe_roberta_tiny", "--max-epoch", "1",
                                             "--max-positions", "128"),
    }, folder, failing=("wrong_variant", "other_max_positions"))


def test_resume_continues_at_the_next_update(runs):
    log = runs["resume"]
    assert "Loaded checkpoint" in log and "@ 30 updates" in log
    updates = [int(x) for x in re.findall(r"train_inner \|.*?num_updates=(\d+)", log)]
    assert updates[0] == 31 and updates[-1] == 40


def test_finetune_from_pretrained_learns_and_counts_updates(runs):
    log = runs["finetune"]
    # 320 training sentences / batch 16 = 20 updates per epoch, counted by the scheduler itself
    assert "warmup_ratio schedule: 20 updates/epoch x 6 epochs -> 120 updates, 7 warmup" in log
    best = [float(x) for x in re.findall(r"valid \|.*?best_accuracy ([0-9.]+)", log)]
    assert best and best[-1] >= 90.0, best
    assert re.search(r"Saved checkpoint \S*/finetune/checkpoint_best\.pt", log)


def test_finetune_with_the_wrong_variant_names_the_flag(runs):
    err = runs["wrong_variant"]
    assert "trained as positional variant 'tupe_r'" in err and "--rel-pos" in err


def test_finetune_with_other_max_positions_names_the_flag(runs):
    assert "pass --max-positions 64" in runs["other_max_positions"]


def test_hydra_train_with_shipped_config(lm_bin, tmp_path):
    save = tmp_path / "hydra"
    p = run(["fairseq-hydra-train", "--config-dir", str(ROOT / "tupe_pretrain/config/pretrain"),
             "--config-name", "tupe_base", f"task.data={lm_bin}", f"common.user_dir={ROOT / 'tupe_plugin'}",
             "common.fp16=false", "common.cpu=true", "common.log_interval=5", "model._name=tupe_a_tiny",
             "model.max_positions=64", "task.tokens_per_sample=64", "optimization.max_update=20",
             "optimization.lr=[0.002]", "lr_scheduler.warmup_updates=5", "dataset.num_workers=0",
             "dataset.batch_size=8", "optimization.update_freq=[2]", "model.target_batch_size=16",
             f"checkpoint.save_dir={save}", f"common.tensorboard_logdir={tmp_path / 'tb'}",
             f"hydra.run.dir={tmp_path / 'out'}"], cwd=tmp_path)
    log = p.stdout + p.stderr
    assert "positional variant: tupe_a " in log
    losses = train_losses(log)
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert (save / "checkpoint_last.pt").exists()
    assert any((tmp_path / "tb" / "train_inner").iterdir())  # TensorBoard events written


def test_hydra_pretrain_config_refuses_a_batch_other_than_the_papers(lm_bin, tmp_path):
    """The shipped config asks for the paper's 256 sequences per update; on 1 process x 16 that needs
    update_freq [16], which the refusal names."""
    p = run(["fairseq-hydra-train", "--config-dir", str(ROOT / "tupe_pretrain/config/pretrain"),
             "--config-name", "tupe_base", f"task.data={lm_bin}", f"common.user_dir={ROOT / 'tupe_plugin'}",
             "common.fp16=false", "common.cpu=true", "model._name=tupe_a_tiny", "model.max_positions=64",
             "task.tokens_per_sample=64", "dataset.num_workers=0", f"checkpoint.save_dir={tmp_path / 'ck'}",
             f"hydra.run.dir={tmp_path / 'out'}"], cwd=tmp_path, check=False)
    assert p.returncode != 0
    assert ("batch of 1 process(es) x dataset.batch_size 16 x optimization.update_freq 1 = 16 sequences, "
            "not model.target_batch_size=256: pass optimization.update_freq=[16]") in p.stdout + p.stderr
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()


def test_hydra_finetune_config_counts_updates_from_the_epoch_budget(pretrained, cls_bin, tmp_path):
    p = run(["fairseq-hydra-train", "--config-dir", str(ROOT / "tupe_pretrain/config/finetune"),
             "--config-name", "glue", f"task.data={cls_bin}", f"common.user_dir={ROOT / 'tupe_plugin'}",
             f"checkpoint.restore_file={pretrained / 'checkpoint_last.pt'}", "model._name=tupe_roberta_tiny",
             "model.max_positions=64", "task.max_positions=64", "common.fp16=false", "common.cpu=true",
             "optimization.max_epoch=3", "optimization.lr=[0.001]", "dataset.num_workers=0",
             f"checkpoint.save_dir={tmp_path / 'ft'}", f"hydra.run.dir={tmp_path / 'out'}"], cwd=tmp_path)
    log = p.stdout + p.stderr
    # 320 sentences / batch 32 = 10 updates per epoch; 6% of 30 updates = 1 warmup update
    assert "warmup_ratio schedule: 10 updates/epoch x 3 epochs -> 30 updates, 1 warmup" in log
    assert "num_updates 30" in log and (tmp_path / "ft" / "checkpoint_best.pt").exists()
