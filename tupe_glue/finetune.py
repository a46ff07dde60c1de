"""Fine-tuning's logic: one GLUE task, one LR, one seed, the paper's protocol (``glue/finetune.sh`` is a thin entry
point over :func:`main`; the study and ``tupe_glue/grid.py`` call :func:`finetune` as a function).

    settings = read(environ)                           # FinetuneConfig: every setting typed and checked
    lr, seed = run_values("2e-5", "1")                 # the command line's LR and SEED: a positive number, a whole one
    status = finetune(settings, task, lr, seed)        # RUNS/TASK/lr{LR}_seed{SEED}/ with result.json, or skipped

LR and SEED are numbers (a float, an int), named by value (``run_name``): a new folder takes their short spelling
(``lr1e-3_seed1`` for 0.001), and a finished folder spelt otherwise with the same values (``lr0.001_seed1``) is this
run. An LR read from text (:func:`run_values`: a ``tunables.Num``) keeps its spelling in the command and the record.
The run is made in RUNS/.partial/TASK/lr{LR}_seed{SEED}/ and renamed when complete. Its result.json records
what made it (``run_inputs``: the checkpoint's and the task binaries' fingerprints and every setting that changes
the result); a rerun skips a finished run only when they match, and refuses one made with other inputs, naming
what differs. An incomplete run is redone from scratch, and one whose result.json cannot be read is moved to
RUNS/.unreadable/ and redone. Exit codes as every script's: 2 wrong usage or settings, 1 a run failed.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_common import tunables
from tupe_common.installed import user_dir
from tupe_common.fairseq_exit import DONE_FILE_ENV, finished_status
from tupe_common.errors import command_name, RESUME_RUNS, UsageError, exit_main, message
from tupe_common.numbers import named, same_number, spelling
from tupe_glue.collect import RUN_FOLDER
from tupe_common.process import run_logged
from tupe_common.tunables import Say, Settings, setting

if TYPE_CHECKING:
    from tupe_glue.finetune_helper import FinetuneFacts

PROG = command_name("finetune.sh")


@dataclass(frozen=True)
class FinetuneConfig(Settings):
    """finetune.sh's settings (the paper's protocol as defaults: docs/glue_protocol.md)."""

    RENAMED: ClassVar[Mapping[str, str]] = {"BATCH": "SENTENCES_PER_BATCH"}  # the old name works, with a warning

    CHECKPOINT: str = setting('', 'pre-trained checkpoint (.pt) (required)')
    GLUE_BIN: str = setting('glue-bin', 'folder with TASK-bin/ from python -m tupe_preprocess.glue_binarize')
    RUNS: str = setting('runs', 'output root: RUNS/TASK/lr{LR}_seed{SEED}/')
    EPOCHS: Optional[int] = setting('auto', 'epochs (auto: 5 for MNLI, QNLI, QQP; 10 otherwise)', 'auto/int1', others=('MAX_EPOCH', 'NUM_TRAIN_EPOCHS'))
    SENTENCES_PER_BATCH: int = setting('32', 'sentences per batch of each process, at most (--batch-size; was BATCH); one process: per update', 'int1', others=('BATCH_SIZE', 'MAX_SENTENCES'))
    MAX_TOKENS: int = setting('4400', 'tokens per batch at most (--max-tokens)', 'int1')
    WARMUP_RATIO: float = setting('0.06', 'fraction of updates spent warming up (warmup_ratio scheduler)', 'frac')
    ADAM_BETAS: str = setting('(0.9,0.999)', 'Adam betas')
    ADAM_EPS: float = setting('1e-6', 'Adam epsilon', 'num+')
    WEIGHT_DECAY: float = setting('0.01', 'weight decay', 'num0')
    CLIP_NORM: float = setting('1.0', 'gradient clipping', 'num0')
    DROPOUT: float = setting('0.1', 'dropout', 'frac')
    ATTENTION_DROPOUT: float = setting('0.1', 'attention dropout', 'frac')
    POOLER_DROPOUT: float = setting('0.1', 'dropout of the classification head (the official head: dense, tanh, dropout 0.1)', 'frac')
    VALID_PER_EPOCH: int = setting('2', "validations per epoch, evenly spaced, the last at the epoch's end (the original's --validate-interval-updates 2)", 'int1')
    KEEP_CHECKPOINTS: bool = setting('0', '1: keep checkpoint_best.pt of the run; 0: write no checkpoints', '0/1')
    FP16: Optional[bool] = setting('auto', "1: --fp16 with the original's loss-scale flags (auto: 1 on GPU, 0 on CPU)", 'auto/0/1')
    LOG_INTERVAL: int = setting('50', 'log every N updates', 'int1')
    NUM_WORKERS: int = setting('1', 'data loader workers', 'int0')
    METRIC_AVERAGING: str = setting('dev_set', "dev_set: metrics over the whole dev set (GLUE's definition); per_batch: the official code's mean of per-batch metrics", 'dev_set/per_batch')
    TRUNCATE: bool = setting('0', "1: cut inputs longer than the model's positions (--shorten-method truncate); 0: an over-long input is an error", '0/1')
    QUIET: bool = setting('0', "1: fairseq's output only to train.log (tupe-grid sets it)", '0/1')
    EXTRA_ARGS: str = setting('', 'more fairseq-train arguments (split on spaces)')


# The settings that leave a run's result as it is (where it goes, what it prints, what it keeps); every other
# one is part of the run's inputs (CHECKPOINT and GLUE_BIN by their contents' fingerprints).
NOT_INPUTS = frozenset({"CHECKPOINT", "GLUE_BIN", "RUNS", "QUIET", "LOG_INTERVAL", "NUM_WORKERS", "KEEP_CHECKPOINTS"})

def say_to_stderr(line: str) -> None:
    sys.stderr.write(f"{PROG}: {line}\n")


def read(environ: Mapping[str, str], say: Say = say_to_stderr) -> FinetuneConfig:
    """The settings of ``environ``, each checked (UsageError naming it): BATCH is SENTENCES_PER_BATCH's old name."""
    return FinetuneConfig.read(environ, say)


class RunFailed(Exception):
    """fairseq-train or the result failed (exit 1; 2 where the failing command refused its usage)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = 2 if status == 2 else 1




def run_name(runs: str, task: str, lr: float, seed: int) -> str:
    """The run's folder name: the finished one of the same LR and seed values however it is spelt
    (``lr0.001_seed1`` for 1e-3; ``lr5e-4_seed1`` as typed before), else the one short spelling (``lr1e-3_seed1``)."""
    return named(os.path.join(runs, task), RUN_FOLDER, float(lr), seed)


def run_dirs(runs: str, task: str, lr: float, seed: int) -> Tuple[str, str]:
    """The run's folder and the one it is made in (``run_name`` in RUNS/TASK/ and RUNS/.partial/TASK/)."""
    name = run_name(runs, task, lr, seed)
    return os.path.join(runs, task, name), os.path.join(runs, ".partial", task, name)


def run_lock(runs: str, task: str, lr: float, seed: int) -> str:
    """The run's lock (tupe_common.lock): beside its folder under .partial (the folder itself is made afresh,
    then renamed), RUNS/.partial/TASK/lr{LR}_seed{SEED}.lock."""
    return run_dirs(runs, task, lr, seed)[1] + ".lock"


def spelt(value: float) -> str:
    """An LR or a seed as a command line and a record write it: an LR read from text (a ``tunables.Num``) as it
    was typed, another number in its one spelling (``tupe_common.numbers.spelling``)."""
    return str(value) if isinstance(value, (tunables.Num, int)) else spelling(value)


def run_inputs(settings: FinetuneConfig, task: str, lr: float, seed: int) -> Dict[str, str]:
    """What makes a run's result: the task, LR and seed (:func:`spelt`), the fingerprints (``tupe_common.io.file_fingerprint``) of
    the checkpoint and of the task's binaries, and every setting but ``NOT_INPUTS``. Raises OSError."""
    from tupe_common.io import file_fingerprint, folder_fingerprint

    inputs = {"task": task, "lr": spelt(lr), "seed": spelt(seed), "checkpoint": file_fingerprint(settings.CHECKPOINT),
              "data": folder_fingerprint(os.path.join(settings.GLUE_BIN, f"{task}-bin"))}
    inputs.update({name: value for name, value in settings.texts().items() if name not in NOT_INPUTS})
    return inputs


def other_inputs(result: str, inputs: Mapping[str, str], checkpoint: str) -> Optional[str]:
    """None when the finished run of ``result`` (a readable result.json) was made with ``inputs`` (numbers by
    value), else what differs, in one phrase. A run from before runs recorded their inputs has only its checkpoint's path to compare
    (``checkpoint``: the current one)."""
    from tupe_common.io import read_json

    data = read_json(result) or {}
    recorded = data.get("inputs")
    if not isinstance(recorded, dict):
        made_with = data.get("checkpoint")
        if made_with and os.path.abspath(checkpoint) != made_with:
            return f"CHECKPOINT {made_with}, not {os.path.abspath(checkpoint)}"
        return None
    names = {"checkpoint": "CHECKPOINT (fingerprint)", "data": "the task's binaries (fingerprint)"}
    differ = [f"{names.get(k, k)} {recorded.get(k, 'unrecorded')} -> {v}" for k, v in inputs.items()
              if not same_number(str(recorded.get(k)), str(v))]  # LR 0.001 recorded is 1e-3
    return "; ".join(differ) or None


def check_finished(settings: FinetuneConfig, task: str, final: str, say: Say) -> bool:
    """True when ``final`` holds a readable, complete result.json (whether its inputs match is the caller's to
    check: ``other_inputs``); an unreadable one is moved aside (False); a folder without one is refused."""
    from tupe_glue.finetune_helper import check_result

    result = os.path.join(final, "result.json")
    if os.path.isfile(result):
        why = check_result(task, result)
        if why is None:
            return True
        aside = os.path.join(settings.RUNS, ".unreadable", task,
                             f"{os.path.basename(final)}.{time.strftime('%Y%m%d-%H%M%S')}")
        say(f"{task} {os.path.basename(final)}: unreadable result ({why}); moving the run to {aside} and redoing it")
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        os.rename(final, aside)
    if os.path.exists(final):
        raise UsageError(f"{final} exists without result.json: not a finished run of this script; move it away")
    return False


def fairseq_args(c: FinetuneConfig, task: str, lr: float, seed: int, facts: "FinetuneFacts",
                 save_dir: str) -> List[str]:
    """fairseq-train's arguments (after ``python -m tupe_glue.fairseq_train --validations-per-epoch N``); ``c`` with
    EPOCHS and FP16 resolved."""
    t = c.text
    args = [
        os.path.join(c.GLUE_BIN, f"{task}-bin"), "--user-dir", user_dir(),
        *facts.model_args,
        "--restore-file", c.CHECKPOINT, "--reset-optimizer", "--reset-dataloader", "--reset-meters",
        "--reset-lr-scheduler",
        "--task", "sentence_prediction", "--criterion", "glue_sentence_prediction",
        "--metric-averaging", c.METRIC_AVERAGING, "--num-classes", str(facts.task.num_classes),
        "--init-token", "0", "--separator-token", "2",
        "--batch-size", t("SENTENCES_PER_BATCH"), "--max-tokens", t("MAX_TOKENS"), "--required-batch-size-multiple", "1",
        "--optimizer", "adam", "--adam-betas", c.ADAM_BETAS, "--adam-eps", t("ADAM_EPS"),
        "--weight-decay", t("WEIGHT_DECAY"), "--clip-norm", t("CLIP_NORM"), "--lr", spelt(lr),
        "--lr-scheduler", "warmup_ratio", "--warmup-ratio", t("WARMUP_RATIO"),
        "--max-epoch", t("EPOCHS"), "--dropout", t("DROPOUT"), "--attention-dropout", t("ATTENTION_DROPOUT"),
        "--pooler-dropout", t("POOLER_DROPOUT"), "--seed", spelt(seed),
        "--valid-subset", ",".join(facts.task.valid_subsets), "--best-checkpoint-metric", facts.task.metric,
        "--maximize-best-checkpoint-metric",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-last-checkpoints",
        "--log-format", "simple", "--log-interval", t("LOG_INTERVAL"), "--num-workers", t("NUM_WORKERS"),
        "--data-buffer-size", "0",  # no prefetch thread: it can abort the exit with status 134 (tupe_plugin/clean_exit.py)
    ]
    if facts.task.regression:
        args.append("--regression-target")
    if c.TRUNCATE:
        args += ["--shorten-method", "truncate"]
    if facts.cuda_devices == 0:
        args.append("--cpu")
    if c.FP16:
        args += ["--fp16", "--fp16-init-scale", "4", "--threshold-loss-scale", "1", "--fp16-scale-window", "128"]
    args += c.EXTRA_ARGS.split()
    # tupe_glue.fairseq_train validates exactly VALID_PER_EPOCH times per epoch (docs/glue_protocol.md §4)
    args += ["--keep-interval-updates", "1"] if c.KEEP_CHECKPOINTS else ["--no-save"]
    return args


def check_run_settings(lrs: Sequence[str], seeds: Sequence[str]) -> None:
    """Refuse (UsageError, naming the setting) an LR that is not a positive number and a seed that is not a whole
    number, as the settings' kinds do (``num+``, ``int``): for the arguments of finetune.sh and of callers, which
    are not read through :class:`FinetuneConfig`."""
    for lr in lrs:
        if not tunables.fits("num+", lr):
            raise UsageError(f"LR must be a positive number like 2e-5, not '{lr}'")
    for seed in seeds:
        if not tunables.fits("int", seed):
            raise UsageError(f"SEED must be a whole number, not '{seed}'")


def run_values(lr: str, seed: str) -> Tuple[float, int]:
    """The LR and seed of finetune.sh's command line, checked as :func:`check_run_settings` does:
    the LR a ``tunables.Num`` (its value, and the spelling the command and the record keep), the seed an int."""
    check_run_settings([lr], [seed])
    return tunables.Num(lr), int(seed)


def finetune(settings: FinetuneConfig, task: str, lr: float, seed: int, say: Say = say_to_stderr,
             environ: Mapping[str, str] = os.environ) -> str:
    """Fine-tune one run (or skip it when finished) holding its lock (``run_lock``: another run into the same
    folder is refused, tupe_common.lock.LockHeld): returns its folder. Raises UsageError (exit 2) or RunFailed."""
    from tupe_common.lock import hold

    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise UsageError(f"LR must be a positive number like 2e-5, not '{lr}'")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UsageError(f"SEED must be a whole number, not '{seed}'")
    with hold(run_lock(settings.RUNS, task, lr, seed), PROG, "RUNS", say):  # one lock per value: the name's
        return finetune_locked(settings, task, lr, seed, say, environ)


def finetune_locked(settings: FinetuneConfig, task: str, lr: float, seed: int, say: Say,
                    environ: Mapping[str, str]) -> str:
    from tupe_common.io import write_text
    from tupe_glue.finetune_helper import facts_of, write_result

    c = settings
    final, partial = run_dirs(c.RUNS, task, lr, seed)
    finished = check_finished(c, task, final, say)
    if not finished:
        say(tunables.shown(c))
    if not c.CHECKPOINT:
        raise UsageError("CHECKPOINT is required: the pre-trained checkpoint to fine-tune")
    from tupe_common.checkpoint_file import CheckpointError, check_file

    try:  # missing, a folder, not a checkpoint: one line naming it (exit 1)
        check_file(c.CHECKPOINT)
    except CheckpointError as e:
        raise RunFailed(f"CHECKPOINT={e}") from None
    data = os.path.join(c.GLUE_BIN, f"{task}-bin")
    if not os.path.isdir(data):
        raise RunFailed(f"{data}: no such folder (GLUE_BIN={c.GLUE_BIN})")
    inputs = run_inputs(c, task, lr, seed)
    if finished:
        differ = other_inputs(os.path.join(final, "result.json"), inputs, c.CHECKPOINT)
        if differ:
            raise UsageError(f"{final} was made with other inputs ({differ}): set RUNS to another folder, or move "
                             "that run away to redo it")
        say(f"{task} {os.path.basename(final)}: already done ({os.path.join(final, 'result.json')}), skipping")
        return final
    facts = facts_of(task, c.CHECKPOINT, c.GLUE_BIN)
    gpus = facts.cuda_devices
    if c.FP16 and not gpus:  # fairseq would end in a CUDA traceback
        raise UsageError("FP16=1 needs a GPU, but this machine sees no CUDA device: leave FP16 unset on CPU")
    c = dataclasses.replace(c, EPOCHS=facts.task.epochs if c.EPOCHS is None else c.EPOCHS,
                            FP16=gpus > 0 if c.FP16 is None else c.FP16)
    t = facts.task
    say(f"{task}: {t.num_classes} class(es), metric {t.metric} on {','.join(t.valid_subsets)}, "
        f"{c.EPOCHS} epochs; checkpoint variant {facts.checkpoint_variant} ({' '.join(facts.model_args)})")
    if shutil.which("fairseq-train") is None:
        raise UsageError("fairseq-train not found (activate the virtual environment)")

    shutil.rmtree(partial, ignore_errors=True)  # an earlier attempt that did not finish: redo from scratch
    os.makedirs(partial)
    cmd = [sys.executable, "-m", "tupe_glue.fairseq_train", "--validations-per-epoch", c.text("VALID_PER_EPOCH"),
           *fairseq_args(c, task, lr, seed, facts, os.path.join(partial, "checkpoints"))]
    write_text(os.path.join(partial, "command.txt"), shlex.join(cmd) + "\n")  # a full disk: one line naming it
    say("command:\n" + shlex.join(cmd))
    log, done_file = os.path.join(partial, "train.log"), os.path.join(partial, "done.txt")
    env = {**tunables.child_environ(environ, FinetuneConfig.names()), DONE_FILE_ENV: done_file}
    status = run_logged(cmd, log, env, echo=not c.QUIET)
    status = finished_status(status, done_file, say)
    if os.path.exists(done_file):
        os.remove(done_file)
    if status:
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        sys.stderr.write("".join(text.splitlines(keepends=True)[-30:]))
        from tupe_tools.errors import fairseq_error

        reason = fairseq_error(text)
        raise RunFailed(f"{task} {os.path.basename(final)}: fairseq-train failed (exit {status})"
                        f"{': ' + reason if reason else ''}; log {log}", status)

    best = write_result(task=task, lr=lr, seed=seed, metric=t.metric, subsets=t.valid_subsets, log=log,
                        variant=facts.checkpoint_variant, checkpoint=c.CHECKPOINT,
                        out=os.path.join(partial, "result.json"), inputs=inputs)
    write_text(os.path.join(partial, "best.txt"), best + "\n")
    checkpoints = os.path.join(partial, "checkpoints")
    if c.KEEP_CHECKPOINTS and os.path.isdir(checkpoints):
        for name in os.listdir(checkpoints):
            if name != "checkpoint_best.pt" and os.path.isfile(os.path.join(checkpoints, name)):
                os.remove(os.path.join(checkpoints, name))
    else:
        shutil.rmtree(checkpoints, ignore_errors=True)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    os.rename(partial, final)  # fails rather than nest if another copy of this run finished meanwhile
    say(f"{task} {os.path.basename(final)} done: {best}  -> {os.path.join(final, 'result.json')}")
    return final



USAGE = """Fine-tune a pre-trained TUPE/BERT checkpoint on one GLUE task with one LR and seed: the paper's protocol
(docs/glue_protocol.md §3; task facts from tupe_glue/tasks.py): batch 32, 10 epochs (5 for MNLI/QNLI/QQP), warmup ratio
0.06 then linear decay, Adam eps 1e-6 betas (0.9,0.999), clip 1.0, dropout 0.1, weight decay 0.01, --max-tokens 4400,
validation twice per epoch, fp16 on GPU. The model flags (arch, positions, variant) come from the checkpoint.

Examples (glue/finetune.sh, from a checkout, is the same command):
  CHECKPOINT=checkpoints/tupe_r_base/checkpoint_last.pt GLUE_BIN=glue-bin tupe-finetune RTE 2e-5 1
  CHECKPOINT=... RUNS=runs/bert_a KEEP_CHECKPOINTS=1 tupe-finetune MNLI 3e-5 2
  CHECKPOINT=... EPOCHS=1 EXTRA_ARGS="--max-update 50" tupe-finetune CoLA 2e-5 1   # quick check

Output: RUNS/TASK/lr{LR}_seed{SEED}/ with train.log (the fairseq log), command.txt and result.json (unrounded
scores at the best validation, the format tupe-collect reads; docs/glue_protocol.md §8). The run is made
in RUNS/.partial/TASK/lr{LR}_seed{SEED}/ and renamed when complete. LR and SEED name it by value: a new folder
takes their short spelling (lr1e-3_seed1 for 0.001), and a finished one spelt otherwise with the same values
(lr0.001_seed1) is the same run. result.json records the run's inputs (the
checkpoint's and the binaries' fingerprints, every setting that changes the result): a finished run is skipped
when they match and refused (exit 2, naming what differs) when they do not; an incomplete one is redone from
scratch, and one whose result.json cannot be read (empty, corrupt) is moved to RUNS/.unreadable/ and redone.
The logic is tupe_glue/finetune.py.

Usage: [NAME=value ...] finetune.sh TASK LR SEED
TASK: CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE (WNLI), or a custom task binarized by tupe_preprocess.glue_binarize

Environment (default, meaning):
"""


def usage() -> str:
    return USAGE + tunables.usage_rows(FinetuneConfig.tunables())


def main(argv: Optional[Sequence[str]] = None, environ: Mapping[str, str] = os.environ) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(usage())
        return 0
    if len(args) != 3:
        sys.stderr.write(usage())
        return 2
    try:
        tunables.check_names(FinetuneConfig.names(), environ, PROG, others=FinetuneConfig.others())
        task, lr, seed = args
        finetune(read(environ), task, *run_values(lr, seed), environ=environ)
    except UsageError as e:
        say_to_stderr(f"error: {e}")
        return 2
    except (RunFailed, ValueError, OSError) as e:
        say_to_stderr(f"error: {message(e)}")
        return getattr(e, "status", 1)
    return 0


def cli() -> None:
    """The console script ``tupe-finetune``, and ``python -m`` (``finetune.sh``): :data:`PROG` names which."""
    exit_main(main, PROG, RESUME_RUNS)


if __name__ == "__main__":
    cli()
