"""The study's settings, declared once: name, meaning, default (or "from the preset"), and whether a study
records it (``OUT/settings.env``: a rerun with another value is refused, as it would compare variants
trained under different settings).

A preset (``train_scripts/study_presets/NAME.env``) sets every setting marked ``preset``; the environment
overrides any value. ``--help`` lists this table; ``--slurm`` exports it; the checks below run before any
work. Adding a setting is one ``Setting`` line here (and one line per preset when it is a preset's).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from tupe_common.errors import UsageError  # the project's one (study.plan, study.__main__ import it from here)

PRESETS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train_scripts",
                           "study_presets")


@dataclass(frozen=True)
class Setting:
    name: str
    meaning: str
    default: Optional[str] = None  # None: from the preset
    recorded: bool = False  # part of OUT/settings.env: a rerun with another value is refused
    objective: str = ""  # recorded only once the study has models of this objective (OBJECTIVES)

    @property
    def preset(self) -> bool:
        return self.default is None


SETTINGS: Tuple[Setting, ...] = (
    Setting("PRESET", "tiny, cpu-small, gpu-9min, gpu-small, base (train_scripts/study_presets/NAME.env) or a "
            ".env file",
            "cpu-small", recorded=True),
    Setting("OUT", "the study's folder (required)", ""),
    Setting("C4_DIR", "C4-format files c4-train.*.json.gz + c4-validation.00000-of-*.json.gz "
            "(python -m preprocess.text_to_c4)", "", recorded=True),
    Setting("TASKS_DIR", "tasks in GLUE layout: TASKS_DIR/TASK/{train,dev}.tsv", ""),
    Setting("TASKS", "tasks to fine-tune (auto: every folder of TASKS_DIR with train.tsv and dev.tsv; none)", "auto"),
    Setting("VARIANTS", "registered variant names in report order (all: every one, in registry order; "
            "NAME:1,2: that variant's own pre-training seeds)", "bert-a bert-r tupe-a tupe-r"),
    Setting("OBJECTIVES", "pre-training objectives, each for every variant: mlm (RoBERTa masked LM), electra "
            "(replaced-token detection; its runs are V+electra)", "mlm"),
    Setting("PRETRAIN_SEEDS", "pre-training seeds of every variant without its own (same data order and "
            "masks per seed)", "1"),
    Setting("ENDPOINTS", "the confirmatory comparisons, declared before the study runs: MEASURE:A:B, the per-seed "
            "paired difference A - B of two MLM models (MEASURE: final_loss, loss_auc; study/endpoints.py), tested as "
            "one Holm family; everything else is exploratory (none: nothing declared)", "none", recorded=True),
    Setting("EQUIVALENCE_BITS", "margin in bits, stated beforehand, within which a declared difference is called "
            "equivalent (TOST at 5%); none: never (a difference not shown is 'not resolved')", "none", recorded=True),
    Setting("SIZE", "pretrain.sh SIZE (the arch is VARIANT_SIZE)", recorded=True),
    Setting("MODEL_ARGS", "fairseq size flags over the arch (--encoder-layers ...; none: the arch's)", recorded=True),
    Setting("VOCAB_SIZE", "sentencepiece vocabulary", recorded=True),
    Setting("MAX_SHARDS", "train files of C4_DIR to use (0: all)", recorded=True),
    Setting("MAX_DOCS", "documents per train file (0: all)", recorded=True),
    Setting("TOKENS_PER_SAMPLE", "tokens per pre-training sequence: the length T", recorded=True),
    Setting("BATCH_SIZE", "sequences per pre-training update (pretrain.sh's SENTENCES_PER_UPDATE)", recorded=True),
    Setting("MAX_SENTENCES", "sequences per forward (gradient accumulation makes up BATCH_SIZE)"),
    Setting("TOTAL_UPDATES", "pre-training budget per variant (updates)", recorded=True),
    Setting("WARMUP", "pre-training warmup updates", recorded=True),
    Setting("PRETRAIN_LR", "pre-training peak LR (then linear decay to 0)", recorded=True),
    Setting("GENERATOR_SIZE_DIVISOR", "electra: generator width, FFN and heads = the discriminator's / N (auto: "
            "pretrain.sh's, 3 at SIZE=base, 4 otherwise; it must divide the MODEL_ARGS sizes)", "auto", recorded=True,
            objective="electra"),
    Setting("DISC_WEIGHT", "electra: weight of the discriminator's loss (pretrain.sh DISC_WEIGHT)", "50", recorded=True,
            objective="electra"),
    Setting("VALID_POINTS", "validations per pre-training run (the loss curve; a checkpoint each)", recorded=True),
    Setting("VALID_STEPS", "batches per validation (the same first batches every time; 0: the whole set)",
            recorded=True),
    Setting("LENGTH_FACTORS", "the longer-inputs stage: validation loss at these multiples of T (the models get "
            "positions for the largest; 1: the stage is off)", "1 2 4", recorded=True),
    Setting("FT_LRS", "fine-tuning LRs (per task: median over seeds per LR, best LR)", recorded=True),
    Setting("FT_EPOCHS", "fine-tuning epochs (auto: glue/finetune.sh's per task)", recorded=True),
    Setting("FT_BATCH", "fine-tuning batch size", recorded=True),
    Setting("FT_EXTRA_ARGS", "more fairseq-train arguments for fine-tuning", "--shorten-method truncate",
            recorded=True),
    Setting("SEEDS", "fine-tuning seeds"),
    Setting("ORDER_WINDOWS", "the word-order stage: local shuffles in windows of these many words (and a fully "
            "random one; none: the stage is off)", "3 6", recorded=True),
    Setting("LOC_LENGTH", "T of the position-only maps", recorded=True),
    Setting("LOC_SENTENCES", "held-out validation lines for the real attention maps", recorded=True),
    Setting("MIN_GAP_BITS", "warn unless every variant ends this many bits below the unigram baseline"),
    Setting("GPUS", "GPUs for pre-training (auto: all visible; 0: CPU)", "auto"),
    Setting("PREP_JOBS", "C4 files preprocessed in parallel", str(os.cpu_count() or 1)),
    Setting("NUM_WORKERS", "data loader workers (0: in the main process)", "1"),
)
BY_NAME: Dict[str, Setting] = {s.name: s for s in SETTINGS}


def preset_path(preset: str) -> str:
    """The preset's file: PRESET itself when it is a file, else train_scripts/study_presets/PRESET.env."""
    if os.path.isfile(preset):
        return preset
    path = os.path.join(PRESETS_DIR, f"{preset}.env")
    if not os.path.isfile(path):
        names = " ".join(sorted(f[:-4] for f in os.listdir(PRESETS_DIR) if f.endswith(".env")))
        raise UsageError(f"PRESET={preset}: no file {path} (presets: {names})")
    return path


def read_preset(path: str) -> Dict[str, str]:
    """NAME=value lines of a preset; every preset setting must be there, and nothing else."""
    values: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = re.match(r"^([A-Z_0-9]+)=(.*)$", line.rstrip("\n"))
            if m:
                if m.group(1) not in BY_NAME or not BY_NAME[m.group(1)].preset:
                    raise UsageError(f"{path}:{lineno}: {m.group(1)} is not a preset setting "
                                     f"(a preset sets: {' '.join(s.name for s in SETTINGS if s.preset)})")
                values[m.group(1)] = m.group(2)
    lacking = [s.name for s in SETTINGS if s.preset and s.name not in values]
    if lacking:
        raise UsageError(f"{path}: no line {lacking[0]}=... (every preset sets: "
                         f"{' '.join(s.name for s in SETTINGS if s.preset)})")
    return values


def defaults(environ: Mapping[str, str]) -> Dict[str, str]:
    """Every setting's default: its own, or the preset's (PRESET from the environment)."""
    preset = read_preset(preset_path(environ.get("PRESET") or BY_NAME["PRESET"].default))
    return {s.name: preset[s.name] if s.preset else s.default for s in SETTINGS}


def resolve(environ: Mapping[str, str]) -> Dict[str, str]:
    """Every setting's value: a non-empty environment value, else its default."""
    return {name: environ.get(name) or default for name, default in defaults(environ).items()}


def recorded_text(values: Mapping[str, str]) -> str:
    """The OUT/settings.env text: NAME=value of every recorded setting, in table order; an objective's
    settings only when OBJECTIVES has it."""
    objectives = words(values, "OBJECTIVES")
    return "".join(f"{s.name}={values[s.name]}\n" for s in SETTINGS
                   if s.recorded and (not s.objective or s.objective in objectives))


def _lines(text: str) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def changed_settings(recorded: str, now: str) -> List[str]:
    """Lines that differ between a recorded settings.env and this run's ('< old', '> new'); a setting that
    an older study did not record is compared only when the new value is not its default, except an
    objective's setting: a study without that objective's models never used it."""
    old, new = _lines(recorded), _lines(now)
    out = []
    for name, value in new.items():
        if name not in old and BY_NAME[name].objective:
            continue
        before = old[name] if name in old else BY_NAME[name].default
        if before != value:
            out += ([f"< {name}={old[name]}"] if name in old else []) + [f"> {name}={value}"]
    return out


def merged_text(recorded: str, now: str) -> str:
    """settings.env after a run that ``changed_settings`` accepted: the recorded text, then this run's lines
    that were not recorded yet (an objective's settings, once it has models)."""
    old = _lines(recorded)
    added = "".join(f"{n}={v}\n" for n, v in _lines(now).items() if n not in old)
    return recorded + ("\n" if recorded and not recorded.endswith("\n") and added else "") + added


# ---- values as numbers and lists ------------------------------------------------------------------------


def words(values: Mapping[str, str], name: str) -> List[str]:
    v = values[name]
    return [] if v == "none" else v.replace(",", " ").split()


def whole_list(values: Mapping[str, str], name: str) -> List[int]:
    out = words(values, name)
    bad = [x for x in out if not re.fullmatch(r"[0-9]+", x)]
    if bad:
        raise UsageError(f"{name} are whole numbers, not '{bad[0]}'")
    return [int(x) for x in out]
