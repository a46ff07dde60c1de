"""The study's stages, declared once: ``STAGES`` is the table that ``--list``, ``--part``, ``--slurm`` and
the full run iterate over. A stage is its name, its parts (argument tuples), when a part is done (its output
exists, so a rerun skips it) and how a part runs. Adding a stage is one function set and one table row.

    prep      C4-format text -> sentencepiece + shards; the tasks binarized with that vocabulary; held-out lines
    sweep     with LR_GRID: every MLM model x LR x SWEEP_SEEDS (tupe_study.sweep) -> OUT/sweep/V/lr{LR}/seedS/
    pretrain  every variant x objective x its seeds (train_scripts/pretrain.sh), at the sweep's declared LR when
              there is a sweep -> OUT/pretrain/V/seedS/
    locality  position-only and real attention maps (tupe-locality)     -> OUT/locality/V/seedS.csv
    longer    validation MLM loss at T, 2T, 4T (tupe_study.longer_inputs; MLM models only) -> OUT/longer/V/seedS.json;
              a RoPE model also with each of ROPE_SCALINGS -> OUT/longer/V/seedS.rope-{SCALING}.json
    finetune  every model x task x LRS x SEEDS (glue/finetune.sh), with its dev predictions
              -> OUT/finetune/V/seedS/TASK/lr{LR}_seed{K}/{result,predictions}.json
    order     each fine-tuned model on its dev set with the word order perturbed (tupe_study.dev_eval) -> order.json
    report    OUT/report.md, study.csv, differences.csv, overview.png (tupe_study.report)
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from tupe_study.plan import Plan
from tupe_study.report_spec import ReportSpec
from tupe_study.runs import PRETRAIN_DONE, pretrain_finished, split_label
from tupe_study.settings import PROG, StudyConfig
from tupe_study.timings import logged_seconds
from tupe_common.errors import UsageError
from tupe_common.io import read_data_path, text_from
from tupe_common.jobs import stderr_say
from tupe_common.lock import LockHeld
from tupe_common.process import call_logged, run_logged
from tupe_common.process import run as process_run
from tupe_common.tunables import Num, child_environ


class PartFailed(Exception):
    """A part that ran and failed (bad data, a failing tool): exit 1; the message names the log."""


note = stderr_say(PROG)  # one write per line: lines of parallel lanes do not interleave


def tail(path: str, n: int = 20) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-n:])


def child_env(child: Iterable[str] = (), **more: object) -> dict:
    """The environment of a command the study starts: this one without the study's settings that the command does
    not declare (``child``: its settings' names; tupe_common.tunables.child_environ), and ``more``."""
    env = child_environ(os.environ, StudyConfig.names(), child)
    env.setdefault("PYTHON", sys.executable)
    env.update({k: str(v) for k, v in more.items()})
    return env


# ---- prep ---------------------------------------------------------------------------------------------------


def spm_dir(plan: Plan) -> str:
    return plan.path("c4", "spm")


def tasks_bin(plan: Plan) -> str:
    return plan.path("tasks-bin")


def heldout(plan: Plan) -> str:
    return plan.path("locality", "heldout.txt")


def prep_done(plan: Plan) -> bool:
    return (os.path.isfile(plan.path("c4", "data-bin", "data_path.txt")) and os.path.isfile(heldout(plan))
            and all(os.path.isdir(os.path.join(tasks_bin(plan), f"{t}-bin")) for t in plan.tasks))


def run_prep(plan: Plan) -> None:
    c = plan.config
    if not c.C4_DIR:
        raise PartFailed("C4_DIR is required: C4-format files (see python -m tupe_preprocess.text_to_c4)")
    # TOKENS_PER_SAMPLE: the binarizer splits lines longer than one pre-training block (fairseq would drop them)
    from tupe_preprocess.c4 import pipeline

    env = child_env(pipeline.config_class().names(), OUT_DIR=plan.path("c4"), **{name: c.text(name) for name in (
        "VOCAB_SIZE", "MAX_SHARDS", "MAX_DOCS", "TOKENS_PER_SAMPLE")}, JOBS=c.text("PREP_JOBS"))
    try:
        failed = pipeline.run(env, c.C4_DIR, say=note, prog="study.sh prep")
    except UsageError as e:
        raise PartFailed(f"the C4 preprocessing refused its settings: {e}") from e
    if failed:
        raise PartFailed("the C4 preprocessing failed (messages above)")
    if plan.tasks:
        cmd = [sys.executable, "-m", "tupe_preprocess.glue_binarize", "--glue-dir", c.TASKS_DIR, "--tasks",
               ",".join(plan.tasks), "--spm-model", os.path.join(spm_dir(plan), "spm.model"), "--dict",
               os.path.join(spm_dir(plan), "dict.txt"), "--out-dir", tasks_bin(plan)]
        if process_run(cmd, env=child_env()):
            raise PartFailed("binarizing the tasks failed (messages above)")
    if not os.path.isfile(heldout(plan)):
        write_heldout(plan)
    from tupe_study.valid_se import VALID_BLOCKS, write_valid_blocks

    if not os.path.isfile(plan.path("c4", VALID_BLOCKS)):  # the split pre-training validates on, counted
        write_valid_blocks(plan.path("c4"), read_data_path(plan.path("c4", "data-bin"))[0], c.TOKENS_PER_SAMPLE)


def write_heldout(plan: Plan) -> None:
    """The first LOC_SENTENCES non-empty lines of the extracted validation text."""
    import glob
    import gzip

    files = sorted(glob.glob(plan.path("c4", "text", "c4-validation.*")))
    if not files:
        raise PartFailed(f"no validation text {plan.path('c4', 'text', 'c4-validation.*')} for the held-out lines")
    want, lines = plan.config.LOC_SENTENCES, []
    for path in files:
        with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
            lines += [line for line in f if line.strip()][: want - len(lines)]
        if len(lines) >= want:
            break
    if not lines:
        raise PartFailed(f"the validation text in {plan.path('c4', 'text')} has no non-empty line")
    from tupe_common.io import write_text

    os.makedirs(os.path.dirname(heldout(plan)), exist_ok=True)
    write_text(heldout(plan), "".join(lines))


# ---- pretrain -----------------------------------------------------------------------------------------------


NEVER_EPOCHS = 1_000_000  # an epoch interval no pre-training reaches


# A part's first argument is the model's label (plan.Entry.label): its variant, or V+electra for ELECTRA.


def pretrain_done(plan: Plan, label: str, seed: int) -> bool:
    return pretrain_finished(plan.pretrain_dir(label, seed))


def run_pretrain(plan: Plan, label: str, seed: int) -> int:
    """Pre-trains one confirmation model (at its LR: the sweep's declared choice, or LR), resuming from the
    checkpoint of an earlier sitting; returns that sitting's seconds (from the log), which the part's time includes
    (tupe_study.timings)."""
    lr = declare_choice(plan).get(label, plan.config.LR) if plan.config.LR_GRID else plan.config.LR  # ELECTRA: LR
    return pretrain_into(plan, label, seed, plan.pretrain_dir(label, seed), lr)


def pretrain_into(plan: Plan, label: str, seed: int, out: str, lr: float, divergence_ends: bool = False) -> int:
    """Pre-trains ``label`` with ``seed`` at peak LR ``lr`` into ``out`` (a confirmation or a sweep run).
    ``divergence_ends`` (the sweep): a run that fairseq stops on a loss or gradient that is not finite has ended, as
    a diverged run (``pretrain.done`` says so; its final loss is missing, the worst at its LR by the declared rule)."""
    c = plan.config
    name, objective = split_label(label)
    if not prep_done(plan):
        raise PartFailed("prep is not finished: run --part prep first")
    interval = plan.valid_interval
    # json lines: what the report reads; no validation or save at an epoch's end (fairseq_cli/train.py
    # validate_and_save: epoch % --validate-interval / --save-interval), only every `interval` updates and the last
    valid_args = (f"--log-format json --validate-interval-updates {interval} --validate-interval {NEVER_EPOCHS} "
                  f"--save-interval {NEVER_EPOCHS}")
    if c.VALID_STEPS > 0:
        valid_args += f" --max-valid-steps {c.VALID_STEPS}"
    data = ":".join(read_data_path(plan.path("c4", "data-bin")))
    note(f"pre-training {label} seed {seed} ({objective}, {c.TOTAL_UPDATES} updates, LR {lr}, {plan.max_positions} "
         f"positions) -> {out} (log: {out}/train.log)")
    # fairseq validates (and saves) every VALID_INTERVAL updates; the positions leave room for the longer inputs
    from tupe_preprocess.c4_data import DataError
    from tupe_pretrain import pretrain

    settings = dict(  # the study's settings of the same name are pretrain.sh's
        {name: getattr(c, name) for name in ("GENERATOR_SIZE_DIVISOR", "DISC_WEIGHT", "SIZE", "GPUS",
                                             "SENTENCES_PER_UPDATE", "MAX_SENTENCES", "TOKENS_PER_SAMPLE",
                                             "TOTAL_UPDATES", "WARMUP", "NUM_WORKERS")},
        LR=lr, DATA=data, VARIANT=name, OBJECTIVE=objective, SAVE_DIR=out, TENSORBOARD_DIR=os.path.join(out, "tensorboard"),
        MAX_POSITIONS=plan.max_positions, SEED=seed, SAVE_INTERVAL_UPDATES=interval, KEEP_INTERVAL_UPDATES=1,
        KEEP_PATTERN=-1, LOG_INTERVAL=max(interval // 2, 1), EXTRA_ARGS=" ".join([*c.MODEL_ARGS.fairseq_args(), valid_args]))
    log = os.path.join(out, "train.log")
    earlier = logged_seconds(log)  # before this sitting's lines
    os.makedirs(out, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:  # what pretrain.sh says goes to the log, as its output did
        def say(line: str) -> None:
            f.write(f"{pretrain.PROG}: {line}\n")

        try:
            run, cmd = pretrain.prepare(pretrain.PretrainConfig(**settings), os.environ, say=say)
        except LockHeld:  # another run pre-trains into `out`: refused as pretrain.sh refuses it (exit 2)
            raise
        except (UsageError, DataError) as e:
            raise PartFailed(f"pre-training {label} seed {seed}: {e}") from None
        except pretrain.RecordRefused:
            raise PartFailed(f"pre-training {label} seed {seed}: {out} cannot be resumed (the reason above)") from None
    env = child_env(**pretrain.launch_environment(run))
    if run.launcher == "torchrun":  # as pretrain.sh runs it: a stop an exit status, a failed rank one line
        from tupe_pretrain.torchrun import wrapped

        cmd, env = wrapped(cmd, env)
    with run.lock:  # SAVE_DIR's, as pretrain.sh's (pretrain.save_dir_lock): held by this process until the end
        begin = os.path.getsize(log)  # this sitting's lines start here (the log keeps every sitting's)
        ended = ""
        if run_logged(cmd, log, env, append=True):
            from tupe_tools.errors import diverged, fairseq_error

            text = text_from(log, begin, most=1 << 18)
            ended = diverged(text) if divergence_ends else ""
            if not ended:
                reason = fairseq_error(text)
                raise PartFailed(f"pre-training {label} seed {seed} failed{': ' + reason if reason else ''}; log {log}")
            note(f"pre-training {label} seed {seed} at LR {lr} diverged (FloatingPointError: {ended}): it counts as "
                 "the worst run at its LR")
        from datetime import datetime, timezone

        with open(os.path.join(out, PRETRAIN_DONE), "w", encoding="utf-8") as f:
            f.write(datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") + "\n")
            f.write(f"diverged: {ended}\n" if ended else "")
    return earlier


# ---- sweep: each MLM model at every LR of LR_GRID on SWEEP_SEEDS (tupe_study.sweep) ------------------------------------


def sweep_done(plan: Plan, label: str, lr: str, seed: int) -> bool:
    from tupe_study.sweep import sweep_dir

    return pretrain_finished(sweep_dir(plan.out, label, float(lr), seed))


def run_sweep(plan: Plan, label: str, lr: str, seed: int) -> int:
    from tupe_study.sweep import sweep_dir

    return pretrain_into(plan, label, seed, sweep_dir(plan.out, label, float(lr), seed), float(lr), divergence_ends=True)


def updates_to_target(plan: Plan, chosen: Dict[str, float], sweep: List) -> Optional[float]:
    """The resolved target of an ``updates_to@halfway:A:B`` endpoint: halfway from the unigram baseline to B's mean
    final loss over the sweep seeds at B's chosen LR (tupe_study.endpoints.halfway_target); None without such an endpoint."""
    rules = [e for e in plan.report_spec.endpoints if e.target == "halfway"]
    if not rules:
        return None
    from tupe_study.endpoints import halfway_target
    from tupe_study.report import unigram_baseline

    b = next(c for c in sweep if c.label == rules[0].b)
    return halfway_target(unigram_baseline(plan.out), list(b.finals[chosen[b.label]].values()))


def read_second_declaration(plan: Plan) -> Dict[str, str]:
    """The sweep's declaration in settings.env (CHOSEN_LRS, UPDATES_TO_TARGET); empty before it is written."""
    from tupe_study.settings import read_recorded
    from tupe_study.sweep import read_declared

    return read_declared(read_recorded(plan.out))


def declare_choice(plan: Plan) -> Dict[str, float]:
    """Each MLM model's LR from the finished sweep, declared in settings.env (the second declaration: the chosen LRs
    and the resolved updates_to target, dated, with the commit) by the first confirmation pre-training; a later one
    checks that the sweep still gives the declared choice (UsageError naming both otherwise)."""
    from tupe_study import sweep
    from tupe_study.timings import code_version
    from tupe_common.io import write_text

    state = plan.sweep_choices()
    todo = [p for p in sweep.parts(state, list(plan.config.SWEEP_SEEDS)) if not sweep_done(plan, *p)]
    if todo:
        raise PartFailed(f"the LR sweep is not finished ({len(todo)} run(s) to do, e.g. sweep {' '.join(map(str, todo[0]))}"
                         "): a confirmation pre-training starts once every model's LR is chosen (run the sweep stage "
                         "first; study.sh --list shows its parts)")
    chosen = {c.label: c.chosen for c in state}
    target = updates_to_target(plan, chosen, state)
    path = plan.path("settings.env")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    recorded = read_second_declaration(plan)
    if not recorded:
        write_text(path, text + ("" if text.endswith("\n") else "\n")
                   + sweep.second_declaration(chosen, target, code_version()))
        note(f"second declaration in {path}: CHOSEN_LRS={sweep.chosen_text(chosen)}"
             + ("" if target is None else f", UPDATES_TO_TARGET={target:.4f}"))
        return chosen
    diff = sweep.differences(recorded, chosen, target)
    if diff:
        from tupe_study.settings import refusal

        raise refusal(path, diff, "what the LR sweep gives now", "the confirmation runs at the LRs declared before it "
                      "started: restore the sweep's runs as they were, or start a new study (another OUT)")
    return sweep.parse_chosen(recorded["CHOSEN_LRS"])


def checkpoint_of(plan: Plan, label: str, seed: int) -> str:
    if not pretrain_done(plan, label, seed):
        raise PartFailed(f"pre-training {label} seed {seed} is not finished ({plan.pretrain_dir(label, seed)}): "
                         "run it first")
    return os.path.join(plan.pretrain_dir(label, seed), "checkpoint_last.pt")


# ---- locality -----------------------------------------------------------------------------------------------


def locality_csv(plan: Plan, label: str, seed: int) -> str:
    return plan.path("locality", label, f"seed{seed}.csv")


def locality_done(plan: Plan, label: str, seed: int) -> bool:
    return os.path.isfile(locality_csv(plan, label, seed))


def run_locality(plan: Plan, label: str, seed: int) -> None:
    ckpt, csv = checkpoint_of(plan, label, seed), locality_csv(plan, label, seed)
    note(f"locality/symmetry of {label} seed {seed} -> {csv}")
    argv = [ckpt, "--length", plan.config.text("LOC_LENGTH"), "--text", heldout(plan), "--spm-model",
            os.path.join(spm_dir(plan), "spm.model"), "--data", spm_dir(plan), "--max-sentences",
            plan.config.text("LOC_SENTENCES"), "--out-csv", csv]
    log = csv[:-len(".csv")] + ".log"
    from tupe_tools.commands import dispatch

    # the command tupe-locality in this process (one import of torch and fairseq fewer), its output in the log
    if call_logged(lambda: dispatch("tupe-locality", argv), log):
        sys.stderr.write(tail(log))
        raise PartFailed(f"tupe-locality failed; log {log}")


# ---- longer inputs ------------------------------------------------------------------------------------------


def longer_json(plan: Plan, label: str, seed: int) -> str:
    return plan.path("longer", label, f"seed{seed}.json")


def longer_parts(plan: Plan) -> List[Tuple]:
    """The MLM models: an ELECTRA discriminator has no MLM head (tupe_study.longer_inputs.NOT_FOR_ELECTRA)."""
    if len(plan.length_factors) < 2:
        return []
    return [(label, s) for label, s in plan.pretrain_parts() if split_label(label)[1] == "mlm"]


def rope_scalings(plan: Plan, label: str) -> List[str]:
    """The RoPE scalings ``label`` is measured with beside its plain record: ROPE_SCALINGS (each once) for a RoPE
    model trained without a scaling (tupe_study.longer_inputs.rescalable), none for any other."""
    name, objective = split_label(label)
    if not plan.config.ROPE_SCALINGS or objective != "mlm":  # no registry (torch, 2 s) for a --list without them
        return []
    from tupe_study.longer_inputs import rescalable
    from tupe_core.registry import VARIANTS

    variant = VARIANTS.get(name.replace("-", "_"))
    if objective != "mlm" or variant is None or not rescalable(variant):
        return []
    return list(dict.fromkeys(plan.config.ROPE_SCALINGS))


def longer_done(plan: Plan, label: str, seed: int) -> bool:
    from tupe_study.longer_inputs import scaled_json

    out = longer_json(plan, label, seed)
    return os.path.isfile(out) and all(os.path.isfile(scaled_json(out, s)) for s in rope_scalings(plan, label))


def run_longer(plan: Plan, label: str, seed: int) -> None:
    """The plain record, then one per RoPE scaling (``rope_scalings``); a record already written is kept, so a rerun
    after a stop measures only what is missing."""
    from tupe_study.longer_inputs import measure, scaled_json

    ckpt, out = checkpoint_of(plan, label, seed), longer_json(plan, label, seed)
    data = read_data_path(plan.path("c4", "data-bin"))[0]  # fairseq reads the valid split from the first shard
    T = plan.config.TOKENS_PER_SAMPLE
    lengths = [T * f for f in plan.length_factors]
    if not os.path.isfile(out):
        note(f"longer inputs of {label} seed {seed}: MLM loss at {', '.join(f'{f}T' for f in plan.length_factors)} "
             f"-> {out}")
        measure(ckpt, data, lengths, out)
    for scaling in rope_scalings(plan, label):
        scaled = scaled_json(out, scaling)
        if os.path.isfile(scaled):
            continue
        note(f"longer inputs of {label} seed {seed} with RoPE scaling {scaling} (s = L/T beyond T) -> {scaled}")
        measure(ckpt, data, lengths, scaled, rope_scaling=scaling, write_blocks=False)


# ---- finetune and order -------------------------------------------------------------------------------------


def finetune_done(plan: Plan, *part) -> bool:
    d = plan.finetune_dir(*part)
    return os.path.isfile(os.path.join(d, "result.json")) and os.path.isfile(os.path.join(d, "predictions.json"))


def finetuned_checkpoint(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints", "checkpoint_best.pt")


def predictor(plan: Plan, task: str, model: str):
    """The fine-tuned ``model`` loaded for its dev predictions and word-order sets."""
    from tupe_study.dev_eval import Predictor

    return Predictor(model, os.path.join(tasks_bin(plan), f"{task}-bin"), os.path.join(spm_dir(plan), "spm.model"))


def run_finetune(plan: Plan, label: str, seed: int, task: str, lr: str, k: int) -> None:
    from tupe_study.dev_eval import write_order, write_predictions

    c, ckpt = plan.config, checkpoint_of(plan, label, seed)
    runs = plan.path("finetune", label, f"seed{seed}")
    run_dir = plan.finetune_dir(label, seed, task, lr, k)
    log = os.path.join(runs, ".logs", f"{task}_{os.path.basename(run_dir)}.out")
    # the size flags are not in tupe-checkpoint-info --fairseq-args: pass them as at pre-training; the best
    # checkpoint is kept for its dev predictions and word-order sets, then removed
    from tupe_glue import finetune

    settings = dict(  # the study's settings of the same name are finetune.sh's
        CHECKPOINT=ckpt, GLUE_BIN=tasks_bin(plan), RUNS=runs, EPOCHS=c.EPOCHS, SENTENCES_PER_BATCH=c.SENTENCES_PER_BATCH,
        QUIET=True, NUM_WORKERS=c.NUM_WORKERS, KEEP_CHECKPOINTS=True, EXTRA_ARGS=" ".join([*c.MODEL_ARGS.fairseq_args(), c.EXTRA_ARGS]))
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:  # what finetune.sh says: this run's notes (fairseq's: train.log)
        def say(line: str) -> None:
            f.write(f"{finetune.PROG}: {line}\n")

        try:
            finetune.finetune(finetune.FinetuneConfig(**settings), task, Num(lr), k, say=say, environ=child_env())
        except (UsageError, ValueError, OSError, finetune.RunFailed) as e:
            f.flush()
            sys.stderr.write(tail(log))
            raise PartFailed(f"fine-tuning failed: {e}; log {log}") from None
    best = os.path.join(run_dir, "best.txt")
    if os.path.isfile(best):
        note(f"{task} {os.path.basename(run_dir)}: {open(best, encoding='utf-8').read().strip()}")
    model = finetuned_checkpoint(run_dir)
    if not os.path.isfile(model):
        raise PartFailed(f"{run_dir}: finished without its checkpoint (an older run?): its dev predictions cannot "
                         "be written; move the folder away to redo the run")
    loaded = predictor(plan, task, model)
    write_predictions(loaded, task, c.TASKS_DIR, os.path.join(run_dir, "predictions.json"))
    if plan.order_windows:  # the order stage's part, with the model already loaded (a process start saved)
        write_order(loaded, task, c.TASKS_DIR, plan.order_windows, os.path.join(run_dir, "order.json"))
    shutil.rmtree(os.path.dirname(model))


def order_done(plan: Plan, *part) -> bool:
    return os.path.isfile(os.path.join(plan.finetune_dir(*part), "order.json"))


def order_parts(plan: Plan) -> List[Tuple]:
    return plan.finetune_parts() if plan.order_windows else []


def run_order(plan: Plan, label: str, seed: int, task: str, lr: str, k: int) -> None:
    from tupe_study.dev_eval import write_order

    run_dir = plan.finetune_dir(label, seed, task, lr, k)
    if not finetune_done(plan, label, seed, task, lr, k):
        raise PartFailed(f"fine-tuning {label} seed {seed} {task} lr {lr} seed {k} is not finished: run it first")
    model = finetuned_checkpoint(run_dir)
    if not os.path.isfile(model):
        raise PartFailed(f"{model}: the fine-tuned checkpoint is gone; move {run_dir} away to redo the run")
    write_order(predictor(plan, task, model), task, plan.config.TASKS_DIR, plan.order_windows,
                os.path.join(run_dir, "order.json"))
    shutil.rmtree(os.path.dirname(model))  # measured: the checkpoint is not needed any more


# ---- report -------------------------------------------------------------------------------------------------


def report_argv(plan: Plan) -> List[str]:
    """The arguments of ``python -m tupe_study.report`` after the study's folder (tupe_study.archive records them)."""
    c = plan.config
    argv = ["--variants", plan.variants_text(), "--total-updates", c.text("TOTAL_UPDATES"),
            "--valid-interval", str(plan.valid_interval),
            "--warmup", c.text("WARMUP"), "--min-gap-bits", c.text("MIN_GAP_BITS"), "--endpoints", c.ENDPOINTS,
            "--equivalence-bits", c.text("EQUIVALENCE_BITS"),
            "--title", f"Study: PRESET={c.PRESET}, {c.TOTAL_UPDATES} updates, {plan.models_text()}"]
    declared = read_second_declaration(plan)
    if declared.get("UPDATES_TO_TARGET"):  # an updates_to@halfway endpoint's target, as the sweep declared it
        argv += ["--updates-to-target", declared["UPDATES_TO_TARGET"]]
    if plan.tasks and plan.lrs and plan.seeds:  # the report names every model seed that lacks some run
        argv += ["--finetune-grid", ":".join(",".join(map(str, x)) for x in (plan.tasks, plan.lrs, plan.seeds))]
    elif not plan.tasks:  # TASKS=none: a pre-training study, no fine-tuning run is missing
        argv += ["--finetune-grid", "none"]
    return argv


def report_spec(plan: Plan) -> ReportSpec:
    """The plan's report specification with the target the sweep resolved for updates_to@halfway (settings.env's
    UPDATES_TO_TARGET, the second declaration; none before the sweep wrote it)."""
    target = read_second_declaration(plan).get("UPDATES_TO_TARGET")
    return plan.report_spec.resolved(float(target) if target else None)


def run_report(plan: Plan) -> None:
    from tupe_study.report import main as report

    if report([plan.out] + report_argv(plan), report_spec(plan)):
        raise PartFailed("the report failed")


# ---- the table ----------------------------------------------------------------------------------------------



def part_label(part: Tuple) -> str:
    return " ".join(map(str, part)) or "all"


@dataclass(frozen=True)
class Stage:
    name: str
    parts: Callable[[Plan], List[Tuple]]
    done: Callable[..., bool]  # done(plan, *part)
    run: Callable[..., Optional[int]]  # run(plan, *part): None, or the seconds of earlier sittings it resumed
    after: str = ""  # the stage whose parts this one needs (SLURM: --dependency=afterok)
    always: bool = False  # rerun even when done (the report is rewritten from what is finished)
    needs_all: str = ""  # a stage every part of which must have ended first (the confirmation needs the whole sweep)


STAGES: Tuple[Stage, ...] = (
    Stage("prep", lambda plan: [()], prep_done, run_prep),
    Stage("sweep", Plan.sweep_parts, sweep_done, run_sweep, after="prep"),
    Stage("pretrain", Plan.pretrain_parts, pretrain_done, run_pretrain, after="prep", needs_all="sweep"),
    Stage("locality", Plan.pretrain_parts, locality_done, run_locality, after="pretrain"),
    Stage("longer", longer_parts, longer_done, run_longer, after="pretrain"),
    Stage("finetune", Plan.finetune_parts, finetune_done, run_finetune, after="pretrain"),
    Stage("order", order_parts, order_done, run_order, after="finetune"),
    Stage("report", lambda plan: [()], lambda plan: os.path.isfile(plan.path("report.md")), run_report, always=True),
)
BY_NAME = {s.name: s for s in STAGES}


def needs_done(plan: Plan, stage: Stage) -> Callable[[Tuple], bool]:
    """For a part of ``stage``: whether the part of ``stage.after`` that it needs has ended, the one whose
    arguments begin its own (a model's locality, longer inputs and fine-tuning need its pre-training; a run's
    word order needs the run)."""
    if stage.needs_all:  # the whole stage, as it stands when asked (a sweep's widened LRs appear as it runs)
        whole = BY_NAME[stage.needs_all]
        return lambda part: all(whole.done(plan, *p) for p in whole.parts(plan))
    before = BY_NAME.get(stage.after)
    first = before.parts(plan)[:1] if before else []
    if not before or not first:
        return lambda part: True
    width = len(first[0])
    return lambda part: before.done(plan, *part[:width])
