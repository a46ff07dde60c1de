"""``tupe-study`` (``python -m tupe_study``; ``train_scripts/study.sh`` from a checkout): the study, or one part of it.

    study.sh                      every part not yet done, in stage order (a failed part is counted, the
                                  others go on; rerun to retry it), then the report
    study.sh --list               every part: stage, index, arguments, done/todo
    study.sh --part STAGE [INDEX] one part (what train_scripts/study.sbatch runs on SLURM)
    study.sh --slurm              the sbatch commands for the parts still to do, with their dependencies
    study.sh --report             only the report, from what is finished
    study.sh --archive DEST       the files the report reads (logs' validation lines, fine-tuning results,
                                  locality, timings, settings; no checkpoint or data) into the new folder DEST,
                                  small enough to publish, with a manifest of their SHA-256; `python -m
                                  tupe_study.archive DEST` verifies it and renders it again
    study.sh --plan PILOT         the seeds each declared comparison (ENDPOINTS) needs for 80% and 90% power,
                                  from a pilot study's folder or study.csv, and the pre-training time (tupe_study.power)
    study.sh --lanes N            as study.sh, but up to N parts at once, each a process with cores/N
                                  threads (on 2 CPU cores: 2 lanes of 1 thread pre-trained 1.8x the models
                                  per hour of one 2-thread process); a free lane takes the first part, in
                                  stage order, whose model or run has ended (no lane waits for a stage)
    study.sh [--lanes N] --stages S1,S2
                                  as study.sh [--lanes N], but only the parts of these stages, then the report
                                  (tupe_study/gpu_schedule.py: the stages after pre-training it chose)

Exit status: 0 done; 1 a part failed (the message names its log); 2 a usage error (nothing was changed).
"""
from __future__ import annotations

import contextlib
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from typing import List, Optional, Sequence, Tuple

from tupe_study.plan import Plan, check_settings
from tupe_study.settings import (FIELDS, PROG, StudyConfig, UsageError, defaults)
from tupe_study.locks import hold_part, hold_study
from tupe_study.stages import BY_NAME, STAGES, PartFailed, Stage, declare_choice, needs_done, note, part_label
from tupe_study.timings import code_version, timing_line
from tupe_common.errors import exit_main
from tupe_common.jobs import Job, run_jobs, slurm_ranges, visible_gpus
from tupe_common.lock import LockHeld
from tupe_common.checkpoint_file import CheckpointError

RESUME_PARTS = ("rerun the same command to resume (finished parts are skipped; a pre-training resumes from its "
                "checkpoint_last.pt)")

USAGE = ("Usage: [NAME=value ...] study.sh [--lanes N] [--stages S1,S2] | --list | --slurm | --report | "
         "--part STAGE [INDEX] | --archive DEST | --plan PILOT")


def help_text(environ) -> str:
    lines = [__doc__.split("\n\n")[0].replace("``tupe-study`` (``python -m tupe_study``; ``train_scripts/study.sh`` from a checkout)", "study.sh"),
             "", USAGE, f"STAGE: {', '.join(s.name for s in STAGES)} (INDEX as in --list)", "",
             f"Environment (default from PRESET={environ.get('PRESET') or 'cpu-small'}, meaning):"]
    for name, default in defaults(environ).items():
        lines.append(f"  {name:<22} {default or chr(34) * 2:<20} {FIELDS[name].metadata['help']}")
    return "\n".join(lines)


def machine() -> str:
    """For the report's "Run" section: where a part ran."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    text = f"{platform.node()}, {os.cpu_count()} cores, {cpu}"
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
        text += f", GPU {sys.modules['torch'].cuda.get_device_name(0)}"
    return text


def check_names(environ) -> None:
    """A misspelt setting (FT_SEED, VARIANT for VARIANTS) refused before any work; the C4 pipeline's settings pass
    through (the prep stage hands them on)."""
    from tupe_common.tunables import check_names as check

    def c4_settings():
        from tupe_preprocess.c4 import pipeline

        return pipeline.config_class().names()

    check(StudyConfig.names(), environ, PROG, prefixes=("FT_",), passed_on=c4_settings,
          others=StudyConfig.others())


def check_gpus(gpus: Optional[int]) -> None:
    """GPUS above the CUDA devices this machine sees is refused before any work (the pre-training would fail after
    the C4 preparation, with pretrain.sh's line); ``--slurm`` prints jobs for other nodes and is not checked."""
    if not gpus:  # auto or 0
        return
    from tupe_common.jobs import cuda_device_count

    visible = cuda_device_count()
    if gpus > visible:
        raise UsageError(f"GPUS={gpus} but this machine sees {visible} CUDA device(s): set GPUS=auto, or run on a "
                         "node with the GPUs (study.sh --slurm prints the jobs for one)")


def check_reportable(plan: Plan) -> None:
    """``--report`` needs a study that has run: OUT/settings.env (else UsageError, nothing written) and at least
    one finished pre-training (else PartFailed: a report of nothing is not "finished")."""
    from tupe_study.stages import pretrain_done
    from tupe_common.io import need

    need(plan.out, "folder")  # missing, or a file: one line naming it, exit 1
    if not os.path.isfile(plan.path("settings.env")):
        raise UsageError(f"{plan.out} holds no study (no settings.env): run study.sh with this OUT first, "
                         "or set OUT to the study's folder")
    runs = plan.pretrain_parts()
    if not any(pretrain_done(plan, label, seed) for label, seed in runs):
        raise PartFailed(f"nothing to report: none of the {len(runs)} pre-training run(s) in {plan.out} has "
                         "finished (study.sh --list shows each part)")


def run_part(plan: Plan, stage: Stage, part: Tuple, skip_done: bool = True) -> None:
    """One part, holding the lock of the folder it writes (tupe_study.locks; the report takes none)."""
    lock = None if stage.always else hold_part(plan, stage.name, part)  # LockHeld: another run is writing it
    try:
        run_part_locked(plan, stage, part, skip_done)
    finally:
        if lock is not None:
            lock.release()


def run_part_locked(plan: Plan, stage: Stage, part: Tuple, skip_done: bool) -> None:
    if skip_done and not stage.always and stage.done(plan, *part):
        note(f"{stage.name} {part_label(part)}: done, skipping")
        return
    start, code = time.monotonic(), "" if stage.always else code_version()  # the code as the part starts
    try:
        earlier = stage.run(plan, *part) or 0  # a resumed pre-training: its earlier sittings' seconds
    except CheckpointError as e:  # a checkpoint cut short by a kill, or of the wrong kind: the part fails, named
        raise PartFailed(str(e)) from e
    seconds = round(time.monotonic() - start) + earlier
    note(f"{stage.name} {part_label(part)}: finished in {seconds} s"
         + (f" ({earlier} s of them in earlier sittings, from its log)" if earlier else ""))
    if not stage.always:
        with open(plan.path("timings.tsv"), "a", encoding="utf-8") as f:
            f.write(timing_line(stage.name, part_label(part), seconds, datetime.now(timezone.utc), machine(), code))


def list_parts(plan: Plan) -> None:
    for stage in STAGES:
        for i, part in enumerate(stage.parts(plan)):
            print(f"{stage.name}\t{i}\t{part_label(part)}\t{'done' if stage.done(plan, *part) else 'todo'}")


def slurm(plan: Plan) -> None:
    print("# Submit from the repository root, in one shell: these settings are passed on to every job by sbatch")
    for name in FIELDS:
        value = plan.config.text(name) or ("none" if name in ("MODEL_ARGS", "TASKS") else "")  # empty: the default
        print(f"export {name}={shlex.quote(value)}")
    print("export VENV=${VENV:-$PWD/.venv}")
    job_of = {}
    for stage in STAGES[:-1]:
        todo = [i for i, part in enumerate(stage.parts(plan)) if not stage.done(plan, *part)]
        if not todo:
            continue
        after = stage.needs_all if stage.needs_all in job_of else stage.after
        dep = f"--dependency=afterok:${after} " if after in job_of else ""
        array = "" if stage.name == "prep" else f"--array={slurm_ranges(todo)} "
        print(f"{stage.name}=$(sbatch --parsable {dep}{array}train_scripts/study.sbatch {stage.name})")
        job_of[stage.name] = True
    after = ":".join(f"${name}" for name in job_of)
    print(f"sbatch {'--dependency=afterany:' + after + ' ' if after else ''}train_scripts/study.sbatch report")


def run_stages_in_lanes(plan: Plan, stages: Sequence[Stage], lanes: int) -> List[str]:
    """The parts not yet done of ``stages``, as ``python -m tupe_study --part`` processes in ``lanes`` lanes (their
    output in OUT/lanes/STAGE-INDEX.log), each started once the part it needs has ended, lane k on GPU k % n of
    the n visible GPUs (a pre-training in a lane then uses its one GPU); returns the failed parts."""
    jobs = []
    for stage in stages:
        needs = needs_done(plan, stage)
        for i, part in enumerate(stage.parts(plan)):
            if not stage.done(plan, *part):
                jobs.append(Job(f"{stage.name} {part_label(part)}", [sys.executable, "-m", "tupe_study", "--part", stage.name,
                                                                     str(i)],
                                plan.path("lanes", f"{stage.name}-{i}.log"), stage.name,
                                ready=lambda needs=needs, part=part: needs(part),
                                done=lambda stage=stage, part=part: stage.done(plan, *part)))
    return run_jobs(jobs, lanes, os.environ, say=note, gpus=visible_gpus(os.environ)).failed


def run_all(plan: Plan, lanes: int = 1, only: Optional[Sequence[str]] = None) -> int:
    """Every stage's parts not yet done (``only``: those stages' parts), then the report; exit status."""
    failed: List[str] = []
    stages = [stage for stage in STAGES[:-1] if only is None or stage.name in only]
    # the sweep before the lanes of the rest: the confirmation needs all of it, and its widened LRs appear only
    # once the declared grid's runs have ended, so it runs in rounds until no part is left (or a round fails)
    rounds = [stage for stage in stages if stage.name == "prep" or stage.name == "sweep" or lanes == 1]
    in_lanes = [stage for stage in stages if stage not in rounds]
    for stage in rounds:
        ran: List[Tuple] = []
        while True:  # one pass; the sweep again while new parts (its widened LRs) appear
            parts = [part for part in stage.parts(plan) if part not in ran]
            if not parts:
                break
            ran += parts
            before = len(failed)
            if lanes > 1 and stage.name != "prep":
                failed += run_stages_in_lanes(plan, [stage], lanes)
            else:
                for part in parts:
                    try:
                        run_part(plan, stage, part)  # a done part: noted and skipped
                    except (PartFailed, LockHeld) as e:  # LockHeld: another run writes the part's folder
                        note(f"error: {e}")
                        failed.append(f"{stage.name} {part_label(part)}")
                        if stage.name == "prep":
                            return 1
            if len(failed) > before or stage.name != "sweep":
                break
        if stage.name == "sweep" and plan.config.LR_GRID and not failed and BY_NAME["pretrain"] in stages:
            declare_choice(plan)  # once, here, before the confirmation's parts (in lanes) read it
    if in_lanes:
        failed += run_stages_in_lanes(plan, in_lanes, lanes)
    run_part(plan, BY_NAME["report"], ())
    if failed:
        note(f"error: {len(failed)} part(s) failed: {'; '.join(failed)}; {RESUME_PARTS}")
        return 1
    note(f"done: {plan.path('report.md')}")
    return 0


def plan_power(pilot: str) -> int:
    """--plan PILOT: the declared comparisons' seeds for 80% / 90% power from the pilot, and the pre-training time.
    It needs ENDPOINTS alone: the models are the endpoints' (VARIANTS' when it is set), and the power with the
    study's seeds is given only when they are declared (PRETRAIN_SEEDS or VARIANTS set), else per seed count.
    Writes nothing (OUT, TASKS are not needed)."""
    from tupe_study.declaration import check_models, parse_declaration
    from tupe_study.plan import parse_variants, registry
    from tupe_study.power import pilot_values, plan_text, pretrain_seconds
    from tupe_study.settings import read
    from tupe_common.numbers import check_once

    if not os.path.exists(pilot):
        raise UsageError(f"--plan {pilot}: no such study folder or study.csv")
    c = read(os.environ)
    endpoints = parse_declaration(c.ENDPOINTS)
    if not endpoints:
        raise UsageError("--plan needs ENDPOINTS: the comparisons to plan for (e.g. "
                         "ENDPOINTS=\"final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a\")")
    known = registry()
    seeds_set = bool(os.environ.get("PRETRAIN_SEEDS") or os.environ.get("VARIANTS"))
    if os.environ.get("PRETRAIN_SEEDS"):
        check_once(f"PRETRAIN_SEEDS='{c.text('PRETRAIN_SEEDS')}'", c.PRETRAIN_SEEDS, "seed")
    if os.environ.get("VARIANTS"):
        variants = parse_variants(c.VARIANTS, c.PRETRAIN_SEEDS, known)
        seeds = {e.name: e.seeds for e in variants}
        models = len(variants) * len(c.OBJECTIVES)
    else:  # the endpoints' models, each with PRETRAIN_SEEDS, or (not declared) with any 2 seeds for the checks
        names = dict.fromkeys(m for e in endpoints for m in (e.a, e.b))
        seeds = {n: tuple(c.PRETRAIN_SEEDS) if seeds_set else (1, 2) for n in names}
        models = 0
    check_models(endpoints, seeds)
    unknown = [n for n in dict.fromkeys(m for e in endpoints for m in (e.a, e.b)) if n not in known]
    if unknown:
        raise UsageError(f"ENDPOINTS: '{unknown[0]}' is not a registered variant; the registered ones, in registry "
                         f"order: {' '.join(known)}")
    used = sorted({m for e in endpoints for m in (e.a, e.b)})
    values, source = pilot_values(pilot, used)
    n_seeds = min(len(set(seeds[e.a]) & set(seeds[e.b])) for e in endpoints) if seeds_set else None
    print(plan_text(endpoints, values, source, pretrain_seconds(pilot), models or len(used), n_seeds), end="")
    return 0


QUOTED = ("ENDPOINTS", "VARIANTS", "PRETRAIN_SEEDS", "EQUIVALENCE_BITS")  # --archive: spelt as settings.env records


def write_archive(plan: Plan, dest: str) -> int:
    """``--archive DEST``: the study's evidence into DEST (tupe_study.archive)."""
    from tupe_study.archive import archive
    from tupe_study.report import unigram_baseline
    from tupe_study.settings import read_recorded
    from tupe_study.stages import report_argv, report_spec

    recorded, given = read_recorded(plan.out), plan.config.texts()
    for name in QUOTED:  # the report quotes and orders by these as given: as recorded, or it would misquote
        if name in recorded and given.get(name, "") != recorded[name]:
            raise UsageError(f"--archive: {name}={given.get(name, '')!r} means what settings.env records, but the report "
                             f"quotes and orders by it as given: set {name}={recorded[name]!r}, as recorded")
    try:
        unigram: Optional[float] = unigram_baseline(plan.out)
    except (OSError, ValueError) as e:  # DEST has no data-bin: its render could not compute it, and would differ
        raise PartFailed(f"archive: the unigram baseline cannot be computed ({e}), and the archive holds no training "
                        "data to compute it from: fix the study's c4/data-bin (data_path.txt), then --archive again") from None
    kept = archive(plan.out, dest, report_argv(plan), unigram, report_spec(plan))
    note(f"archive: wrote {dest} ({', '.join(kept)}); render it again with: python -m tupe_study.archive {dest}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] in (["-h"], ["--help"]):
            print(help_text(os.environ))
            return 0
        check_names(os.environ)
        mode, stage, index, lanes, only, dest = "all", None, 0, 1, None, ""
        if args[:1] == ["--lanes"]:
            if len(args) < 2 or not args[1].isdigit() or int(args[1]) < 1 or args[2:3] not in ([], ["--stages"]):
                raise UsageError(f"--lanes N: a whole number >= 1, then nothing or --stages, not '{' '.join(args[1:])}'")
            lanes, args = int(args[1]), args[2:]
        if args[:1] == ["--stages"]:
            names = args[1].split(",") if len(args) == 2 else []
            bad = [n for n in names if n not in BY_NAME or n == "report"]
            if not names or bad:
                raise UsageError(f"--stages S1,S2: stages of {', '.join(s.name for s in STAGES[:-1])} (the report "
                                 f"always runs), and nothing after them, not '{' '.join(args[1:])}'")
            only, args = names, []
        if args[:1] == ["--plan"]:
            if len(args) != 2:
                raise UsageError("--plan PILOT: one study folder or study.csv, and nothing after it")
            return plan_power(args[1])
        if args[:1] == ["--list"] and len(args) == 1:
            mode = "list"
        elif args[:1] == ["--slurm"] and len(args) == 1:
            mode = "slurm"
        elif args[:1] == ["--report"] and len(args) == 1:
            mode, stage = "part", BY_NAME["report"]
        elif args[:1] == ["--archive"]:
            if len(args) != 2 or os.path.lexists(args[1]):
                raise UsageError("--archive DEST: one folder that does not exist yet, and nothing after it"
                                 + (f" ({args[1]} exists; an archive is never overwritten)" if len(args) == 2 else ""))
            mode, dest = "archive", args[1]
        elif args[:1] == ["--part"] and len(args) in (2, 3):
            mode = "part"
            if args[1] not in BY_NAME:
                raise UsageError(f"--part STAGE: {', '.join(BY_NAME)}, not '{args[1]}'")
            stage = BY_NAME[args[1]]
            if len(args) == 3 and not args[2].isdigit():
                raise UsageError(f"--part {args[1]} INDEX: a whole number, not '{args[2]}'")
            index = int(args[2]) if len(args) == 3 else 0
        elif args:
            print(USAGE, file=sys.stderr)
            return 2
        plan = Plan.from_environ(os.environ)
        if mode == "list":
            list_parts(plan)
            return 0
        if mode != "part":
            shown = "\n".join(f"  {name}={value}" for name, value in plan.config.texts().items())
            print(f"{PROG}: settings (NAME=value)\n{shown}", file=sys.stderr)
        if mode == "all" or mode == "part" and stage.name == "pretrain":
            check_gpus(plan.config.GPUS)
        if mode == "part":  # a wrong index or an empty study changes nothing: checked before settings.env is written
            parts = stage.parts(plan)
            if index >= len(parts):
                raise UsageError(f"{stage.name} has {len(parts)} part(s) (0..{len(parts) - 1}), not index {index}")
            if stage.name == "report":
                check_reportable(plan)
        if mode == "archive":
            check_reportable(plan)
            check_settings(plan, write=False)
            return write_archive(plan, dest)
        # one whole study per OUT (tupe_study.locks), taken before settings.env is written; its parts hold their own
        with hold_study(plan) if mode == "all" else contextlib.nullcontext():
            check_settings(plan, write=not (mode == "part" and stage.name == "report"))  # the report: a reader
            n_ft = len(plan.finetune_parts())
            note(f"{plan.models_text()}, {len(plan.pretrain_parts())} pre-training run(s) of "
                 f"{plan.config.TOTAL_UPDATES} updates (validation every {plan.valid_interval}); {n_ft} fine-tuning "
                 f"run(s) ({len(plan.tasks)} task(s): {' '.join(plan.tasks) or 'none'} x {len(plan.lrs)} LR(s) x "
                 f"{len(plan.seeds)} seed(s) per model)")
            if mode == "slurm":
                slurm(plan)
                return 0
            if mode == "part":
                run_part(plan, stage, parts[index])
                return 0
            return run_all(plan, lanes, only)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except PartFailed as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1


def cli() -> None:
    """The console script ``tupe-study``, and ``python -m`` (``study.sh``): PROG names which. A path of the wrong
    kind: one line, exit 1; ``--list | head``: quiet, 141; Ctrl-C: 130."""
    exit_main(main, PROG, RESUME_PARTS)


if __name__ == "__main__":
    cli()
