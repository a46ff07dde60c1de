"""The train section: a short real pre-training of ``Settings.train_arch`` (``--user-dir tupe_plugin``) on generated
tokens, in fp16 through ``fairseq-train --fp16`` and in bf16 through ``fairseq-hydra-train`` (``common.bf16=true``:
fairseq 0.12's command line turns ``--bf16`` into ``--tpu``): the loss falls, overflow skips are counted."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from .report import Result
from .settings import ROOT, Settings
from .throughput import write_token_data


def train_log_facts(log: str) -> Dict[str, object]:
    """Losses of the ``train_inner`` lines, overflow skips (fairseq's "gradient overflow detected" notes) and the
    last loss scale logged."""
    losses = [float(v) for v in re.findall(r"train_inner\W.*?\bloss=([0-9.]+)", log)]
    scales = re.findall(r"\bloss_scale=([0-9.e+-]+)", log)
    return {"losses": losses, "overflows": len(re.findall(r"gradient overflow detected", log)),
            "loss_scale": scales[-1] if scales else "none"}


def train_command(s: Settings, precision: str, launcher: str, data: Path, run_dir: Path) -> List[str]:
    """One short masked-LM pre-training of ``s.train_arch``: through ``fairseq-train`` (the legacy command line,
    as train_scripts/pretrain.sh) or ``fairseq-hydra-train`` with the shipped config. fairseq 0.12's command line
    turns ``--bf16`` into ``--tpu`` (``fairseq/options.py``), so bf16 on a GPU goes through hydra."""
    plugin, cpu = str(ROOT / "tupe_plugin"), s.device == "cpu"
    if launcher == "cli":
        if precision == "bf16":
            raise ValueError("fairseq-train --bf16 sets --tpu in fairseq 0.12; use the hydra launcher")
        return [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", plugin, "--task", "masked_lm",
                "--criterion", "masked_lm", "--arch", s.train_arch, "--sample-break-mode", "complete",
                "--tokens-per-sample", str(s.train_length), "--batch-size", str(s.train_batch), "--optimizer", "adam",
                "--lr", s.train_lr, "--lr-scheduler", "polynomial_decay", "--warmup-updates", str(s.train_warmup),
                "--total-num-update", str(s.train_updates), "--max-update", str(s.train_updates),
                "--log-format", "simple", "--log-interval", "5", "--seed", "1", "--num-workers", "0", "--no-save",
                "--disable-validation", "--no-progress-bar", *(["--cpu"] if cpu else []),
                *([f"--{precision}"] if precision != "fp32" else [])]
    return [sys.executable, "-m", "fairseq_cli.hydra_train", "--config-dir", str(ROOT / "tupe_pretrain/config/pretrain"),
            "--config-name", "tupe_base", f"task.data={data}", f"common.user_dir={plugin}",
            f"model._name={s.train_arch}", f"common.fp16={str(precision == 'fp16').lower()}",
            f"common.bf16={str(precision == 'bf16').lower()}", f"common.cpu={str(cpu).lower()}",
            "common.log_interval=5", "common.tensorboard_logdir=null", "model.target_batch_size=null",
            f"dataset.batch_size={s.train_batch}", f"task.tokens_per_sample={s.train_length}",
            f"optimization.max_update={s.train_updates}", f"optimization.lr=[{s.train_lr}]",
            f"lr_scheduler.warmup_updates={s.train_warmup}", "dataset.num_workers=0", "checkpoint.no_save=true",
            "dataset.disable_validation=true", f"hydra.run.dir={run_dir}"]


def run(r: Result, s: Settings, args) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        (data / "bin").mkdir()
        # lines of 20 to 60 of 500 words with Zipf frequencies, written as fairseq's binaries in this process (a
        # fairseq-preprocess of the same text was a process start, ~5 s of a GPU loan): the loss falls within a few
        # updates from log2 of the vocabulary (9 bits) towards the frequencies' entropy (6.9 bits)
        write_token_data(data / "bin", 500, 160_000 if s.device == "cuda" else 24_000, 20, 60)
        r.say(f"`{s.train_arch}`, {s.train_updates} updates of {s.train_batch} sequences of at most {s.train_length} "
              f"tokens, on generated tokens (500 words with Zipf frequencies), Adam, lr "
              f"{s.train_lr}, {s.train_warmup} warm-up updates; losses as fairseq logs them (base 2), every 5 updates. fp16 through "
              "`fairseq-train --user-dir tupe_plugin --fp16`; bf16 through `fairseq-hydra-train` with "
              "tupe_pretrain/config/pretrain/tupe_base.yaml and `common.bf16=true` (fairseq 0.12's command line "
              "turns `--bf16` into `--tpu`).\n")
        r.say("Loss falls, overflow skips counted: the loss of the first and the last logged interval, and the "
              "updates fairseq skipped on a gradient overflow (fp16's loss scaling; bf16 has none).\n")
        r.say("| precision | launcher | updates | loss, first logged -> last | loss falls | overflow skips | "
              "last loss scale | seconds |\n|---|---|---:|---|---|---:|---|---:|")
        for precision, launcher in s.train_runs:
            cmd = train_command(s, precision, launcher, data / "bin", data / f"hydra-{precision}")
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp,
                               timeout=max(10.0, args.deadline - time.time()))
            seconds = time.monotonic() - t0
            facts = train_log_facts(p.stdout + p.stderr)
            losses = facts["losses"]
            falls = len(losses) >= 2 and losses[-1] < losses[0]
            label = precision + (" (dry run: fairseq's fp16/bf16 need CUDA)" if s.device != "cuda" else "")
            shown = f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "none logged"
            r.say(f"| {label} | {launcher} | {5 * len(losses)} | {shown} | {falls} | {facts['overflows']} | "
                  f"{facts['loss_scale']} | {seconds:.0f} |")
            setting = f"{precision} {launcher}"
            r.record(s.train_arch, setting, first_loss=losses[0] if losses else "", last_loss=losses[-1] if losses else "",
                     loss_falls=falls, overflow_skips=facts["overflows"], last_loss_scale=facts["loss_scale"],
                     seconds=round(seconds, 1))
            if p.returncode != 0:
                r.fail(f"{setting}: exit status {p.returncode}\n\n```\n{p.stderr[-2500:]}\n```")
            elif not falls:
                r.fail(f"{setting}: the loss did not fall ({shown})")
