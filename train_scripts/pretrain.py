"""Pre-training's logic: settings, checks, the fairseq command and its launcher, the settings record.

``train_scripts/pretrain.sh`` is a thin entry point over :func:`main` (its environment names, defaults and
``--help`` are the table ``TUNABLES`` here); the study calls :func:`prepare` as a function with its settings.

    settings = resolve(environ)            # every tunable: a non-empty environment value, else its default
    run = plan(settings, environ)          # the automatic values resolved, every setting checked (UsageError)
    cmd = command(run)                     # fairseq-train, or torchrun/srun around train_scripts/fairseq_rank.sh
    record(run)                            # SAVE_DIR/settings.json: a rerun with other settings is refused

Defaults come from the recipe (:mod:`tupe_common.pretrain_recipe`); exit codes as every script's
(docs/troubleshooting.md): 2 wrong usage or settings, 1 bad data, 0 done.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_common import tunables
from tupe_common.errors import UsageError, exit_main
from tupe_common.jobs import cuda_device_count, with_repo_path
from tupe_common.pretrain_recipe import recipe
from tupe_common.tunables import Say, Tunable, table

PROG = "pretrain.sh"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MLM, ELECTRA = recipe("mlm"), recipe("electra")


# NAME | kind (tupe_common.tunables.KINDS) | default | help: every default from the recipe where it has one ({mlm[...]}, {electra[...]})
TUNABLES: Tuple[Tunable, ...] = table("""
VARIANT |  | tupe-r | positional variant: a name of 'tupe-checkpoint-info --list-variants' (tupe-r, bert-a, rope, alibi, ...; tupe_r is read as tupe-r)
OBJECTIVE | mlm/electra | mlm | mlm (RoBERTa masked LM) or electra (replaced-token detection, ELECTRA-Base defaults: docs/electra.md)
SIZE |  | base | base, large or tiny (tests)
ARCH |  | auto | fairseq --arch (auto: VARIANT_SIZE, e.g. tupe_r_base)
DATA |  |  | fairseq data dir(s), colon-separated, or a folder with data_path.txt (required)
SAVE_DIR |  | auto | checkpoints; reruns resume from its checkpoint_last.pt (auto: checkpoints/ARCH, electra: checkpoints/ARCH_electra)
TENSORBOARD_DIR |  | auto | TensorBoard logs (auto: SAVE_DIR/tensorboard; none: off)
GPUS | auto/int0 | auto | GPUs per node (auto: all CUDA devices visible; 0: CPU)
NPROC_PER_NODE | auto/int1 | auto | processes per node (auto: GPUS, or 1 on CPU; >1 on CPU uses gloo)
NNODES | int1 | 1 | nodes (default: SLURM_NNODES, else 1)
NODE_RANK | int0 | 0 | this node's index (torchrun multi-node without SLURM)
MASTER_ADDR |  | auto | rendezvous host (auto: first node of the SLURM allocation, else 127.0.0.1)
MASTER_PORT | auto/int1 | auto | rendezvous port (auto: free port on one node; from SLURM_JOB_ID under SLURM)
LAUNCHER | auto/none/torchrun/srun | auto | auto, none (1 process), torchrun or srun (pretrain.sbatch sets srun)
SENTENCES_PER_UPDATE | int1 | {mlm[SENTENCES_PER_UPDATE]} | target sentences per update = NNODES x NPROC_PER_NODE x MAX_SENTENCES x UPDATE_FREQ (was BATCH_SIZE)
MAX_SENTENCES | int1 | {mlm[MAX_SENTENCES]} | sentences per process per forward (--batch-size)
UPDATE_FREQ | auto/int1 | auto | gradient accumulation (auto: SENTENCES_PER_UPDATE / (processes x MAX_SENTENCES))
TOKENS_PER_SAMPLE | int1 | {mlm[TOKENS_PER_SAMPLE]} | tokens per sequence
MAX_POSITIONS | auto/int1 | auto | learned positions (auto: TOKENS_PER_SAMPLE)
SAMPLE_BREAK_MODE | none/complete/complete_doc/eos | {mlm[SAMPLE_BREAK_MODE]} | masked_lm packing: complete = FULL-SENTENCES
MASK_PROB | frac | {mlm[MASK_PROB]} | masking probability (mlm: 80/10/10 mask/random/same; electra: 85/15 mask/same)
GENERATOR_SIZE_DIVISOR | auto/int1 | auto | electra: generator width, FFN, heads = the discriminator's / N (auto: 3 at base, 4 otherwise)
DISC_WEIGHT | num0 | {electra[DISC_WEIGHT]} | electra: weight of the discriminator's loss
TOTAL_UPDATES | auto/int1 | auto | updates, LR schedule length and stop (auto: {mlm[TOTAL_UPDATES]}; electra {electra[TOTAL_UPDATES]}, ELECTRA-Base)
WARMUP | int0 | {mlm[WARMUP]} | linear warmup updates
LR | auto/num+ | auto | peak learning rate, then linear decay to END_LR (auto: {mlm[LR]}; electra {electra[LR]}, ELECTRA-Base)
END_LR | num0 | {mlm[END_LR]} | learning rate at TOTAL_UPDATES
ADAM_BETAS |  | {mlm[ADAM_BETAS]} | Adam betas
ADAM_EPS | num+ | {mlm[ADAM_EPS]} | Adam epsilon
WEIGHT_DECAY | num0 | {mlm[WEIGHT_DECAY]} | weight decay
CLIP_NORM | num0 | {mlm[CLIP_NORM]} | gradient clipping
DROPOUT | frac | {mlm[DROPOUT]} | dropout
ATTENTION_DROPOUT | frac | {mlm[ATTENTION_DROPOUT]} | attention dropout
SEED | int0 | {mlm[SEED]} | random seed
FP16 | auto/0/1 | auto | 1: --fp16 (auto: 1 on GPU unless BF16=1, 0 on CPU)
BF16 | 0/1 | 0 | 1: --bf16 instead of --fp16 (GPUs with bfloat16: A100, H100; no loss scaling)
SAVE_INTERVAL_UPDATES | int1 | {mlm[SAVE_INTERVAL_UPDATES]} | checkpoint (and validate) every N updates
KEEP_INTERVAL_UPDATES | int | {mlm[KEEP_INTERVAL_UPDATES]} | keep the last N interval checkpoints
KEEP_PATTERN | int | {mlm[KEEP_PATTERN]} | also keep every checkpoint at a multiple of N updates (-1: none)
LOG_INTERVAL | int1 | {mlm[LOG_INTERVAL]} | log every N updates
NUM_WORKERS | int0 | 1 | data loader workers per process
DATA_BUFFER_SIZE | int0 | 0 | fairseq --data-buffer-size; >0 starts a prefetch thread that can abort the exit (status 134) at --max-update mid-epoch
MAX_SKIP_FRACTION | frac | 0 | stop at start if more than this fraction of train/valid lines would be dropped as over-length
ON_SETTINGS_CHANGE | refuse/continue | refuse | SAVE_DIR holds a run with other settings: refuse, or continue it with the new ones
DDP_BACKEND |  | auto | fairseq --ddp-backend (auto: pytorch_ddp on GPU, legacy_ddp on CPU)
EXTRA_ARGS |  |  | more fairseq-train arguments (split on spaces); script arguments are appended too
DRY_RUN | 0/1 | 0 | 1: print the settings and the command, do not train
""", mlm={n: s.value for n, s in MLM.items()}, electra={n: s.value for n, s in ELECTRA.items()})
DEFAULTS: Dict[str, str] = {t.name: t.default for t in TUNABLES}
RENAMED = {"BATCH_SIZE": "SENTENCES_PER_UPDATE"}  # old name -> new name: the old one still works, with a warning
# the settings that define a run: a rerun into the same SAVE_DIR with others is refused
RECORDED = ("ARCH", "TOKENS_PER_SAMPLE", "MAX_POSITIONS", "SAMPLE_BREAK_MODE", "MASK_PROB", "LR", "END_LR", "WARMUP",
            "TOTAL_UPDATES", "ADAM_BETAS", "ADAM_EPS", "WEIGHT_DECAY", "CLIP_NORM", "DROPOUT", "ATTENTION_DROPOUT",
            "SEED")
RECORDED_ELECTRA = ("OBJECTIVE", "GENERATOR_SIZE_DIVISOR", "DISC_WEIGHT")  # MLM runs keep their record as before

def say_to_stderr(line: str) -> None:
    sys.stderr.write(f"{PROG}: {line}\n")


def resolve(environ: Mapping[str, str], say: Say = say_to_stderr) -> Dict[str, str]:
    """Every tunable's value (tupe_common.tunables.resolve; NNODES defaults to SLURM_NNODES)."""
    values = tunables.resolve(TUNABLES, environ, say, RENAMED)
    if not environ.get("NNODES") and environ.get("SLURM_NNODES"):
        values["NNODES"] = environ["SLURM_NNODES"]
    return values


@dataclass
class Run:
    """One pre-training: the resolved settings (``values``, every tunable with its automatic value resolved),
    what follows from them, and the arguments appended to fairseq-train's."""

    values: Dict[str, str]
    task: str
    device: str  # gpu or cpu
    world: int
    effective: int  # sentences per update
    extra: List[str]
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)  # where the command will run (its PATH)

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    @property
    def criterion(self) -> str:
        """The task's criterion: MLM's is fairseq's masked_lm with its loss logged to 4 decimals (the study
        compares losses whose differences can be a few thousandths of a bit)."""
        return "masked_lm_4dp" if self.task == "masked_lm" else self.task

    @property
    def launcher(self) -> str:
        """none, torchrun, srun or rank (started by a launcher itself): LAUNCHER resolved."""
        return self.values["LAUNCHER"]


def plan(settings: Mapping[str, str], environ: Mapping[str, str] = os.environ, extra: Sequence[str] = (),
         gpus: Optional[int] = None) -> Run:
    """The run of ``settings`` (as :func:`resolve` gives them): every automatic value resolved and every
    setting checked (UsageError names the setting). ``environ``: the launcher's and SLURM's variables;
    ``gpus``: the CUDA devices (default: counted when GPUS=auto)."""
    tunables.check(TUNABLES, settings)  # every number and choice of its kind (UsageError naming it)
    v = dict(settings)
    v["VARIANT"] = v["VARIANT"].replace("_", "-")  # the registry's (and the archs') underscores read as dashes
    defaults = recipe(v["OBJECTIVE"])
    task = "masked_lm" if v["OBJECTIVE"] == "mlm" else "electra"
    for name in ("LR", "TOTAL_UPDATES"):
        if v[name] == "auto":
            v[name] = defaults[name].value
    if v["GENERATOR_SIZE_DIVISOR"] == "auto":
        v["GENERATOR_SIZE_DIVISOR"] = ELECTRA["GENERATOR_SIZE_DIVISOR"].value
    if v["GPUS"] == "auto":
        v["GPUS"] = str(cuda_device_count() if gpus is None else gpus)
    n_gpus = int(v["GPUS"])
    if v["NPROC_PER_NODE"] == "auto":
        v["NPROC_PER_NODE"] = str(max(n_gpus, 1))
    nproc, nnodes, per_forward = int(v["NPROC_PER_NODE"]), int(v["NNODES"]), int(v["MAX_SENTENCES"])
    if n_gpus and nproc > n_gpus:
        raise UsageError(f"NPROC_PER_NODE={nproc} but only GPUS={n_gpus}: one process per GPU")
    device, world = ("gpu" if n_gpus else "cpu"), nnodes * nproc

    launcher = v["LAUNCHER"]
    if environ.get("WORLD_SIZE"):  # started by a launcher itself (torchrun --no-python pretrain.sh): agree with it
        if environ["WORLD_SIZE"] != str(world):
            raise UsageError(f"started under a launcher with WORLD_SIZE={environ['WORLD_SIZE']}, but NNODES x "
                             f"NPROC_PER_NODE = {nnodes} x {nproc} = {world}. Run this script directly (it starts "
                             "torchrun itself), or set NPROC_PER_NODE/NNODES to match")
        if launcher == "auto":
            launcher = "rank"
    if world == 1:
        launcher = "none"  # one process: plain fairseq-train, whatever launched us
    elif launcher == "auto":
        launcher = "srun" if environ.get("SLURM_JOB_ID") and nnodes > 1 else "torchrun"
    if launcher not in ("none", "torchrun", "srun", "rank"):
        raise UsageError(f"LAUNCHER must be auto, none, torchrun or srun, not '{launcher}'")
    if launcher == "none" and world != 1:
        raise UsageError(f"LAUNCHER=none runs one process, but the world size is {world}")
    v["LAUNCHER"] = launcher
    if v["MASTER_ADDR"] == "auto":
        v["MASTER_ADDR"] = first_slurm_node(environ) or "127.0.0.1"
    if v["MASTER_PORT"] == "auto":
        job = environ.get("SLURM_JOB_ID", "")
        v["MASTER_PORT"] = str(20000 + int(job) % 20000) if job.isdigit() else "29500"

    if v["UPDATE_FREQ"] == "auto":
        per_update = world * per_forward
        if int(v["SENTENCES_PER_UPDATE"]) % per_update:
            raise UsageError(f"SENTENCES_PER_UPDATE={v['SENTENCES_PER_UPDATE']} is not divisible by {world} "
                             f"process(es) x MAX_SENTENCES={per_forward} = {per_update}; change MAX_SENTENCES or "
                             "set UPDATE_FREQ")
        v["UPDATE_FREQ"] = str(int(v["SENTENCES_PER_UPDATE"]) // per_update)
    effective = world * per_forward * int(v["UPDATE_FREQ"])

    if v["ARCH"] == "auto":
        from tupe_core.facts import SIZES
        from tupe_core.registry import names as variant_names

        known = variant_names()
        if v["VARIANT"] not in known:
            raise UsageError(f"VARIANT must be one of {' '.join(known)}, not '{v['VARIANT']}'")
        if v["SIZE"] not in SIZES:
            *first, last = SIZES
            raise UsageError(f"SIZE must be {', '.join(first)} or {last}, not '{v['SIZE']}'")
        v["ARCH"] = f"{v['VARIANT'].replace('-', '_')}_{v['SIZE']}"
    if v["MAX_POSITIONS"] == "auto":
        v["MAX_POSITIONS"] = v["TOKENS_PER_SAMPLE"]
    if v["FP16"] == "auto":
        v["FP16"] = "1" if device == "gpu" and v["BF16"] == "0" else "0"
    if v["FP16"] == "1" and v["BF16"] == "1":
        raise UsageError("FP16=1 and BF16=1: choose one")
    if v["DDP_BACKEND"] == "auto":
        v["DDP_BACKEND"] = "pytorch_ddp" if device == "gpu" else "legacy_ddp"
    if not v["DATA"]:
        raise UsageError("DATA is required: a fairseq data dir (dict.txt, train.bin/idx, valid.bin/idx), "
                         "shard0:shard1:..., or a folder with data_path.txt")
    if v["SAVE_DIR"] == "auto":
        v["SAVE_DIR"] = os.path.join("checkpoints", v["ARCH"] + ("_electra" if task == "electra" else ""))
    v["SAVE_DIR"] = os.path.realpath(v["SAVE_DIR"])  # every rank and every resubmission writes the same place
    if v["TENSORBOARD_DIR"] == "auto":
        v["TENSORBOARD_DIR"] = os.path.join(v["SAVE_DIR"], "tensorboard")
    return Run(v, task, device, world, effective, [*v["EXTRA_ARGS"].split(), *extra], environ)


def first_slurm_node(environ: Mapping[str, str]) -> Optional[str]:
    nodes = environ.get("SLURM_JOB_NODELIST")
    if not nodes or shutil.which("scontrol") is None:
        return None
    import subprocess

    out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True).stdout
    return out.split()[0] if out.split() else None


def check_data(run: Run) -> None:
    """The data exists, its shards share the recorded dictionary and few lines are too long: DATA becomes the
    shard list (DataError otherwise: exit 1)."""
    from preprocess.c4_data import check_data as check

    shards = check(run["DATA"], int(run["TOKENS_PER_SAMPLE"]), run["SAMPLE_BREAK_MODE"],
                   float(run["MAX_SKIP_FRACTION"]))["shards"]
    run.values["DATA"] = ":".join(shards)  # type: ignore[arg-type]


def fairseq_args(run: Run) -> List[str]:
    """fairseq-train's arguments for ``run`` (the data, the recipe, the save dir, the device)."""
    v = run.values
    args = [
        v["DATA"], "--user-dir", os.path.join(REPO, "tupe_plugin"),
        "--task", run.task, "--criterion", run.criterion, "--arch", v["ARCH"], "--max-positions", v["MAX_POSITIONS"],
        "--sample-break-mode", v["SAMPLE_BREAK_MODE"], "--tokens-per-sample", v["TOKENS_PER_SAMPLE"],
        "--mask-prob", v["MASK_PROB"],
        "--optimizer", "adam", "--adam-betas", v["ADAM_BETAS"], "--adam-eps", v["ADAM_EPS"],
        "--weight-decay", v["WEIGHT_DECAY"], "--clip-norm", v["CLIP_NORM"], "--lr", v["LR"],
        "--lr-scheduler", "polynomial_decay", "--power", "1", "--end-learning-rate", v["END_LR"],
        "--warmup-updates", v["WARMUP"], "--total-num-update", v["TOTAL_UPDATES"], "--max-update", v["TOTAL_UPDATES"],
        "--dropout", v["DROPOUT"], "--attention-dropout", v["ATTENTION_DROPOUT"],
        "--batch-size", v["MAX_SENTENCES"], "--update-freq", v["UPDATE_FREQ"], "--seed", v["SEED"],
        "--save-dir", v["SAVE_DIR"], "--no-epoch-checkpoints", "--save-interval-updates", v["SAVE_INTERVAL_UPDATES"],
        "--keep-interval-updates", v["KEEP_INTERVAL_UPDATES"], "--keep-interval-updates-pattern", v["KEEP_PATTERN"],
        "--skip-invalid-size-inputs-valid-test",
        "--log-format", "simple", "--log-interval", v["LOG_INTERVAL"], "--num-workers", v["NUM_WORKERS"],
        "--data-buffer-size", v["DATA_BUFFER_SIZE"],
    ]
    if run.task == "electra":
        args += ["--generator-size-divisor", v["GENERATOR_SIZE_DIVISOR"], "--disc-weight", v["DISC_WEIGHT"]]
    if v["TENSORBOARD_DIR"] != "none":
        args += ["--tensorboard-logdir", v["TENSORBOARD_DIR"]]
    if run.device == "cpu":
        args.append("--cpu")
    if v["FP16"] == "1":
        args.append("--fp16")
    if v["BF16"] == "1":
        args.append("--bf16")
    if run.world > 1:
        args += ["--distributed-world-size", str(run.world), "--ddp-backend", v["DDP_BACKEND"],
                 "--distributed-backend", "nccl" if run.device == "gpu" else "gloo"]
    return args + run.extra


def fairseq_train(run: Run) -> List[str]:
    """fairseq-train (BF16=1: train_scripts/fairseq_train.py, which keeps --bf16 from turning into --tpu)."""
    path = shutil.which("fairseq-train", path=run.environ.get("PATH"))
    if path is None:
        raise UsageError("fairseq-train not found (activate the virtual environment)")
    return [sys.executable, "-m", "train_scripts.fairseq_train"] if run["BF16"] == "1" else [path]


def command(run: Run) -> List[str]:
    """The whole command: fairseq-train itself (one process), or the launcher around
    ``train_scripts/fairseq_rank.sh`` (one rank each)."""
    train, v, args = fairseq_train(run), run.values, fairseq_args(run)
    rank = [os.path.join(HERE, "fairseq_rank.sh"), str(run.world), run.device, *args]
    if run.launcher == "none":
        return [*train, *args]
    if run.launcher == "rank":
        return rank
    if run.launcher == "torchrun":
        nnodes = int(v["NNODES"])
        rdzv = ["--standalone"] if nnodes == 1 else [
            "--nnodes", str(nnodes), "--node-rank", v["NODE_RANK"], "--master-addr", v["MASTER_ADDR"],
            "--master-port", v["MASTER_PORT"]]
        torchrun = os.path.join(os.path.dirname(train[0]), "torchrun")  # beside fairseq-train (or the Python of BF16=1)
        torchrun = torchrun if os.access(torchrun, os.X_OK) else "torchrun"
        return [torchrun, *rdzv, "--nproc-per-node", v["NPROC_PER_NODE"], "--no-python", *rank]
    # srun: it does not inherit --cpus-per-task from sbatch (SLURM >= 22.05): pass it on
    cpus = run.environ.get("SLURM_CPUS_PER_TASK")
    return ["srun", "--kill-on-bad-exit=1", "--nodes", v["NNODES"], "--ntasks", str(run.world),
            "--ntasks-per-node", v["NPROC_PER_NODE"], *(["--cpus-per-task", cpus] if cpus else []), *rank]


def launch_environment(run: Run) -> Dict[str, str]:
    """What the launched processes read besides their arguments (fairseq_rank.sh)."""
    return {"FAIRSEQ_TRAIN": shlex.join(fairseq_train(run)), "MASTER_ADDR": run["MASTER_ADDR"], "MASTER_PORT": run["MASTER_PORT"],
            "PYTHONPATH": with_repo_path(os.environ)["PYTHONPATH"]}


def record(run: Run) -> int:
    """SAVE_DIR/settings.json: the settings that define the run (a rerun with others is refused unless
    ON_SETTINGS_CHANGE=continue), and a damaged checkpoint_last.pt replaced (train_scripts/check_resume.py).
    Returns its exit status (0 go on, 2 refused, 1 nothing intact to resume)."""
    from train_scripts.check_resume import main as check_resume

    names = RECORDED + (RECORDED_ELECTRA if run.task == "electra" else ())
    args = [run["SAVE_DIR"], *[f"--setting={n}={run[n]}" for n in names],
            f"--setting=EFFECTIVE_BATCH_SIZE={run.effective}",
            "--dict", os.path.join(run["DATA"].split(":")[0], "dict.txt"), "--on-change", run["ON_SETTINGS_CHANGE"]]
    os.makedirs(run["SAVE_DIR"], exist_ok=True)
    return check_resume(args)


def show(run: Run, say: Say) -> None:
    """The settings (NAME=value [default]), the world and the batch, as the run starts."""
    say(tunables.shown(TUNABLES, run.values))
    say(f"world size {run.world} = {run['NNODES']} node(s) x {run['NPROC_PER_NODE']} process(es) on {run.device}, "
        f"launcher {run.launcher}")
    say(f"effective batch size: {run.effective} = {run.world} process(es) x MAX_SENTENCES {run['MAX_SENTENCES']} x "
        f"UPDATE_FREQ {run['UPDATE_FREQ']} ({run.effective * int(run['TOKENS_PER_SAMPLE'])} tokens per update at most)")
    if run.effective != int(run["SENTENCES_PER_UPDATE"]):
        say(f"warning: effective batch size {run.effective} differs from SENTENCES_PER_UPDATE="
            f"{run['SENTENCES_PER_UPDATE']}")


def prepare(settings: Mapping[str, str], environ: Mapping[str, str] = os.environ, extra: Sequence[str] = (),
            say: Say = say_to_stderr) -> Tuple[Run, List[str]]:
    """Everything before training: the run planned and its data checked, the settings and the command said
    (``say``), and, unless DRY_RUN=1, SAVE_DIR's record written. Returns the run and its command.
    Raises UsageError (exit 2), DataError (1) or RecordRefused (its status)."""
    run = plan(settings, environ, extra)
    if run["DRY_RUN"] != "1":
        check_devices(run, cuda_device_count())
    check_data(run)
    show(run, say)
    cmd = command(run)
    say("command:\n" + shlex.join(cmd))
    if run["DRY_RUN"] != "1":
        status = record(run)
        if status:
            raise RecordRefused(status)
    return run, cmd


def finished_updates(run: Run) -> Optional[int]:
    """The update count of SAVE_DIR/checkpoint_last.pt when it has reached TOTAL_UPDATES (a finished run, which a
    rerun skips rather than train one update more and rewrite its checkpoints), else None."""
    from train_scripts.check_resume import LAST, num_updates

    path = os.path.join(run["SAVE_DIR"], LAST)
    done = num_updates(path) if os.path.isfile(path) else None
    return done if done is not None and done >= int(run["TOTAL_UPDATES"]) else None


def check_devices(run: Run, visible: int) -> None:
    """GPU settings this machine cannot run (``visible`` CUDA devices): one UsageError line before any work,
    where torchrun or fairseq would end in a CUDA traceback. DRY_RUN=1 (a command printed for another machine)
    skips it."""
    gpus = int(run["GPUS"])
    if gpus > visible:
        raise UsageError(f"GPUS={gpus} but this machine sees {visible} CUDA device(s): set GPUS=auto, or run on a "
                         "node with the GPUs (DRY_RUN=1 prints the command without this check)")
    for name in ("FP16", "BF16"):
        if run[name] == "1" and run.device == "cpu":
            raise UsageError(f"{name}=1 needs a GPU, but this run is on CPU (GPUS=0): leave {name} unset on CPU")


class RecordRefused(Exception):
    """SAVE_DIR's record refused the run (train_scripts/check_resume.py said why); ``status`` its exit status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


HEADER = """Pre-train a TUPE / BERT row of the paper with masked LM, the paper's recipe as defaults (Ke et al.,
"Rethinking Positional Encoding in Language Pre-training", ICLR 2021, Sec. 4.1 and its appendix):
BERT-base TUPE-R, 512 tokens, batch 256, 1M updates, Adam, LR 1e-4 with 10k warmup then linear decay to 0,
fp16 on GPU (BF16=1: bf16). OBJECTIVE=electra: replaced-token detection with ELECTRA-Base's recipe (Clark et
al., ICLR 2020, Table 6): LR 2e-4 for 766k updates, generator 1/3 of the width, discriminator loss weight 50.
The recipe's one copy is tupe_common/pretrain_recipe.py: every default below comes from it.

Examples (from the repository root; DATA is a fairseq data dir, shard0:shard1:..., or a folder with
data_path.txt as written by python -m preprocess.c4 layout):
  DATA=c4_prep/data-bin train_scripts/pretrain.sh                       # every GPU of this node (torchrun)
  DATA=data-bin VARIANT=bert-a GPUS=1 train_scripts/pretrain.sh          # one GPU: update-freq 16
  DATA=data-bin VARIANT=tupe-a SIZE=large SENTENCES_PER_UPDATE=512 train_scripts/pretrain.sh
  DATA=data-bin BF16=1 train_scripts/pretrain.sh                         # bf16 (A100, H100)
  DRY_RUN=1 DATA=data-bin GPUS=8 train_scripts/pretrain.sh               # print the command only
  DATA=data-bin OBJECTIVE=electra VARIANT=tupe-r train_scripts/pretrain.sh   # ELECTRA (docs/electra.md)
  sbatch --nodes 2 train_scripts/pretrain.sbatch                         # SLURM, see that file
Re-running the same command resumes from SAVE_DIR/checkpoint_last.pt (fairseq's default).
The logic is train_scripts/pretrain.py (the study calls it as a function)."""


def usage() -> str:
    return (f"{HEADER}\n\nUsage: [NAME=value ...] {PROG} [FAIRSEQ_TRAIN_ARGS...]\n\n"
            f"Environment (default, meaning):\n{tunables.usage_rows(TUNABLES)}")


def main(argv: Optional[Sequence[str]] = None, environ: Mapping[str, str] = os.environ) -> int:
    """pretrain.sh: settings from the environment, arguments appended to fairseq-train's; replaces this process
    with the command (so the launcher's signals reach it)."""
    from preprocess.c4_data import DataError
    from preprocess.c4_data import log as data_log

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(usage())
        return 0
    try:
        tunables.check_names([*DEFAULTS, *RENAMED], environ, PROG)
        run, cmd = prepare(resolve(environ), environ, args)
    except UsageError as e:
        say_to_stderr(f"error: {e}")
        return 2
    except DataError as e:
        data_log.error(f"{e}")
        return 1
    except RecordRefused as e:
        return e.status
    if run["DRY_RUN"] == "1":
        say_to_stderr("DRY_RUN=1: not starting")
        return 0
    done = finished_updates(run)
    if done is not None:  # fairseq-train would resume, take one more update and save the checkpoint again
        say_to_stderr(f"{os.path.join(run['SAVE_DIR'], 'checkpoint_last.pt')} is at {done} of TOTAL_UPDATES="
                      f"{run['TOTAL_UPDATES']} updates: the run is finished, nothing to do (raise TOTAL_UPDATES to "
                      "train further)")
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, {**environ, **launch_environment(run)})


if __name__ == "__main__":
    exit_main(main, "pretrain.sh")
