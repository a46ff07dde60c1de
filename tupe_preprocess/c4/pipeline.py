"""The C4 pipeline's steps and tasks, declared once, for ``python -m tupe_preprocess.c4 run`` (a folder of C4 files on
this machine, JOBS tasks of a step at a time), ``python -m tupe_preprocess.c4 task STEP INDEX`` (task INDEX +
TASK_OFFSET: a SLURM array task of ``preprocess/c4/slurm_array.sbatch``), ``python -m tupe_preprocess.c4 slurm`` (the
sbatch commands, arrays per step sized to its tasks) and the study's ``prep`` stage (:func:`run` as a function).

    1 extract   each C4 file -> TEXT_DIR/NAME.txt          tasks 0..T-1 the train files, T..T+V-1 the validation files
    2 spm       sentencepiece + dict.txt -> SPM_DIR        one task (a sample across the train texts)
    3 binarize  each train text -> BIN_DIR/NAME            tasks 0..T-1; task T: the validation texts -> BIN_DIR/valid
    4 layout    DATA_BIN/shardK/{train,valid}.{bin,idx}    one task (dict.txt, data_path.txt, layout.json)

A task is a call of its step's module (``tupe_preprocess.c4_extract``, ``c4_spm``, ``c4_binarize``, ``c4_layout``) with
arguments made from the settings below; a step setting's default is that module's own default, so each is
written once. Every step skips outputs finished with the same settings (a rerun resumes) and refuses outputs made
with other settings (exit 2, naming them) unless FORCE=1.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import fnmatch
import io
import os
import shlex
import sys
import dataclasses
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, List, Mapping, Optional, Sequence, Type

from tupe_common import tunables
from tupe_common.errors import UsageError
from tupe_common.jobs import Job, cores, run_jobs, stderr_say
from tupe_common.io import need
from tupe_common.tunables import Say, Settings

STEPS = ("extract", "spm", "binarize", "layout")
STEP_COMMANDS = ("download", *STEPS)  # subcommands that run one step's module
# SLURM refuses an array index past MaxArraySize - 1 (default MaxArraySize 1001: 0..1000, job_array.html), so `slurm`
# cuts a step of more tasks into arrays of at most this many, each with its TASK_OFFSET: C4's 1025 -> 1000 + 25.
ARRAY_CHUNK = 1000
ARRAY_AT_ONCE = 64  # tasks of one array running at once (%64), as slurm_array.sbatch's own --array: a line's --array
# replaces the header's, its limit included
SAY = stderr_say("tupe_preprocess.c4")


def step_module(step: str) -> ModuleType:
    """A step's module (``download``, ``extract``, ``spm``, ``binarize``, ``layout``), imported on use: sentencepiece
    and numpy only when a step runs."""
    from tupe_preprocess import c4_binarize, c4_download, c4_extract, c4_layout, c4_spm

    return {"download": c4_download, "extract": c4_extract, "spm": c4_spm, "binarize": c4_binarize,
            "layout": c4_layout}[step]


def step_main(step: str) -> Callable[[Optional[Sequence[str]]], int]:
    """The ``main(argv)`` of a step's module."""
    return step_module(step).main


def step_parser(step: str) -> argparse.ArgumentParser:
    return step_module(step).parser()


@functools.lru_cache(maxsize=None)
def config_class() -> Type[Settings]:
    """``C4Config``: the settings of ``run`` and ``task`` (environment names, as run_all.sh always read them); made
    on first use, since the steps' defaults come from their parsers (which import sentencepiece)."""
    d = {step: step_parser(step) for step in STEPS}
    from tupe_preprocess.c4_layout import LINK_MODES  # the steps' own choices
    from tupe_preprocess.c4_spm import MODEL_TYPES

    rows = tunables.table("""
        C4_DIR |  | | folder of C4 files (or the argument of run)
        OUT_DIR |  | c4_prep | output root
        TEXT_DIR |  | OUT_DIR/text | step 1 output
        SPM_DIR |  | OUT_DIR/spm | step 2 output (spm.model, dict.txt)
        BIN_DIR |  | OUT_DIR/bin | step 3 output
        DATA_BIN |  | OUT_DIR/data-bin | step 4 output: shardK/ and data_path.txt
        TRAIN_GLOB |  | c4-train.*-of-*.json.gz | train files in C4_DIR
        VALID_GLOB |  | c4-validation.00000-of-*.json.gz | validation files (one set, linked into every shard)
        MAX_SHARDS | int0 | 0 | use the first N train files (0: all)
        MAX_DOCS | int0 | {max_docs} | documents per train file (0: all; for trial runs) (step 1)
        VALID_MAX_DOCS | int0 | 10000 | documents per validation file (0: all) (step 1)
        MAX_WARNINGS | int0 | {max_warnings} | file:line warnings per skip reason (step 1)
        TEXT_EXT | .txt/.txt.gz | .txt | step 1 text files: .txt, or .txt.gz (gzip)
        VOCAB_SIZE | int1 | {vocab_size} | sentencepiece pieces (step 2)
        MODEL_TYPE | {model_types} | {model_type} | sentencepiece model: bpe or unigram (step 2)
        SPM_SAMPLE_SENTENCES | int1 | {sample_sentences} | lines sampled to train sentencepiece (step 2)
        SPM_MAX_FILES | int0 | {max_files} | sample from K evenly spaced text files (0: all) (step 2)
        CHARACTER_COVERAGE | num+ | {character_coverage} | sentencepiece --character_coverage (step 2)
        SEED | int0 | {seed} | sampling and training seed (step 2)
        HARD_VOCAB_LIMIT | 0/1 | 1 | 0: accept fewer pieces when the sample is too small (step 2)
        SPM_THREADS | auto/int0 | auto | trainer threads (auto: SLURM_CPUS_PER_TASK, else all cores) (step 2)
        TOKENS_PER_SAMPLE | int0 | {tokens_per_sample} | pre-training's --tokens-per-sample: longer lines are split to fit (step 3)
        WORKERS | auto/int0 | auto | encoding processes per task (auto: run: cores / JOBS; task: SLURM_CPUS_PER_TASK, else all) (step 3)
        CHUNK_BYTES | int1 | {chunk_bytes} | bytes of text per work item (step 3)
        LINK_MODE | {link_modes} | {link} | hardlink, symlink or copy (step 4)
        PROGRESS_SECONDS | num0 | 30 | progress line interval (0: off)
        FORCE | 0/1 | 0 | 1: redo finished outputs (needed after changing a setting; otherwise refused)
        JOBS | auto/int1 | auto | run: tasks of a step at a time (auto: all usable cores)
        STEPS |  | 1234 | run: which steps
        TASK_OFFSET | int0 | 0 | task: runs task INDEX + TASK_OFFSET (an array past SLURM's MaxArraySize, in chunks)
        ARRAY_CHUNK | int1 | {array_chunk} | slurm: tasks per sbatch array at most (SLURM's default MaxArraySize 1001)
        """, max_docs=d["extract"].get_default("max_docs"), max_warnings=d["extract"].get_default("max_warnings"),
        vocab_size=d["spm"].get_default("vocab_size"), model_type=d["spm"].get_default("model_type"),
        sample_sentences=d["spm"].get_default("sample_sentences"), max_files=d["spm"].get_default("max_files"),
        character_coverage=d["spm"].get_default("character_coverage"), seed=d["spm"].get_default("seed"),
        tokens_per_sample=d["binarize"].get_default("tokens_per_sample"),
        chunk_bytes=d["binarize"].get_default("chunk_bytes"), link=d["layout"].get_default("link"),
        model_types="/".join(MODEL_TYPES), link_modes="/".join(LINK_MODES), array_chunk=ARRAY_CHUNK)
    return tunables.settings_class("C4Config", rows, config_class.__doc__)


def read(environ: Mapping[str, str], say: Say, command: str) -> Settings:
    """The settings of ``environ`` (a ``C4Config``), each checked: OUT_DIR/... defaults made from OUT_DIR, ``auto``
    resolved for ``command``."""
    c = config_class().read(environ, say)
    folders = {name: os.path.join(c.OUT_DIR, getattr(c, name)[len("OUT_DIR/"):]) for name in
               ("TEXT_DIR", "SPM_DIR", "BIN_DIR", "DATA_BIN") if getattr(c, name).startswith("OUT_DIR/")
               and not environ.get(name)}
    c = dataclasses.replace(c, **folders)
    for name in ("OUT_DIR", "TEXT_DIR", "SPM_DIR", "BIN_DIR", "DATA_BIN"):
        need(getattr(c, name), "out")  # a file where an output folder goes: one line naming it, before any step
    if not set(c.STEPS) <= set("1234") or not c.STEPS:
        raise UsageError(f"STEPS: the step numbers to run, e.g. 1234 or 34, not '{c.STEPS}'")
    slurm = environ.get("SLURM_CPUS_PER_TASK", "")
    jobs = cores() if c.JOBS is None else c.JOBS
    workers = (max(1, cores() // jobs) if command == "run" else int(slurm or "0")) if c.WORKERS is None else c.WORKERS
    return dataclasses.replace(c, JOBS=jobs, WORKERS=workers,
                               SPM_THREADS=int(slurm or "0") if c.SPM_THREADS is None else c.SPM_THREADS)


def c4_name(path: str) -> str:
    """c4-train.00000-of-01024.json.gz -> c4-train.00000-of-01024"""
    name = os.path.basename(path)
    name = name[:-3] if name.endswith(".gz") else name
    return name[:-5] if name.endswith(".json") else name


@dataclass
class Inputs:
    """The C4 files of C4_DIR and what each step makes of them."""
    train_json: List[str]
    valid_json: List[str]
    c: Any  # C4Config

    @classmethod
    def of(cls, c: Any) -> "Inputs":
        c4_dir = c.C4_DIR
        if not c4_dir:
            raise UsageError("no C4_DIR given (the argument of run, or the environment)")
        need(c4_dir, "folder")  # missing, or a file: one line naming it, exit 1

        def listed(glob: str) -> List[str]:
            return [os.path.join(c4_dir, f) for f in sorted(os.listdir(c4_dir)) if fnmatch.fnmatch(f, glob)]

        train = listed(c.TRAIN_GLOB)
        if c.MAX_SHARDS:
            train = train[: c.MAX_SHARDS]
        valid = listed(c.VALID_GLOB)
        for files, glob in ((train, c.TRAIN_GLOB), (valid, c.VALID_GLOB)):
            if not files:
                raise UsageError(f"no {glob} in {c4_dir}")
        return cls(train, valid, c)

    def text(self, json_path: str) -> str:
        return os.path.join(self.c.TEXT_DIR, c4_name(json_path) + self.c.TEXT_EXT)

    def binary(self, json_path: str) -> str:
        return os.path.join(self.c.BIN_DIR, c4_name(json_path))

    @property
    def valid_binary(self) -> str:
        return os.path.join(self.c.BIN_DIR, "valid")

    def count(self, step: str) -> int:
        """The independent tasks of ``step``."""
        return {"extract": len(self.train_json) + len(self.valid_json), "binarize": len(self.train_json) + 1}.get(step, 1)

    def argv(self, step: str, i: int) -> List[str]:
        """The arguments of task ``i`` of ``step`` for its module's ``main``."""
        c, t, n = self.c, self.c.text, len(self.train_json)
        force = ["--force"] if c.FORCE else []
        progress = ["--progress-seconds", t("PROGRESS_SECONDS")]
        spm_model, dict_txt = os.path.join(c.SPM_DIR, "spm.model"), os.path.join(c.SPM_DIR, "dict.txt")
        if step == "extract":
            src, docs = (self.train_json[i], c.MAX_DOCS) if i < n else (self.valid_json[i - n], c.VALID_MAX_DOCS)
            return [src, self.text(src), "--max-docs", str(docs), "--max-warnings", t("MAX_WARNINGS"), *progress,
                    *force]
        if step == "spm":
            hard = "--hard-vocab-limit" if c.HARD_VOCAB_LIMIT else "--no-hard-vocab-limit"
            return [*map(self.text, self.train_json), "--out-dir", c.SPM_DIR, "--vocab-size", t("VOCAB_SIZE"),
                    "--model-type", c.MODEL_TYPE, "--sample-sentences", t("SPM_SAMPLE_SENTENCES"), "--max-files",
                    t("SPM_MAX_FILES"), "--character-coverage", t("CHARACTER_COVERAGE"), "--seed", t("SEED"),
                    "--threads", t("SPM_THREADS"), hard, *progress, *force]
        if step == "binarize":
            texts, out = ([self.text(self.train_json[i])], self.binary(self.train_json[i])) if i < n else (
                [self.text(f) for f in self.valid_json], self.valid_binary)
            return [*texts, "--out", out, "--spm-model", spm_model, "--dict", dict_txt, "--workers", t("WORKERS"),
                    "--chunk-bytes", t("CHUNK_BYTES"), "--tokens-per-sample", t("TOKENS_PER_SAMPLE"), *progress,
                    *force]
        return [*map(self.binary, self.train_json), "--data-bin", c.DATA_BIN, "--dict", dict_txt, "--valid",
                self.valid_binary, "--link", c.LINK_MODE]


def run_task(inputs: Inputs, step: str, i: int, say: Say) -> int:
    """Task ``i`` of ``step`` in this process (its module's ``main``; what it prints on stdout is dropped: run and
    task write nothing there)."""
    if i >= inputs.count(step):
        say(f"nothing to do for {step} task {i}")
        return 0
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return step_main(step)(inputs.argv(step, i))
        except SystemExit as e:  # the module's argparse: a bad setting value
            return e.code if isinstance(e.code, int) else 2


def show(c: Settings, prog: str) -> None:
    sys.stderr.write(f"{prog}: " + tunables.shown(c) + "\n")


def run(environ: Mapping[str, str], c4_dir: Optional[str] = None, say: Say = SAY,
        prog: str = "tupe_preprocess.c4 run") -> int:
    """Steps STEPS for the C4 files of ``c4_dir`` (else C4_DIR) on this machine: a step's tasks JOBS at a time
    (processes: ``python -m tupe_preprocess.c4 task``), a one-task step in this process. Returns the exit status: a
    one-task step's own (2: other settings), 1 when a task of a many-task step failed."""
    env = dict(environ, **({"C4_DIR": c4_dir} if c4_dir else {}))
    c = read(env, say, "run")
    from tupe_common.lock import folder_lock, hold

    with hold(folder_lock(c.OUT_DIR), prog, "OUT_DIR", say):  # one run per OUT_DIR (its tasks take none)
        return run_steps(c, env, say, prog)


def run_steps(c: Settings, env: Mapping[str, str], say: Say, prog: str) -> int:
    """``run``'s work, with OUT_DIR's lock held."""
    show(c, prog)
    inputs = Inputs.of(c)
    jobs = c.JOBS
    say(f"{len(inputs.train_json)} train file(s), {len(inputs.valid_json)} validation file(s)")
    child = dict(env, **c.texts())  # the tasks read the same settings
    for n, step in enumerate(STEPS, 1):
        if str(n) not in c.STEPS:
            continue
        count = inputs.count(step)
        say(f"== step {n}: {step} ({count} task(s), JOBS={jobs} at a time)")
        if count == 1:
            rc = run_task(inputs, step, 0, say)
            if rc:
                return rc  # its own error line, naming the cause, stays the last
            continue
        failed, usage = [], False  # usage: a task refused its settings (outputs made with others): all would
        if jobs == 1:
            for i in range(count):
                rc = run_task(inputs, step, i, say)
                failed += [i] if rc else []
                if rc == 2:
                    usage = True
                    break
        else:
            tasks = [Job(f"{step} task {i}", [sys.executable, "-m", "tupe_preprocess.c4", "task", step, str(i)], group=step)
                     for i in range(count)]
            ran = run_jobs(tasks, jobs, child, say=say, stop_on_usage_error=True)
            failed, usage = ran.failed, ran.usage_error is not None
        if usage:
            say(f"error: step {step} stopped at a task's usage error (the message above): fix what it names, or "
                "FORCE=1 to redo outputs made with other settings (an output in use: wait for the run that holds its lock)")
            return 2
        if failed:
            say(f"error: step {step} failed for {len(failed)} of {count} task(s) (messages above); fix them and rerun: "
                "finished tasks are skipped")
            return 1
    if "4" in c.STEPS:
        say(f"done. Train with: DATA={c.DATA_BIN} tupe-pretrain, or fairseq-train "
            f"$(python -m tupe_preprocess.c4_data {c.DATA_BIN}) ...")
    return 0


def slurm(environ: Mapping[str, str], c4_dir: Optional[str] = None, say: Say = SAY) -> str:
    """The sbatch commands of ``preprocess/c4/slurm_array.sbatch`` for the steps STEPS, one array per step sized to
    its tasks (arrays of ARRAY_CHUNK tasks, each with its TASK_OFFSET, where a step has more), each step after all
    arrays of the one before, with the settings that differ from their defaults exported."""
    env = dict(environ, **({"C4_DIR": c4_dir} if c4_dir else {}))
    c = read(env, say, "task")
    inputs = Inputs.of(c)
    lines = ["# Submit from the repository root, in one shell: sbatch passes these settings on to every task",
             f"export C4_DIR={shlex.quote(os.path.abspath(c.C4_DIR))}"]
    lines += [f"export {t.name}={shlex.quote(env[t.name])}" for t in c.tunables()
              if t.name not in ("C4_DIR", "JOBS", "STEPS", "TASK_OFFSET", "ARRAY_CHUNK") and env.get(t.name)
              and env[t.name] != t.default]
    lines.append("export VENV=${VENV:-$PWD/.venv}")
    previous: List[str] = []  # the jobs of the step before: this step's arrays start after all of them
    for n, step in enumerate(STEPS, 1):
        if str(n) not in c.STEPS:
            continue
        count = inputs.count(step)
        after = " --dependency=afterok:" + ":".join(f"${job}" for job in previous) if previous else ""
        chunks = range(0, count, c.ARRAY_CHUNK)
        jobs = [step] if len(chunks) == 1 else [f"{step}{k}" for k in range(len(chunks))]
        for job, offset in zip(jobs, chunks):
            size = min(c.ARRAY_CHUNK, count - offset)
            array = f"--array=0-{size - 1}%{ARRAY_AT_ONCE}" if size > 1 else "--array=0"
            shift = f"TASK_OFFSET={offset} " if len(chunks) > 1 else ""
            lines.append(f"{job}=$({shift}sbatch --parsable {array}{after} preprocess/c4/slurm_array.sbatch {step})")
        previous = jobs
    return "\n".join(lines)


def task(environ: Mapping[str, str], step: str, index: str, say: Say = SAY) -> int:
    """Task INDEX + TASK_OFFSET of ``step`` with run's settings (a SLURM array task: slurm_array.sbatch, INDEX its
    SLURM_ARRAY_TASK_ID; TASK_OFFSET the first task of its array when a step's tasks are cut into arrays)."""
    if not index.isdigit():
        raise UsageError(f"INDEX must be a task number 0, 1, ... (not '{index}')")
    if step not in STEPS:
        raise UsageError(f"STEP must be one of: {' '.join(STEPS)} (not '{step}')")
    c = read(environ, say, "task")
    inputs, i = Inputs.of(c), int(index) + c.TASK_OFFSET
    if c.TASK_OFFSET:
        count = inputs.count(step)
        if c.TASK_OFFSET >= count:  # every task of the array would do nothing: a TASK_OFFSET left set
            raise UsageError(f"TASK_OFFSET={c.TASK_OFFSET} is past the {count} task(s) of {step}: it is the first "
                             "task of an array when a step's tasks are cut into arrays (python -m tupe_preprocess.c4 "
                             f"slurm prints them); unset it for {step}")
        say(f"{step} task {i} (INDEX {index} + TASK_OFFSET {c.TASK_OFFSET})")
    return run_task(inputs, step, i, say)
