"""Pre-training's logic: settings, checks, the fairseq command and its launcher, the settings record.

``tupe-pretrain`` (shim: ``train_scripts/pretrain.sh``) runs :func:`main` (settings: :class:`PretrainConfig`); the
study calls :func:`prepare` with a ``PretrainConfig`` of its own.

    config = read(environ)                 # the request (PretrainConfig): every setting typed and checked, autos as None
    run = plan(config, environ)            # run.config: a ResolvedPretrainConfig (no auto left), combinations checked
    cmd = command(run)                     # fairseq-train, or torchrun/srun around python -m tupe_pretrain.rank
    record(run)                            # SAVE_DIR/settings.json: a rerun with other settings is refused

Defaults: the recipe (:mod:`tupe_pretrain.recipe`); exit 2 wrong usage or settings, 1 bad data, 0 done.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_common import tunables
from tupe_common.errors import command_name, UsageError, exit_main
from tupe_common.installed import user_dir
from tupe_common.jobs import cuda_device_count, stderr_say
from tupe_common.lock import RunLock, folder_lock, handed_to_children, handed_to_exec, hold, refuse_if_held
from tupe_pretrain.recipe import recipe
from tupe_common.tunables import Say, Settings, setting
from tupe_pretrain.check_resume import last_checkpoint
from tupe_pretrain.torchrun import supervise

PROG = command_name("pretrain.sh")
MLM, ELECTRA = recipe("mlm"), recipe("electra")


@dataclass(frozen=True)
class PretrainConfig(Settings):
    """pretrain.sh's settings: every default from the recipe where it has one (:mod:`tupe_pretrain.recipe`).
    ``recorded``: it defines the run (SAVE_DIR/settings.json: a rerun into SAVE_DIR with another value is refused);
    ``objective``: recorded for that objective's runs only (MLM runs keep their record as before)."""

    RENAMED: ClassVar[Mapping[str, str]] = {"BATCH_SIZE": "SENTENCES_PER_UPDATE"}  # the old name works, with a warning

    VARIANT: str = setting('auto', "positional variant: a name of 'tupe-checkpoint-info --list-variants' (tupe-r, bert-a, rope, alibi, ...; tupe_r is read as tupe-r; auto: ARCH's, else tupe-r)", recorded=True, skip_unrecorded=True)
    OBJECTIVE: str = setting('mlm', 'mlm (RoBERTa masked LM) or electra (replaced-token detection, ELECTRA-Base defaults: docs/electra.md)', 'mlm/electra', recorded=True, objective="electra")
    SIZE: str = setting('auto', "base, large or tiny (tests); auto: ARCH's size, else base")
    ARCH: str = setting('auto', "fairseq --arch, a registered one: VARIANT_SIZE (auto), or tupe_roberta_SIZE (TUPE-R); with VARIANT, of that variant", recorded=True)
    DATA: str = setting('', 'fairseq data dir(s), colon-separated, or a folder with data_path.txt (required)')
    SAVE_DIR: str = setting('auto', 'checkpoints; reruns resume from its checkpoint_last.pt (auto: checkpoints/ARCH, electra: checkpoints/ARCH_electra)')
    TENSORBOARD_DIR: str = setting('auto', 'TensorBoard logs (auto: SAVE_DIR/tensorboard; none: off)', others=('TENSORBOARD_LOGDIR',))
    GPUS: Optional[int] = setting('auto', 'GPUs per node (auto: all CUDA devices visible; 0: CPU)', 'auto/int0')
    NPROC_PER_NODE: Optional[int] = setting('auto', 'processes per node (auto: GPUS, or 1 on CPU; >1 on CPU uses gloo)', 'auto/int1')
    NNODES: int = setting('1', 'nodes (default: SLURM_NNODES, else 1)', 'int1')
    NODE_RANK: int = setting('0', "this node's index (torchrun multi-node without SLURM)", 'int0')
    MASTER_ADDR: str = setting('auto', 'rendezvous host (auto: first node of the SLURM allocation, else 127.0.0.1)')
    MASTER_PORT: Optional[int] = setting('auto', 'rendezvous port (auto: free port on one node; from SLURM_JOB_ID under SLURM)', 'auto/int1')
    LAUNCHER: Optional[str] = setting('auto', 'auto, none (1 process), torchrun or srun (pretrain.sbatch sets srun)', 'auto/none/torchrun/srun')
    SENTENCES_PER_UPDATE: int = setting(MLM["SENTENCES_PER_UPDATE"].value, 'target sentences per update = NNODES x NPROC_PER_NODE x MAX_SENTENCES x UPDATE_FREQ (was BATCH_SIZE)', 'int1')
    MAX_SENTENCES: int = setting(MLM["MAX_SENTENCES"].value, 'sentences per process per forward (--batch-size)', 'int1', others=('MAX_TOKENS',))
    UPDATE_FREQ: Optional[int] = setting('auto', 'gradient accumulation (auto: SENTENCES_PER_UPDATE / (processes x MAX_SENTENCES))', 'auto/int1', others=('GRADIENT_ACCUMULATION_STEPS',))
    TOKENS_PER_SAMPLE: int = setting(MLM["TOKENS_PER_SAMPLE"].value, 'tokens per sequence', 'int1', recorded=True)
    MAX_POSITIONS: Optional[int] = setting('auto', 'learned positions (auto: TOKENS_PER_SAMPLE)', 'auto/int1', recorded=True)
    SAMPLE_BREAK_MODE: str = setting(MLM["SAMPLE_BREAK_MODE"].value, 'masked_lm packing: complete = FULL-SENTENCES', 'none/complete/complete_doc/eos', recorded=True)
    MASK_PROB: float = setting(MLM["MASK_PROB"].value, 'masking probability (mlm: 80/10/10 mask/random/same; electra: 85/15 mask/same)', 'frac', recorded=True)
    GENERATOR_SIZE_DIVISOR: Optional[int] = setting('auto', "electra: generator width, FFN, heads = the discriminator's / N (auto or 0: 3 at base, 4 otherwise)", 'auto/int0', recorded=True, objective="electra")
    DISC_WEIGHT: float = setting(ELECTRA["DISC_WEIGHT"].value, "electra: weight of the discriminator's loss", 'num0', recorded=True, objective="electra")
    TOTAL_UPDATES: Optional[int] = setting('auto', f'updates, LR schedule length and stop (auto: {MLM["TOTAL_UPDATES"].value}; electra {ELECTRA["TOTAL_UPDATES"].value}, ELECTRA-Base)', 'auto/int1', recorded=True, others=('MAX_UPDATE', 'TOTAL_NUM_UPDATE', 'MAX_STEPS'))
    WARMUP: int = setting(MLM["WARMUP"].value, 'linear warmup updates', 'int0', recorded=True, others=('WARMUP_UPDATES', 'WARMUP_STEPS'))
    LR: Optional[float] = setting('auto', f'peak learning rate, then linear decay to END_LR (auto: {MLM["LR"].value}; electra {ELECTRA["LR"].value}, ELECTRA-Base)', 'auto/num+', recorded=True, others=('LEARNING_RATE',))
    END_LR: float = setting(MLM["END_LR"].value, 'learning rate at TOTAL_UPDATES, at most LR', 'num0', recorded=True, others=('END_LEARNING_RATE',))
    ADAM_BETAS: str = setting(MLM["ADAM_BETAS"].value, 'Adam betas', recorded=True)
    ADAM_EPS: float = setting(MLM["ADAM_EPS"].value, 'Adam epsilon', 'num+', recorded=True, others=('ADAM_EPSILON',))
    WEIGHT_DECAY: float = setting(MLM["WEIGHT_DECAY"].value, 'weight decay', 'num0', recorded=True)
    CLIP_NORM: float = setting(MLM["CLIP_NORM"].value, 'gradient clipping', 'num0', recorded=True, others=('MAX_GRAD_NORM',))
    DROPOUT: float = setting(MLM["DROPOUT"].value, 'dropout', 'frac', recorded=True)
    ATTENTION_DROPOUT: float = setting(MLM["ATTENTION_DROPOUT"].value, 'attention dropout', 'frac', recorded=True)
    SEED: int = setting(MLM["SEED"].value, 'random seed', 'int0', recorded=True)
    FP16: Optional[bool] = setting('auto', '1: --fp16 (auto: 1 on GPU unless BF16=1, 0 on CPU)', 'auto/0/1')
    BF16: bool = setting('0', '1: --bf16 instead of --fp16 (GPUs with bfloat16: A100, H100; no loss scaling)', '0/1')
    SAVE_INTERVAL_UPDATES: int = setting(MLM["SAVE_INTERVAL_UPDATES"].value, 'checkpoint (and validate) every N updates', 'int1')
    KEEP_INTERVAL_UPDATES: int = setting(MLM["KEEP_INTERVAL_UPDATES"].value, 'keep the last N interval checkpoints', 'int')
    KEEP_PATTERN: int = setting(MLM["KEEP_PATTERN"].value, 'also keep every checkpoint at a multiple of N updates (-1: none)', 'int', others=('KEEP_INTERVAL_UPDATES_PATTERN',))
    LOG_INTERVAL: int = setting(MLM["LOG_INTERVAL"].value, 'log every N updates', 'int1')
    NUM_WORKERS: int = setting('1', 'data loader workers per process', 'int0')
    DATA_BUFFER_SIZE: int = setting('0', 'fairseq --data-buffer-size; >0 starts a prefetch thread that can abort the exit (status 134) at --max-update mid-epoch', 'int0')
    MAX_SKIP_FRACTION: float = setting('0', 'stop at start if more than this fraction of train/valid lines would be dropped as over-length', 'frac')
    ON_SETTINGS_CHANGE: str = setting('refuse', 'SAVE_DIR holds a run with other settings: refuse, or continue it with the new ones', 'refuse/continue')
    DDP_BACKEND: str = setting('auto', 'fairseq --ddp-backend (auto: pytorch_ddp on GPU, legacy_ddp on CPU)')
    EXTRA_ARGS: str = setting('', 'more fairseq-train arguments (split on spaces); script arguments are appended too')
    DRY_RUN: bool = setting('0', '1: print the settings and the command, do not train', '0/1')



def _resolved(name: str, kind: str) -> Any:
    """PretrainConfig's setting ``name`` (its default, help and record) of ``kind``: the same without auto."""
    f = PretrainConfig.__dataclass_fields__[name]
    return field(default=f.default, metadata={**f.metadata, "kind": kind})


@dataclass(frozen=True)
class ResolvedPretrainConfig(PretrainConfig):
    """A pre-training as it runs: the request (a :class:`PretrainConfig`) with every automatic value resolved by
    :func:`plan`, its one maker. The settings that may be auto in a request are numbers and choices here (auto is
    refused: the ``auto`` defaults below are never taken), and the text ones that may be auto (``CHOSEN``) hold
    what plan chose. LAUNCHER stays optional (None: a run started by a launcher itself, each rank running
    fairseq through ``tupe_pretrain.rank``), and SIZE is auto for an arch of fairseq's own, of no size of ours."""

    GPUS: int = _resolved("GPUS", "int0")
    NPROC_PER_NODE: int = _resolved("NPROC_PER_NODE", "int1")
    MASTER_PORT: int = _resolved("MASTER_PORT", "int1")
    UPDATE_FREQ: int = _resolved("UPDATE_FREQ", "int1")
    MAX_POSITIONS: int = _resolved("MAX_POSITIONS", "int1")
    GENERATOR_SIZE_DIVISOR: int = _resolved("GENERATOR_SIZE_DIVISOR", "int0")
    TOTAL_UPDATES: int = _resolved("TOTAL_UPDATES", "int1")
    LR: float = _resolved("LR", "num+")
    FP16: bool = _resolved("FP16", "0/1")

    CHOSEN: ClassVar[Tuple[str, ...]] = ("VARIANT", "ARCH", "SAVE_DIR", "TENSORBOARD_DIR", "MASTER_ADDR", "DDP_BACKEND")

    def __post_init__(self) -> None:
        super().__post_init__()
        left = [name for name in self.CHOSEN if getattr(self, name) == "auto"]
        if left:
            raise ValueError(f"a resolved pre-training with {', '.join(left)} auto: plan() resolves them")

    @classmethod
    def of(cls, request: PretrainConfig, **chosen: Any) -> "ResolvedPretrainConfig":
        """``request`` with the values ``chosen`` for its autos (and DATA's shards: ``check_data``)."""
        return cls(**{**{f.name: getattr(request, f.name) for f in dataclasses.fields(request)}, **chosen})


say_to_stderr = stderr_say(PROG)  # "PROG: line" on stderr


def read(environ: Mapping[str, str], say: Say = say_to_stderr) -> PretrainConfig:
    """The settings of ``environ`` (NNODES defaults to SLURM_NNODES), each checked (UsageError naming it)."""
    nodes = {} if environ.get("NNODES") or not environ.get("SLURM_NNODES") else {"NNODES": environ["SLURM_NNODES"]}
    return PretrainConfig.read(environ, say, **nodes)


@dataclass
class Run:
    """One pre-training: its settings with every automatic value resolved (``config``), what follows from them,
    the arguments appended to fairseq-train's, and the request it was planned from (``request``)."""

    config: ResolvedPretrainConfig
    task: str  # masked_lm or electra
    device: str  # gpu or cpu
    world: int
    effective: int  # sentences per update
    launcher: str  # none, torchrun, srun or rank (started by a launcher itself)
    extra: List[str]
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)  # where the command will run (its PATH)
    lock: Optional[RunLock] = None  # SAVE_DIR's (prepare takes it unless DRY_RUN=1; the caller releases it)
    request: Optional[PretrainConfig] = None  # what was asked, autos and all (plan's argument)

    @property
    def leads(self) -> bool:
        """Whether this process takes SAVE_DIR's lock and writes its record: all but nodes 1.. of a torchrun over
        several nodes, each of which runs tupe-pretrain itself into the one shared SAVE_DIR (node 0 holds it)."""
        return not (self.launcher == "torchrun" and self.config.NNODES > 1 and self.config.NODE_RANK > 0)

    @property
    def criterion(self) -> str:
        """The task's criterion: MLM's is fairseq's masked_lm with its loss logged to 4 decimals (the study
        compares losses whose differences can be a few thousandths of a bit)."""
        return "masked_lm_4dp" if self.task == "masked_lm" else self.task


def plan(config: PretrainConfig, environ: Mapping[str, str] = os.environ, extra: Sequence[str] = (),
         gpus: Optional[int] = None) -> Run:
    """The run of ``config``: every automatic value resolved and every combination checked (UsageError names
    the setting). ``environ``: the launcher's and SLURM's variables; ``gpus``: the CUDA devices (default: counted
    when GPUS=auto)."""
    c = config
    defaults = recipe(c.OBJECTIVE)
    task = "masked_lm" if c.OBJECTIVE == "mlm" else "electra"
    n_gpus = (cuda_device_count() if gpus is None else gpus) if c.GPUS is None else c.GPUS
    nproc = max(n_gpus, 1) if c.NPROC_PER_NODE is None else c.NPROC_PER_NODE
    if n_gpus and nproc > n_gpus:
        raise UsageError(f"NPROC_PER_NODE={nproc} but only GPUS={n_gpus}: one process per GPU")
    device, world = ("gpu" if n_gpus else "cpu"), c.NNODES * nproc

    launcher = c.LAUNCHER or "auto"
    if environ.get("WORLD_SIZE"):  # started by a launcher itself (torchrun --no-python pretrain.sh): agree with it
        if environ["WORLD_SIZE"] != str(world):
            raise UsageError(f"started under a launcher with WORLD_SIZE={environ['WORLD_SIZE']}, but NNODES x "
                             f"NPROC_PER_NODE = {c.NNODES} x {nproc} = {world}. Run this script directly (it starts "
                             "torchrun itself), or set NPROC_PER_NODE/NNODES to match")
        if launcher == "auto":
            launcher = "rank"
    if world == 1:
        launcher = "none"  # one process: plain fairseq-train, whatever launched us
    elif launcher == "auto":
        launcher = "srun" if environ.get("SLURM_JOB_ID") and c.NNODES > 1 else "torchrun"
    if launcher == "none" and world != 1:
        raise UsageError(f"LAUNCHER=none runs one process, but the world size is {world}")
    job = environ.get("SLURM_JOB_ID", "")
    port = (20000 + int(job) % 20000 if job.isdigit() else 29500) if c.MASTER_PORT is None else c.MASTER_PORT

    if c.MAX_SENTENCES > BATCH_MULTIPLE and c.MAX_SENTENCES % BATCH_MULTIPLE:
        raise UsageError(f"MAX_SENTENCES={c.MAX_SENTENCES} is not a multiple of {BATCH_MULTIPLE}: fairseq rounds each "
                         f"batch down to one (--required-batch-size-multiple), so it would train {c.MAX_SENTENCES} - "
                         f"{c.MAX_SENTENCES % BATCH_MULTIPLE} sentences a batch while the run says {c.MAX_SENTENCES}; "
                         f"use a multiple of {BATCH_MULTIPLE} (or at most {BATCH_MULTIPLE})")
    update_freq = c.UPDATE_FREQ
    if update_freq is None:
        per_update = world * c.MAX_SENTENCES
        if c.SENTENCES_PER_UPDATE % per_update:
            raise UsageError(f"SENTENCES_PER_UPDATE={c.SENTENCES_PER_UPDATE} is not divisible by {world} "
                             f"process(es) x MAX_SENTENCES={c.MAX_SENTENCES} = {per_update}; change MAX_SENTENCES or "
                             "set UPDATE_FREQ")
        update_freq = c.SENTENCES_PER_UPDATE // per_update

    variant, arch = variant_and_arch(c)
    fp16 = (device == "gpu" and not c.BF16) if c.FP16 is None else c.FP16
    if fp16 and c.BF16:
        raise UsageError("FP16=1 and BF16=1: choose one")
    if not c.DATA:
        raise UsageError("DATA is required: a fairseq data dir (dict.txt, train.bin/idx, valid.bin/idx), "
                         "shard0:shard1:..., or a folder with data_path.txt")
    save_dir = os.path.join("checkpoints", arch + ("_electra" if task == "electra" else "")) \
        if c.SAVE_DIR == "auto" else c.SAVE_DIR
    save_dir = os.path.realpath(save_dir)  # every rank and every resubmission writes the same place
    resolved = ResolvedPretrainConfig.of(
        c, VARIANT=variant, ARCH=arch, SIZE=arch_size(arch) or c.SIZE, GPUS=n_gpus, NPROC_PER_NODE=nproc, UPDATE_FREQ=update_freq, MASTER_PORT=port,
        MASTER_ADDR=(first_slurm_node(environ) or "127.0.0.1") if c.MASTER_ADDR == "auto" else c.MASTER_ADDR,
        LR=defaults["LR"].value if c.LR is None else c.LR,
        TOTAL_UPDATES=defaults["TOTAL_UPDATES"].value if c.TOTAL_UPDATES is None else c.TOTAL_UPDATES,
        GENERATOR_SIZE_DIVISOR=(ELECTRA["GENERATOR_SIZE_DIVISOR"].value if c.GENERATOR_SIZE_DIVISOR is None
                                else c.GENERATOR_SIZE_DIVISOR),
        MAX_POSITIONS=c.TOKENS_PER_SAMPLE if c.MAX_POSITIONS is None else c.MAX_POSITIONS, FP16=fp16,
        DDP_BACKEND=("pytorch_ddp" if device == "gpu" else "legacy_ddp") if c.DDP_BACKEND == "auto" else c.DDP_BACKEND,
        SAVE_DIR=save_dir,
        TENSORBOARD_DIR=os.path.join(save_dir, "tensorboard") if c.TENSORBOARD_DIR == "auto" else c.TENSORBOARD_DIR,
        LAUNCHER=None if launcher == "rank" else launcher)
    if launcher == "torchrun" and c.NNODES > 1 and c.MASTER_ADDR == "auto" and resolved.MASTER_ADDR == "127.0.0.1":
        raise UsageError(f"NNODES={c.NNODES} without SLURM: set MASTER_ADDR to node 0's hostname or address, the same "
                         "on every node (auto is 127.0.0.1, where the other nodes would wait for themselves)")
    if resolved.END_LR > resolved.LR:
        raise UsageError(f"END_LR={resolved.text('END_LR')} is above LR={resolved.text('LR')}: the learning rate "
                         "decays linearly from LR after the warmup to END_LR at TOTAL_UPDATES, so it would climb; set "
                         "END_LR at most LR (default 0)")
    effective = world * c.MAX_SENTENCES * update_freq
    extra_args = [*c.EXTRA_ARGS.split(), *extra]
    repeated = sorted({a.split("=")[0] for a in extra_args if a.split("=")[0] in SETTING_OF_FLAG})
    if repeated:  # fairseq takes the last value: the printed and recorded settings would not be the run's
        raise UsageError(f"EXTRA_ARGS or the arguments repeat {', '.join(repeated)}, which the recipe sets from "
                         f"{', '.join(SETTING_OF_FLAG[f] for f in repeated)}: set those instead, so that what is "
                         "printed and recorded is what runs")
    return Run(resolved, task, device, world, effective, launcher, extra_args, environ, request=c)


FAIRSEQ_ARCH = "fairseq"  # the VARIANT recorded for an ARCH of fairseq's own (roberta_base)
# fairseq's --required-batch-size-multiple, which the command leaves at its default: a batch above it is rounded down
# to a multiple of it (train and valid); kept, so that runs made before and after repeat bit for bit.
BATCH_MULTIPLE = 8
# The recipe's flags that a setting gives (fairseq_args): extra arguments may not repeat them, as fairseq takes the
# last value. Free: the others, --log-format (the study logs json) and --max-update, which stops a run early on the
# schedule of TOTAL_UPDATES (a checkpoint of the long run's schedule, as the paper's ^mid rows).
SETTING_OF_FLAG = {
    "--arch": "ARCH", "--max-positions": "MAX_POSITIONS", "--sample-break-mode": "SAMPLE_BREAK_MODE",
    "--tokens-per-sample": "TOKENS_PER_SAMPLE", "--mask-prob": "MASK_PROB", "--adam-betas": "ADAM_BETAS",
    "--adam-eps": "ADAM_EPS", "--weight-decay": "WEIGHT_DECAY", "--clip-norm": "CLIP_NORM", "--lr": "LR",
    "--end-learning-rate": "END_LR", "--warmup-updates": "WARMUP", "--total-num-update": "TOTAL_UPDATES",
    "--dropout": "DROPOUT", "--attention-dropout": "ATTENTION_DROPOUT", "--batch-size": "MAX_SENTENCES",
    "--update-freq": "UPDATE_FREQ", "--seed": "SEED", "--save-dir": "SAVE_DIR",
    "--save-interval-updates": "SAVE_INTERVAL_UPDATES", "--keep-interval-updates": "KEEP_INTERVAL_UPDATES",
    "--keep-interval-updates-pattern": "KEEP_PATTERN", "--log-interval": "LOG_INTERVAL",
    "--num-workers": "NUM_WORKERS", "--data-buffer-size": "DATA_BUFFER_SIZE",
    "--generator-size-divisor": "GENERATOR_SIZE_DIVISOR", "--disc-weight": "DISC_WEIGHT",
    "--tensorboard-logdir": "TENSORBOARD_DIR", "--distributed-world-size": "NNODES x NPROC_PER_NODE",
    "--ddp-backend": "DDP_BACKEND"}


def variant_and_arch(c: PretrainConfig) -> Tuple[str, str]:
    """VARIANT and ARCH of ``c``, agreeing (UsageError otherwise, before anything is written): ARCH=auto is
    VARIANT_SIZE (VARIANT=auto: tupe-r; SIZE=auto: base); a given ARCH must be registered (the closest names are
    said) and is of VARIANT and of SIZE, which auto takes from it; fairseq's own archs (roberta_base) are taken as
    they are, with VARIANT :data:`FAIRSEQ_ARCH`. The registry's underscores read as dashes (tupe_r: tupe-r)."""
    from tupe_core.facts import SIZES
    from tupe_core.registry import archs, names

    variant = "tupe-r" if c.VARIANT == "auto" else c.VARIANT.replace("_", "-")
    if c.SIZE != "auto" and c.SIZE not in SIZES:
        *first, last = SIZES
        raise UsageError(f"SIZE must be {', '.join(first)} or {last}, not '{c.SIZE}'")
    if c.ARCH == "auto":
        if variant not in names():
            raise UsageError(f"VARIANT must be one of {' '.join(names())}, not '{c.VARIANT}'")
        return variant, f"{variant.replace('-', '_')}_{'base' if c.SIZE == 'auto' else c.SIZE}"
    registered = archs()
    if c.ARCH not in registered:
        import difflib

        from fairseq.models import ARCH_MODEL_REGISTRY  # fairseq's own archs (roberta_base: a baseline of bench/)

        if c.ARCH in ARCH_MODEL_REGISTRY:
            if c.VARIANT != "auto":
                raise UsageError(f"ARCH={c.ARCH} is fairseq's own architecture, of no positional variant of ours: "
                                 f"leave VARIANT unset (it is {c.VARIANT})")
            check_size(c)
            return FAIRSEQ_ARCH, c.ARCH
        close = difflib.get_close_matches(c.ARCH, [*registered, *ARCH_MODEL_REGISTRY], n=3, cutoff=0.6)
        raise UsageError(f"ARCH={c.ARCH} is not a registered architecture"
                         + (f" (the closest: {', '.join(close)})" if close else "")
                         + "; ARCH is VARIANT_SIZE (ARCH=auto makes it), VARIANT a name of 'tupe-checkpoint-info "
                         f"--list-variants', SIZE one of {', '.join(SIZES)}")
    if c.VARIANT != "auto" and variant != registered[c.ARCH]:
        raise UsageError(f"ARCH={c.ARCH} is of variant {registered[c.ARCH]}, not VARIANT={c.VARIANT}: set only one of "
                         "them (VARIANT alone trains VARIANT_SIZE)")
    check_size(c)
    return registered[c.ARCH], c.ARCH


def arch_size(arch: str) -> Optional[str]:
    """The size an arch's name ends with (VARIANT_SIZE, tupe_roberta_SIZE, fairseq's roberta_SIZE), or None."""
    from tupe_core.facts import SIZES

    size = arch.rsplit("_", 1)[-1]
    return size if size in SIZES else None


def check_size(c: PretrainConfig) -> None:
    """A SIZE beside a given ARCH is ARCH's (it was silently ignored): UsageError otherwise."""
    size = arch_size(c.ARCH)
    if c.SIZE != "auto" and size != c.SIZE:
        of = f"of size {size}" if size else "of no size of ours"
        raise UsageError(f"ARCH={c.ARCH} is {of}, not SIZE={c.SIZE}: set only one of them (SIZE alone trains "
                         "VARIANT_SIZE)")


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
    from tupe_preprocess.c4_data import check_data as check

    c = run.config
    shards = check(c.DATA, c.TOKENS_PER_SAMPLE, c.SAMPLE_BREAK_MODE, c.MAX_SKIP_FRACTION)["shards"]
    run.config = dataclasses.replace(c, DATA=":".join(shards))


def fairseq_args(run: Run) -> List[str]:
    """fairseq-train's arguments for ``run`` (the data, the recipe, the save dir, the device)."""
    c, t = run.config, run.config.text
    args = [
        c.DATA, "--user-dir", user_dir(),
        "--task", run.task, "--criterion", run.criterion, "--arch", c.ARCH, "--max-positions", t("MAX_POSITIONS"),
        "--sample-break-mode", c.SAMPLE_BREAK_MODE, "--tokens-per-sample", t("TOKENS_PER_SAMPLE"),
        "--mask-prob", t("MASK_PROB"),
        "--optimizer", "adam", "--adam-betas", c.ADAM_BETAS, "--adam-eps", t("ADAM_EPS"),
        "--weight-decay", t("WEIGHT_DECAY"), "--clip-norm", t("CLIP_NORM"), "--lr", t("LR"),
        "--lr-scheduler", "polynomial_decay", "--power", "1", "--end-learning-rate", t("END_LR"),
        "--warmup-updates", t("WARMUP"), "--total-num-update", t("TOTAL_UPDATES"), "--max-update", t("TOTAL_UPDATES"),
        "--dropout", t("DROPOUT"), "--attention-dropout", t("ATTENTION_DROPOUT"),
        "--batch-size", t("MAX_SENTENCES"), "--update-freq", t("UPDATE_FREQ"), "--seed", t("SEED"),
        "--save-dir", c.SAVE_DIR, "--no-epoch-checkpoints", "--save-interval-updates", t("SAVE_INTERVAL_UPDATES"),
        "--keep-interval-updates", t("KEEP_INTERVAL_UPDATES"), "--keep-interval-updates-pattern", t("KEEP_PATTERN"),
        "--skip-invalid-size-inputs-valid-test",
        "--log-format", "simple", "--log-interval", t("LOG_INTERVAL"), "--num-workers", t("NUM_WORKERS"),
        "--data-buffer-size", t("DATA_BUFFER_SIZE"),
    ]
    if run.task == "electra":
        args += ["--generator-size-divisor", t("GENERATOR_SIZE_DIVISOR"), "--disc-weight", t("DISC_WEIGHT")]
    if c.TENSORBOARD_DIR != "none":
        args += ["--tensorboard-logdir", c.TENSORBOARD_DIR]
    if run.device == "cpu":
        args.append("--cpu")
    if c.FP16:
        args.append("--fp16")
    if c.BF16:
        args.append("--bf16")
    if run.world > 1:
        args += ["--distributed-world-size", str(run.world), "--ddp-backend", c.DDP_BACKEND,
                 "--distributed-backend", "nccl" if run.device == "gpu" else "gloo"]
    return args + run.extra


def fairseq_train(run: Run) -> List[str]:
    """fairseq-train (BF16=1: tupe_pretrain/fairseq_train.py, which keeps --bf16 from turning into --tpu)."""
    path = shutil.which("fairseq-train", path=run.environ.get("PATH"))
    if path is None:
        raise UsageError("fairseq-train not found (activate the virtual environment)")
    return [sys.executable, "-m", "tupe_pretrain.fairseq_train"] if run.config.BF16 else [path]


def command(run: Run) -> List[str]:
    """The whole command: fairseq-train itself (one process), or the launcher around
    ``python -m tupe_pretrain.rank`` (one rank each)."""
    train, c, args = fairseq_train(run), run.config, fairseq_args(run)
    rank = [sys.executable, "-m", "tupe_pretrain.rank", str(run.world), run.device, *args]
    if run.launcher == "none":
        return [*train, *args]
    if run.launcher == "rank":
        return rank
    if run.launcher == "torchrun":
        rdzv = ["--standalone"] if c.NNODES == 1 else [
            "--nnodes", str(c.NNODES), "--node-rank", str(c.NODE_RANK), "--master-addr", c.MASTER_ADDR,
            "--master-port", str(c.MASTER_PORT)]
        torchrun = os.path.join(os.path.dirname(train[0]), "torchrun")  # beside fairseq-train (or the Python of BF16=1)
        torchrun = torchrun if os.access(torchrun, os.X_OK) else "torchrun"
        return [torchrun, *rdzv, "--nproc-per-node", str(c.NPROC_PER_NODE), "--no-python", *rank]
    # srun: it does not inherit --cpus-per-task from sbatch (SLURM >= 22.05): pass it on
    cpus = run.environ.get("SLURM_CPUS_PER_TASK")
    return ["srun", "--kill-on-bad-exit=1", "--nodes", str(c.NNODES), "--ntasks", str(run.world),
            "--ntasks-per-node", str(c.NPROC_PER_NODE), *(["--cpus-per-task", cpus] if cpus else []), *rank]


def launch_environment(run: Run) -> Dict[str, str]:
    """What the launched processes read besides their arguments (tupe_pretrain.rank). PYTHONUNBUFFERED: fairseq logs
    to stdout, which a file or pipe block-buffers; a killed run then lost its last validations' lines although their
    checkpoints were saved, so a resume never logged them again."""
    return {"FAIRSEQ_TRAIN": shlex.join(fairseq_train(run)), "MASTER_ADDR": run.config.MASTER_ADDR,
            "MASTER_PORT": str(run.config.MASTER_PORT), "PYTHONUNBUFFERED": "1"}


def recorded_names(config: PretrainConfig) -> List[str]:
    """The settings that define a run (``recorded``), an objective's for its runs only."""
    return [f.name for f in dataclasses.fields(config) if f.metadata.get("recorded")
            and f.metadata.get("objective", config.OBJECTIVE) == config.OBJECTIVE]


def added_names() -> List[str]:
    """The recorded settings that a record written before them lacks (``skip_unrecorded``: VARIANT); such an older
    run resumes, and its record gets them."""
    return [f.name for f in dataclasses.fields(PretrainConfig) if f.metadata.get("skip_unrecorded")]


def record(run: Run) -> int:
    """SAVE_DIR/settings.json: the settings that define the run (a rerun with others is refused unless
    ON_SETTINGS_CHANGE=continue), and a damaged checkpoint_last.pt replaced (tupe_pretrain/check_resume.py).
    Returns its exit status (0 go on, 2 refused, 1 nothing intact to resume)."""
    from tupe_pretrain.check_resume import RunRecord, check

    c, added = run.config, set(added_names())
    names = recorded_names(c)
    settings = {**{n: c.text(n) for n in names if n not in added}, "EFFECTIVE_BATCH_SIZE": str(run.effective)}
    kept = RunRecord(settings, {n: c.text(n) for n in names if n in added},
                     dictionary=os.path.join(c.DATA.split(":")[0], "dict.txt"))
    os.makedirs(c.SAVE_DIR, exist_ok=True)
    return check(c.SAVE_DIR, kept, on_change=c.ON_SETTINGS_CHANGE)


def show(run: Run, say: Say) -> None:
    """The settings (NAME=value [default]), the world and the batch, as the run starts."""
    c = run.config
    say(tunables.shown(c))
    say(f"world size {run.world} = {c.NNODES} node(s) x {c.NPROC_PER_NODE} process(es) on {run.device}, "
        f"launcher {run.launcher}")
    say(f"effective batch size: {run.effective} = {run.world} process(es) x MAX_SENTENCES {c.MAX_SENTENCES} x "
        f"UPDATE_FREQ {c.UPDATE_FREQ} ({run.effective * c.TOKENS_PER_SAMPLE} tokens per update at most)")
    if run.effective != c.SENTENCES_PER_UPDATE:
        say(f"warning: effective batch size {run.effective} differs from SENTENCES_PER_UPDATE="
            f"{c.SENTENCES_PER_UPDATE}")
    if c.WARMUP >= c.TOTAL_UPDATES:  # a smoke run may mean it; a real one rarely does
        say(f"warning: WARMUP={c.WARMUP} is not below TOTAL_UPDATES={c.TOTAL_UPDATES}: the learning rate climbs for "
            f"the whole run, to LR x {c.TOTAL_UPDATES}/{c.WARMUP} at most, and never decays; WARMUP is usually about 1% "
            "of TOTAL_UPDATES")


def prepare(config: PretrainConfig, environ: Mapping[str, str] = os.environ, extra: Sequence[str] = (),
            say: Say = say_to_stderr) -> Tuple[Run, List[str]]:
    """Everything before training: the run planned, SAVE_DIR's lock taken (unless DRY_RUN=1: ``run.lock``, which
    the caller releases, or hands to the exec), its data checked, the settings and the command said (``say``), and,
    unless DRY_RUN=1, SAVE_DIR's record written. Returns the run and its command. Raises UsageError (exit 2; a
    SAVE_DIR another run holds: tupe_common.lock.LockHeld), DataError (1) or RecordRefused (its status), with the
    lock released."""
    follower = config.NNODES > 1 and config.NODE_RANK > 0  # node 0 holds SAVE_DIR (Run.leads)
    if not config.DRY_RUN and config.SAVE_DIR != "auto" and not follower:  # a held SAVE_DIR refused at once
        refuse_if_held(save_dir_lock(config.SAVE_DIR), "SAVE_DIR")
    run = plan(config, environ, extra)
    if not config.DRY_RUN:
        check_devices(run, cuda_device_count())
        if run.leads:
            run.lock = hold(save_dir_lock(run.config.SAVE_DIR), PROG, "SAVE_DIR", say)
        else:
            say(f"node {config.NODE_RANK} of {config.NNODES}: SAVE_DIR's lock and record are node 0's; this node waits "
                f"for node 0 at {run.config.MASTER_ADDR}:{run.config.MASTER_PORT} (torchrun's rendezvous, up to its "
                "600 s): if node 0 refused to start, its log says why, and this node then fails")
    try:
        check_data(run)
        show(run, say)
        cmd = command(run)
        say("command:\n" + shlex.join(cmd))
        if not config.DRY_RUN and run.leads:
            status = record(run)
            if status:
                raise RecordRefused(status)
    except BaseException:
        if run.lock:
            run.lock.release()
        raise
    return run, cmd


def save_dir_lock(save_dir: str) -> str:
    """The one lock of a pre-training into ``save_dir``, whichever route started it (pretrain.sh, the study)."""
    return folder_lock(save_dir)



def finished_updates(run: Run) -> Optional[int]:
    """The update count of SAVE_DIR/checkpoint_last.pt when it has reached TOTAL_UPDATES (a finished run, which a
    rerun skips rather than train one update more and rewrite its checkpoints), else None."""
    done = last_checkpoint(run.config.SAVE_DIR)[2]
    return done if done is not None and done >= run.config.TOTAL_UPDATES else None


def check_devices(run: Run, visible: int) -> None:
    """GPU settings this machine cannot run (``visible`` CUDA devices): one UsageError line before any work,
    where torchrun or fairseq would end in a CUDA traceback. DRY_RUN=1 (a command printed for another machine)
    skips it."""
    gpus = run.config.GPUS
    if gpus > visible:
        raise UsageError(f"GPUS={gpus} but this machine sees {visible} CUDA device(s): set GPUS=auto, or run on a "
                         "node with the GPUs (DRY_RUN=1 prints the command without this check)")
    for name in ("FP16", "BF16"):
        if getattr(run.config, name) and run.device == "cpu":
            raise UsageError(f"{name}=1 needs a GPU, but this run is on CPU (GPUS=0): leave {name} unset on CPU")


class RecordRefused(Exception):
    """SAVE_DIR's record refused the run (tupe_pretrain/check_resume.py said why); ``status`` its exit status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


HEADER = """Pre-train a TUPE / BERT row of the paper with masked LM, the paper's recipe as defaults (Ke et al.,
"Rethinking Positional Encoding in Language Pre-training", ICLR 2021, Sec. 4.1 and its appendix):
BERT-base TUPE-R, 512 tokens, batch 256, 1M updates, Adam, LR 1e-4 with 10k warmup then linear decay to 0,
fp16 on GPU (BF16=1: bf16). OBJECTIVE=electra: replaced-token detection with ELECTRA-Base's recipe (Clark et
al., ICLR 2020, Table 6): LR 2e-4 for 766k updates, generator 1/3 of the width, discriminator loss weight 50.
The recipe's one copy is tupe_pretrain/recipe.py: every default below comes from it.

Examples (DATA is a fairseq data dir, shard0:shard1:..., or a folder with data_path.txt as written by tupe-c4 layout;
train_scripts/pretrain.sh, from a checkout, is the same command):
  DATA=c4_prep/data-bin tupe-pretrain                                   # every GPU of this node (torchrun)
  DATA=data-bin VARIANT=bert-a GPUS=1 tupe-pretrain                      # one GPU: update-freq 16
  DATA=data-bin VARIANT=tupe-a SIZE=large SENTENCES_PER_UPDATE=512 tupe-pretrain
  DATA=data-bin BF16=1 tupe-pretrain                                     # bf16 (A100, H100)
  DRY_RUN=1 DATA=data-bin GPUS=8 tupe-pretrain                           # print the command only
  DATA=data-bin OBJECTIVE=electra VARIANT=tupe-r tupe-pretrain           # ELECTRA (docs/electra.md)
  sbatch --nodes 2 train_scripts/pretrain.sbatch                         # SLURM, from a checkout: see that file
Re-running the same command resumes from SAVE_DIR/checkpoint_last.pt (fairseq's default)."""


def usage() -> str:
    return (f"{HEADER}\n\nUsage: [NAME=value ...] {PROG} [FAIRSEQ_TRAIN_ARGS...]\n\n"
            f"Environment (default, meaning):\n{tunables.usage_rows(PretrainConfig.tunables())}")


def main(argv: Optional[Sequence[str]] = None, environ: Mapping[str, str] = os.environ) -> int:
    """pretrain.sh: settings from the environment, arguments appended to fairseq-train's; replaces this process
    with the command (fairseq-train, srun: so the launcher's signals reach it), or, for torchrun, runs it as a child
    and waits (:func:`tupe_pretrain.torchrun.supervise`)."""
    from tupe_preprocess.c4_data import DataError
    from tupe_preprocess.c4_data import log as data_log

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(usage())
        return 0
    try:
        tunables.check_names(PretrainConfig.names(), environ, PROG, others=PretrainConfig.others())
        run, cmd = prepare(read(environ), environ, args)
    except UsageError as e:
        say_to_stderr(f"error: {e}")
        return 2
    except DataError as e:
        data_log.error(f"{e}")
        return 1
    except RecordRefused as e:
        return e.status
    if run.config.DRY_RUN:
        say_to_stderr("DRY_RUN=1: not starting")
        return 0
    try:
        done = finished_updates(run)
        if done is not None:  # fairseq-train would resume, take one more update and save the checkpoint again
            say_to_stderr(f"{os.path.join(run.config.SAVE_DIR, 'checkpoint_last.pt')} is at {done} of TOTAL_UPDATES="
                          f"{run.config.TOTAL_UPDATES} updates: the run is finished, nothing to do (raise "
                          "TOTAL_UPDATES to train further)")
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        child = {**tunables.child_environ(environ, PretrainConfig.names()),  # fairseq reads none of pretrain.sh's
                 **launch_environment(run)}
        if run.launcher == "torchrun":
            return supervise(run.config.SAVE_DIR, cmd, handed_to_children(run.lock, child) if run.lock else child,
                             say_to_stderr)
        # the pid, and so SAVE_DIR's lock, stays; fairseq-train's plugin keeps it (tupe_plugin/run_lock.py)
        os.execvpe(cmd[0], cmd, handed_to_exec(run.lock, child))
    finally:
        if run.lock:  # none on nodes 1.. of a torchrun over several nodes (Run.leads)
            run.lock.release()  # reached when no exec happened: torchrun's run ended, or nothing to do


def cli() -> None:
    """The console script ``tupe-pretrain``, and ``python -m`` (``pretrain.sh``): :data:`PROG` names which."""
    exit_main(main, PROG)


if __name__ == "__main__":
    cli()
