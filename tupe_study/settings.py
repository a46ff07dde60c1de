"""The study's settings, declared once (:class:`StudyConfig`, the mechanism of every entry point:
``tupe_common.tunables``): name, meaning, default (or the preset's), kind, and whether a study records it
(``OUT/settings.env``: a rerun with another value is refused, as it would compare variants trained under
different settings).

A preset (``tupe_study/presets/NAME.env``) sets every setting marked ``preset``; the environment
overrides any value. ``--help`` lists this table; ``--slurm`` exports it; every value is checked by its kind
when it is read, before any work. Adding a setting is one field here (and one line per preset when it is a
preset's).
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_core.facts import ModelArgs
from tupe_study.declaration import parse_declaration
from tupe_study.longer_inputs import ROPE_SCALED
from tupe_common.errors import UsageError, command_name  # UsageError: the project's one (tupe_study.plan, tupe_study.__main__ import it from here)
from tupe_common.numbers import check_once
from tupe_common.tunables import Say, Settings, fits, parse, setting

PROG = command_name("study.sh")  # the study's messages: tupe-study, or study.sh (its shim, python -m tupe_study)
PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets")  # package data


def preset_setting(help: str, kind: str = "", **extra: Any) -> Any:
    """A setting whose default is the preset's (every preset file sets it: :func:`read_preset`)."""
    return setting("", help, kind, preset=True, **extra)


@dataclass(frozen=True)
class StudyConfig(Settings):
    """The study's settings, named as pre-training's and fine-tuning's where they are theirs (SENTENCES_PER_UPDATE,
    LR, LRS, EPOCHS, SENTENCES_PER_BATCH, EXTRA_ARGS: passed on as they are). ``recorded``: part of OUT/settings.env
    (a rerun with another value is refused); ``objective``: recorded only once the study has models of it;
    ``skip_unrecorded``: recorded since the declaration became the whole design (VARIANTS, PRETRAIN_SEEDS): a
    settings.env written before lacks its line, and such an older study is neither compared on it nor given it."""

    # old name -> new name: an old name still sets the new one (with a warning), and reads so in a recorded settings.env
    RENAMED: ClassVar[Mapping[str, str]] = {"BATCH_SIZE": "SENTENCES_PER_UPDATE", "PRETRAIN_LR": "LR", "FT_LRS": "LRS",
                                            "FT_EPOCHS": "EPOCHS", "FT_BATCH": "SENTENCES_PER_BATCH",
                                            "FT_EXTRA_ARGS": "EXTRA_ARGS"}

    PRESET: str = setting("cpu-small", "tiny, cpu-small, cpu-small-long, gpu-9min, gpu-small, base (tupe_study/presets/NAME.env) "
                          "or a .env file", recorded=True)
    OUT: str = setting("", "the study's folder (required)")
    C4_DIR: str = setting("", "C4-format files c4-train.*.json.gz + c4-validation.00000-of-*.json.gz "
                          "(python -m tupe_preprocess.text_to_c4)", recorded=True)
    TASKS_DIR: str = setting("", "tasks in GLUE layout: TASKS_DIR/TASK/{train,dev}.tsv")
    TASKS: str = setting("auto", "tasks to fine-tune (auto: every folder of TASKS_DIR with train.tsv and dev.tsv; none)")
    VARIANTS: str = setting("bert-a bert-r tupe-a tupe-r", "registered variant names in report order (all: every one, "
                            "in registry order; NAME:1,2: that variant's own pre-training seeds)", recorded=True,
                            skip_unrecorded=True)
    OBJECTIVES: Tuple[str, ...] = setting("mlm", "pre-training objectives, each for every variant: mlm (RoBERTa masked "
                                          "LM), electra (replaced-token detection; its runs are V+electra)",
                                          "[mlm/electra]")
    PRETRAIN_SEEDS: Tuple[int, ...] = setting("1", "pre-training seeds of every variant without its own (same data "
                                              "order and masks per seed)", "[int0]", recorded=True,
                                              skip_unrecorded=True)
    LR_GRID: Tuple[float, ...] = setting("none", "the learning-rate sweep: pre-training peak LRs each variant is "
                                         "trained with on SWEEP_SEEDS before the confirmation; each variant then "
                                         "pre-trains at the LR that LR_RULE chooses (docs/study.md; none: no sweep, "
                                         "every variant at LR)", "[num+]", recorded=True)
    SWEEP_SEEDS: Tuple[int, ...] = setting("none", "pre-training seeds of the LR sweep (LR_GRID), none of them a "
                                           "confirmation seed", "[int0]", recorded=True)
    LR_RULE: str = setting("lowest-mean-final", "how the sweep chooses each variant's LR (the only rule: the lowest "
                           "mean final validation loss over SWEEP_SEEDS, ties to the smaller LR, a diverged or NaN run "
                           "the worst; a best LR at the grid's edge widens the grid once by its ratio there)",
                           "lowest-mean-final", recorded=True)
    ENDPOINTS: str = setting("none", "the confirmatory comparisons, declared before the study runs: MEASURE:A:B, the "
                             "per-seed paired difference A - B of two MLM models (MEASURE: final_loss, loss_auc, "
                             "updates_to@TARGET with TARGET bits or halfway; tupe_study/endpoints.py), tested as one Holm family; everything else is exploratory (none: "
                             "nothing declared)", recorded=True)
    EQUIVALENCE_BITS: str = setting("none", "margin in bits, stated beforehand, within which a declared difference is "
                                    "called equivalent (TOST at 5%); none: never (a difference not shown is 'not "
                                    "resolved')", "none/num+", recorded=True)
    SIZE: str = preset_setting("pretrain.sh SIZE (the arch is VARIANT_SIZE)", recorded=True)
    MODEL_ARGS: ModelArgs = preset_setting("fairseq size flags over the arch (--encoder-layers ...; none: the "
                                           "arch's), then other fairseq flags for the model (--tupe-attention sdpa)",
                                           recorded=True, parsed_as=ModelArgs)
    VOCAB_SIZE: int = preset_setting("sentencepiece vocabulary", "int1", recorded=True)
    MAX_SHARDS: int = preset_setting("train files of C4_DIR to use (0: all)", "int0", recorded=True)
    MAX_DOCS: int = preset_setting("documents per train file (0: all)", "int0", recorded=True)
    TOKENS_PER_SAMPLE: int = preset_setting("tokens per pre-training sequence: the length T", "int1", recorded=True)
    SENTENCES_PER_UPDATE: int = preset_setting("sequences per pre-training update (pretrain.sh's; was BATCH_SIZE)",
                                               "int1", recorded=True)
    MAX_SENTENCES: int = preset_setting("sequences per forward (gradient accumulation makes up SENTENCES_PER_UPDATE)",
                                        "int1")
    TOTAL_UPDATES: int = preset_setting("pre-training budget per variant (updates)", "int1", recorded=True)
    WARMUP: int = preset_setting("pre-training warmup updates", "int0", recorded=True)
    LR: float = preset_setting("pre-training peak LR, then linear decay to 0 (pretrain.sh's; was PRETRAIN_LR)", "num+",
                               recorded=True)
    GENERATOR_SIZE_DIVISOR: Optional[int] = setting(
        "auto", "electra: generator width, FFN and heads = the discriminator's / N (auto: pretrain.sh's, 3 at "
        "SIZE=base, 4 otherwise; it must divide the MODEL_ARGS sizes)", "auto/int1", recorded=True, objective="electra")
    DISC_WEIGHT: float = setting("50", "electra: weight of the discriminator's loss (pretrain.sh DISC_WEIGHT)", "num0",
                                 recorded=True, objective="electra")
    VALID_POINTS: int = preset_setting("validations per pre-training run (the loss curve; a checkpoint each)", "int1",
                                       recorded=True)
    VALID_STEPS: int = preset_setting("batches per validation (the same first batches every time; 0: the whole set)",
                                      "int0", recorded=True)
    LENGTH_FACTORS: Tuple[int, ...] = setting("1 2 4", "the longer-inputs stage: validation loss at these multiples "
                                              "of T (the models get positions for the largest; 1: the stage is off)",
                                              "[int1]", recorded=True)
    ROPE_SCALINGS: Tuple[str, ...] = setting("linear ntk yarn", "the longer-inputs stage: every RoPE model is also "
                                             "measured with these RoPE scalings beyond T, s = L/T (tupe_study.longer_inputs;"
                                             " none: plain RoPE only)", f"[{'/'.join(ROPE_SCALED)}]")
    LRS: Tuple[float, ...] = preset_setting("fine-tuning LRs (per task: median over seeds per LR, best LR; "
                                            "tupe-grid's; was FT_LRS)", "[num+]", recorded=True)
    EPOCHS: Optional[int] = preset_setting("fine-tuning epochs (auto: tupe-finetune's per task; was FT_EPOCHS)",
                                           "auto/int1", recorded=True)
    SENTENCES_PER_BATCH: int = preset_setting("fine-tuning batch size (tupe-finetune's; was FT_BATCH)", "int1",
                                              recorded=True)
    EXTRA_ARGS: str = setting("--shorten-method truncate", "more fairseq-train arguments for fine-tuning "
                              "(tupe-finetune's; pre-training takes MODEL_ARGS; was FT_EXTRA_ARGS)", recorded=True)
    SEEDS: Tuple[int, ...] = preset_setting("fine-tuning seeds", "[int]")
    ORDER_WINDOWS: Tuple[int, ...] = setting("3 6", "the word-order stage: local shuffles in windows of these many "
                                             "words (and a fully random one; none: the stage is off)", "[int1]",
                                             recorded=True)
    LOC_LENGTH: int = preset_setting("T of the position-only maps", "int1", recorded=True)
    LOC_SENTENCES: int = preset_setting("held-out validation lines for the real attention maps", "int1", recorded=True)
    MIN_GAP_BITS: float = preset_setting("warn unless every variant ends this many bits below the unigram baseline",
                                         "num")
    GPUS: Optional[int] = setting("auto", "GPUs for pre-training (auto: all visible; 0: CPU)", "auto/int0")
    PREP_JOBS: int = setting(str(os.cpu_count() or 1), "C4 files preprocessed in parallel", "int1")
    NUM_WORKERS: int = setting("1", "data loader workers (0: in the main process)", "int0")

    @classmethod
    def others(cls) -> Dict[str, str]:
        """Other trainers' names of the study's settings: those of pretrain.sh's, finetune.sh's and grid.sh's
        settings that the study has by the same name (passed on as they are), except a name one of those scripts
        reads itself (finetune.sh's MAX_TOKENS is pre-training's fairseq name of MAX_SENTENCES)."""
        from tupe_glue.finetune import FinetuneConfig
        from tupe_glue.grid import GridConfig
        from tupe_pretrain.pretrain import PretrainConfig

        scripts = (PretrainConfig, FinetuneConfig, GridConfig)
        theirs = {name for script in scripts for name in script.names()}
        return {other: name for script in scripts for other, name in script.others().items()
                if name in FIELDS and other not in theirs}

    def recorded(self) -> Dict[str, str]:
        """NAME -> value of every recorded setting, in table order; an objective's settings only when OBJECTIVES
        has it: the lines of OUT/settings.env."""
        return {f.name: self.text(f.name) for f in dataclasses.fields(self) if f.metadata.get("recorded")
                and (not f.metadata.get("objective") or f.metadata["objective"] in self.OBJECTIVES)}


FIELDS: Dict[str, Any] = {f.name: f for f in dataclasses.fields(StudyConfig)}


def preset_path(preset: str) -> str:
    """The preset's file: PRESET itself when it is a file, else tupe_study/presets/PRESET.env."""
    if os.path.isfile(preset):
        return preset
    path = os.path.join(PRESETS_DIR, f"{preset}.env")
    if not os.path.isfile(path):
        names = " ".join(sorted(f[:-4] for f in os.listdir(PRESETS_DIR) if f.endswith(".env")))
        raise UsageError(f"PRESET={preset}: no file {path} (presets: {names})")
    return path


def read_preset(path: str) -> Dict[str, str]:
    """NAME=value lines of a preset; every preset setting must be there, and nothing else (an old name is read as
    its new one)."""
    values: Dict[str, str] = {}
    preset_names = [n for n, f in FIELDS.items() if f.metadata.get("preset")]
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = re.match(r"^([A-Z_0-9]+)=(.*)$", line.rstrip("\n"))
            if m:
                name = StudyConfig.RENAMED.get(m.group(1), m.group(1))
                if name not in preset_names:
                    raise UsageError(f"{path}:{lineno}: {m.group(1)} is not a preset setting "
                                     f"(a preset sets: {' '.join(preset_names)})")
                values[name] = m.group(2)
    lacking = [n for n in preset_names if n not in values]
    if lacking:
        raise UsageError(f"{path}: no line {lacking[0]}=... (every preset sets: {' '.join(preset_names)})")
    return values


def defaults(environ: Mapping[str, str]) -> Dict[str, str]:
    """Every setting's default: its own, or the preset's (PRESET from the environment)."""
    preset = read_preset(preset_path(environ.get("PRESET") or FIELDS["PRESET"].default))
    return {n: preset[n] if f.metadata.get("preset") else f.default for n, f in FIELDS.items()}


def read(environ: Mapping[str, str], say: Optional[Say] = None) -> StudyConfig:
    """The settings of ``environ``: a non-empty environment value, else the preset's or the setting's default
    (an old name sets the new one, with a warning to ``say``), each checked (UsageError naming it)."""
    return StudyConfig.read(environ, say, defaults(environ))


def recorded_text(config: StudyConfig) -> str:
    """The OUT/settings.env text: NAME=value of every recorded setting (:meth:`StudyConfig.recorded`)."""
    return "".join(f"{name}={value}\n" for name, value in config.recorded().items())


def declared_comment(when: datetime, commit: str) -> str:
    """The first line of a settings.env, written once with it: when the declaration was made and at which commit
    of this code (``tupe_study.timings.code_version``), so that a publication can say what was declared before what."""
    return f"# declared {when.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%SZ} at commit {commit}\n"


def _lines(text: str) -> Dict[str, str]:
    """NAME=value lines; an old name (a study recorded before the renaming) read as its new one. A comment line
    (``#``: the declared-at line, a note) is not a setting."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {StudyConfig.RENAMED.get(name, name): value for name, value in pairs}


def read_recorded(out: str) -> Dict[str, str]:
    """NAME=value of the study's OUT/settings.env (:func:`_lines`: comments left out, old names read as new), the
    sweep's second declaration among them; {} when the study has none."""
    path = os.path.join(out, "settings.env")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return _lines(f.read())


def _sorted_values(kind: str) -> Callable[[str], Any]:
    """A list setting whose order means nothing: its values, sorted (``2 1`` is ``1 2``; ``1e-3 3e-4`` is
    ``3e-4 0.001``). A repeated value is refused when the study reads it (tupe_study.plan), so a sorted tuple is its set."""
    return lambda text: tuple(sorted(parse(kind, text)))


def _variants_meaning(text: str) -> Any:
    """VARIANTS: the set of (variant, its own seeds as a set, or None: PRETRAIN_SEEDS'), names with dashes.
    Its order is the report's order of display only: the same variants with the same seeds are one design, so
    ``tupe-r bert-a`` resumes a study declared as ``bert-a tupe-r``. ``all`` stays the word (what it names
    depends on the registry of the day), and a variant without its own seeds is not resolved against
    PRETRAIN_SEEDS here (that is its own setting, compared on its own)."""
    return frozenset((name, None if seeds is None else tuple(sorted(seeds))) for name, seeds in variant_entries(text))


def _endpoints_meaning(text: str) -> Any:
    """ENDPOINTS: the set of (measure, target in bits, A, B) as ``parse_declaration`` reads them (model names with
    dashes: ``tupe_r`` is ``tupe-r``; a target by value: updates_to@9 is updates_to@9.0), in any order (one Holm
    family; the order is the report's display only). A:B and B:A stay apart: one question (refused as a repeat
    within one declaration), but the report's signs and intervals follow its direction."""
    return frozenset((e.measure, e.target_bits(-1.0), e.a, e.b) for e in parse_declaration(text))


# setting -> its canonical value, where more than its kind's parse (below): the settings whose written order or
# spelling says nothing of the design. Every other setting means its kind's parse (5e-4,1e-3 is 5e-4 1e-3; 1e-3 is
# 0.001), or its text when it is not of its kind.
MEANINGS: Dict[str, Callable[[str], Any]] = {
    "VARIANTS": _variants_meaning,
    "PRETRAIN_SEEDS": _sorted_values("[int0]"),
    "SWEEP_SEEDS": _sorted_values("[int0]"),
    "LR_GRID": _sorted_values("[num+]"),
    "ENDPOINTS": _endpoints_meaning,
}


def canonical(name: str, text: str) -> Any:
    """What the written value ``text`` of setting ``name`` means: one value per meaning, so that two spellings of
    one declaration compare equal (:func:`_same`). A text that is not of the setting's kind, or not parsed, means
    itself."""
    kind = FIELDS[name].metadata["kind"] if name in FIELDS else ""
    if not fits(kind, text):
        return text
    try:
        return MEANINGS[name](text) if name in MEANINGS else parse(kind, text)
    except (ValueError, UsageError):
        return text


def _same(name: str, a: str, b: str) -> bool:
    """Two written values of setting ``name`` mean the same (:func:`canonical`)."""
    return a == b or canonical(name, a) == canonical(name, b)


def _not_compared(name: str, old: Mapping[str, str]) -> bool:
    """A setting a recorded settings.env lacks, and does not need: an objective's (the study had no models of
    it) or one recorded only since (``skip_unrecorded``: the older study never declared it)."""
    meta = FIELDS[name].metadata if name in FIELDS else {}
    return name not in old and bool(meta.get("objective") or meta.get("skip_unrecorded"))


def changed_settings(recorded: str, now: str) -> List[str]:
    """Lines that differ in meaning between a recorded settings.env and this run's ('< old', '> new'); a setting
    that an older study did not record is compared only when the new value is not its default, except an
    objective's setting (a study without that objective's models never used it) and VARIANTS and PRETRAIN_SEEDS
    (recorded since 2026-12: an older study's design was never declared)."""
    old, new = _lines(recorded), _lines(now)
    out = []
    for name, value in new.items():
        if _not_compared(name, old):
            continue
        before = old[name] if name in old else FIELDS[name].default
        if not _same(name, before, value):
            out += ([f"< {name}={old[name]}"] if name in old else []) + [f"> {name}={value}"]
    return out


def refusal(path: str, diff: Sequence[str], what: str, advice: str) -> UsageError:
    """The refusal of a run whose settings differ in meaning from those recorded in ``path``: the differing lines
    (``diff``, :func:`changed_settings`) are written to stderr here, and the error, to raise, is one line naming the
    settings, so that the command's last line is its ``error:`` line."""
    sys.stderr.write("".join(f"{line}\n" for line in diff))
    sys.stderr.flush()
    names = ", ".join(dict.fromkeys(line[2:].split("=", 1)[0] for line in diff))
    return UsageError(f"{path} differs from {what} in {names} (the lines above: recorded <, now >); {advice}")


def merged_text(recorded: str, now: str) -> str:
    """settings.env after a run that ``changed_settings`` accepted: the recorded text as it was (its comment lines
    too), then this run's lines that were not recorded yet (an objective's settings, once it has models); an older
    study is not given VARIANTS or PRETRAIN_SEEDS after the fact (it did not declare them before it ran)."""
    old = _lines(recorded)
    added = "".join(f"{n}={v}\n" for n, v in _lines(now).items()
                    if n not in old and not (n in FIELDS and FIELDS[n].metadata.get("skip_unrecorded")))
    return recorded + ("\n" if recorded and not recorded.endswith("\n") and added else "") + added


def variant_entries(text: str) -> List[Tuple[str, Optional[Tuple[int, ...]]]]:
    """VARIANTS as written -> its entries (name with dashes, its own seeds or None), in the order given; ``all`` is
    the entry ``("all", None)``. A malformed entry, a name given twice (``tupe-r tupe_r``, ``bert-a bert-a:1,2``:
    one variant is one entry, with its seeds) or a seed given twice in one entry (``bert-a:1,1``) is a UsageError.
    A name is not checked against the registry here (:func:`parse_variants`)."""
    out: List[Tuple[str, Optional[Tuple[int, ...]]]] = []
    given: Dict[str, str] = {}  # name -> the entry that gave it
    for entry in _entries(text):
        if "+" in entry:
            raise UsageError(f"VARIANTS entry '{entry}': the objectives are chosen for every variant with OBJECTIVES "
                             "(e.g. OBJECTIVES=\"mlm electra\"), not in VARIANTS")
        try:
            ((label, seeds),) = split_variants(entry)  # the one grammar of an entry
        except ValueError:
            label = ""
        if not re.fullmatch(r"[a-z0-9_-]+", label):
            raise UsageError(f"VARIANTS entry '{entry}': write NAME or NAME:SEED,SEED (e.g. bert-a:1,2), or all")
        name = label.replace("_", "-")
        if name in given:
            raise UsageError(f"VARIANTS entries '{given[name]}' and '{entry}' name {name} twice: name each variant "
                             "once (with its own seeds, NAME:1,2, if it has them)")
        given[name] = entry
        if seeds is not None:
            check_once(f"VARIANTS entry '{entry}'", seeds, "seed")
        out.append((name, seeds))
    return out


def _entries(text: str) -> List[str]:
    """Space-separated entries; names without seeds may also be separated by commas."""
    return [e for token in text.split() for e in ([token] if ":" in token else token.split(",")) if e]


def split_variants(text: str) -> List[Tuple[str, Optional[Tuple[int, ...]]]]:
    """VARIANTS' grammar, for what was checked when it was read (the report's --variants, whose labels may be
    V+electra; an archive's settings.env): each entry LABEL or LABEL:SEED,SEED -> (LABEL, its seeds or None), in
    order; a ValueError names an entry that is neither. :func:`variant_entries` reads the setting itself."""
    out: List[Tuple[str, Optional[Tuple[int, ...]]]] = []
    for entry in _entries(text):
        label, colon, own = entry.partition(":")
        if not label or (colon and not re.fullmatch(r"[0-9]+(?:,[0-9]+)*", own)):
            raise ValueError(f"variant entry {entry!r}: write NAME or NAME:SEED,SEED,...")
        out.append((label, tuple(int(s) for s in own.split(",")) if colon else None))
    return out
