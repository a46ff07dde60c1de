"""One study, resolved and checked before any work: its settings, variants, tasks, folders and parts.

``Plan.from_environ`` turns the settings (``tupe_study.settings``) into the lists the stages iterate over and
refuses, with a usage error, anything that would fail later: an unknown variant name is refused here,
before the data is prepared, not part by part afterwards.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from tupe_study.report_spec import ReportSpec
from tupe_study.settings import (StudyConfig, changed_settings, declared_comment, merged_text, read, recorded_text,
                                 refusal, variant_entries)
from tupe_study.timings import code_version
from tupe_common.errors import UsageError
from tupe_common.io import write_text
from tupe_common.numbers import check_once

if TYPE_CHECKING:
    from tupe_study.sweep import Choice


OBJECTIVES = ("mlm", "electra")  # pretrain.sh's OBJECTIVE values


@dataclass(frozen=True)
class Entry:
    """One model of the study: a registered variant (dashes, as pretrain.sh's VARIANT), its pre-training
    seeds and its objective. ``label`` names it in the folders, the parts and the report: the variant for
    MLM (the folders of studies from before objectives), ``V+electra`` for ELECTRA."""

    name: str
    seeds: Tuple[int, ...]
    objective: str = "mlm"

    @property
    def label(self) -> str:
        return self.name if self.objective == "mlm" else f"{self.name}+{self.objective}"




def registry() -> Dict[str, str]:
    """Every registered variant, in registry order, with its one-line description (dashes in the name)."""
    from tupe_core.registry import about as variant_about

    return variant_about()




def parse_variants(text: str, default_seeds: Sequence[int], known: Mapping[str, str]) -> List[Entry]:
    """VARIANTS -> entries in report order. ``all`` is every registered variant in registry order; an entry
    NAME:S1,S2 gives a variant its own seeds (also after ``all``: ``all bert-a:1,2,3`` keeps bert-a in its
    registry place). A name that is not registered is a UsageError naming the registered ones; so is a name or a
    seed given twice (:func:`variant_entries`)."""
    order: List[str] = []
    seeds: Dict[str, Tuple[int, ...]] = {}
    for name, own in variant_entries(text):
        if name == "all":
            order += [n for n in known if n not in order]
            continue
        if name not in known:
            raise UsageError(f"VARIANTS: '{name}' is not a registered variant; the registered ones, in "
                             f"registry order: {' '.join(known)} (or all)")
        if name not in order:
            order.append(name)
        if own:
            seeds[name] = own
    if not order:
        raise UsageError("VARIANTS must not be empty")
    return [Entry(n, seeds.get(n, tuple(default_seeds))) for n in order]




def check_design(c: StudyConfig, variants: Sequence[Entry]) -> None:
    """The declared lists, each value once (``tupe_common.numbers.check_once``: by value, so 1e-3 and 0.001 are one
    LR), and the sweep's seeds apart from the
    confirmation's: a sweep seed that is also a confirmation seed would choose the LR on the very runs that
    then test it."""
    check_once(f"PRETRAIN_SEEDS='{c.text('PRETRAIN_SEEDS')}'", c.PRETRAIN_SEEDS, "seed")
    check_once(f"SWEEP_SEEDS='{c.text('SWEEP_SEEDS')}'", c.SWEEP_SEEDS, "seed")
    check_once(f"LR_GRID='{c.text('LR_GRID')}'", c.LR_GRID, "LR")
    check_once(f"LRS='{c.text('LRS')}'", c.LRS, "LR")
    check_once(f"SEEDS='{c.text('SEEDS')}'", c.SEEDS, "seed")
    confirmation = set(c.PRETRAIN_SEEDS) | {s for e in variants for s in e.seeds}
    shared = sorted(set(c.SWEEP_SEEDS) & confirmation)
    if shared:
        raise UsageError(f"SWEEP_SEEDS='{c.text('SWEEP_SEEDS')}' shares seed(s) {' '.join(map(str, shared))} with the "
                         "confirmation seeds (PRETRAIN_SEEDS and the variants' own): the sweep chooses each LR on "
                         "seeds of its own, so that the confirmation tests it on fresh ones")


def check_generator(config: StudyConfig, variant: str) -> None:
    """ELECTRA's generator sizes (tupe_plugin.models.electra) from SIZE, MODEL_ARGS and GENERATOR_SIZE_DIVISOR:
    a divisor that does not divide the discriminator is refused here rather than after the data is prepared."""
    import argparse

    from tupe_core.facts import SIZES, generator_divisor, generator_sizes

    if config.SIZE not in SIZES:
        return  # pretrain.sh names the unknown size
    size = config.MODEL_ARGS.over(SIZES[config.SIZE])  # the sizes MODEL_ARGS sets replace the arch's
    args = argparse.Namespace(arch=f"{variant}_{config.SIZE}".replace("-", "_"), **size.args())
    try:
        generator_sizes(args, generator_divisor(args, config.GENERATOR_SIZE_DIVISOR or 0))
    except ValueError as e:
        raise UsageError(f"OBJECTIVES has electra, but GENERATOR_SIZE_DIVISOR={config.text('GENERATOR_SIZE_DIVISOR')}: "
                         f"{e}: set GENERATOR_SIZE_DIVISOR") from None


def task_names(tasks: str, tasks_dir: str) -> List[str]:
    if tasks == "auto":
        if not tasks_dir:
            raise UsageError("TASKS_DIR is required (or TASKS=none for pre-training only)")
        found = [d for d in sorted(os.listdir(tasks_dir)) if os.path.isfile(os.path.join(tasks_dir, d, "train.tsv"))
                 and os.path.isfile(os.path.join(tasks_dir, d, "dev.tsv"))] if os.path.isdir(tasks_dir) else []
        if not found:
            raise UsageError(f"TASKS_DIR={tasks_dir} has no TASK/train.tsv + TASK/dev.tsv")
        return found
    names = [] if tasks == "none" else tasks.replace(",", " ").split()
    check_once(f"TASKS='{tasks}'", names, "task")  # one run folder each
    return names


def check_out(out: str) -> None:
    """OUT must be a folder of the study's own: one that holds Python source is code (``OUT=study`` from the
    repository root is the study package itself), and the study would write its folders among it."""
    code = sorted(f for f in os.listdir(out) if f.endswith(".py")) if os.path.isdir(out) else []
    if code:
        raise UsageError(f"OUT={out} holds Python source ({', '.join(code[:3])}): the study writes its folders into "
                         "OUT; name a folder of its own, e.g. OUT=runs/study (git ignores runs/)")


@dataclass
class Plan:
    config: StudyConfig  # every setting, typed (tupe_study.settings)
    variants: List[Entry]
    tasks: List[str]
    about: Dict[str, str] = field(default_factory=dict)  # variant -> one-line description
    report_spec: ReportSpec = field(default_factory=ReportSpec)  # the declaration the report states and tests

    @property
    def lrs(self) -> List[str]:
        """The fine-tuning LRs as written (the run folders name them by value: ``finetune_dir``)."""
        return [str(lr) for lr in self.config.LRS]

    @property
    def seeds(self) -> List[int]:
        return list(self.config.SEEDS)

    @property
    def length_factors(self) -> List[int]:
        return list(self.config.LENGTH_FACTORS)

    @property
    def order_windows(self) -> List[int]:
        return list(self.config.ORDER_WINDOWS)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], known: Optional[Mapping[str, str]] = None) -> "Plan":
        c = read(environ)
        if not c.OUT:
            raise UsageError("OUT is required: the study's folder")
        check_out(c.OUT)
        if c.WARMUP >= c.TOTAL_UPDATES:
            raise UsageError(f"WARMUP={c.WARMUP} must be a whole number below TOTAL_UPDATES={c.TOTAL_UPDATES}")
        if c.VALID_POINTS > c.TOTAL_UPDATES:
            raise UsageError(f"VALID_POINTS={c.VALID_POINTS} exceeds TOTAL_UPDATES={c.TOTAL_UPDATES}")
        if c.LOC_LENGTH > c.TOKENS_PER_SAMPLE:
            raise UsageError(f"LOC_LENGTH={c.LOC_LENGTH} exceeds the {c.TOKENS_PER_SAMPLE} positions "
                             "(TOKENS_PER_SAMPLE)")
        factors = list(c.LENGTH_FACTORS)
        if not factors or factors[0] != 1 or factors != sorted(set(factors)):
            raise UsageError(f"LENGTH_FACTORS must start with 1 and increase (e.g. 1 2 4), not "
                             f"'{c.text('LENGTH_FACTORS')}'")
        if any(w < 2 for w in c.ORDER_WINDOWS):
            raise UsageError(f"ORDER_WINDOWS are window sizes of at least 2 words, not '{c.text('ORDER_WINDOWS')}'")
        if not c.PRETRAIN_SEEDS:
            raise UsageError("PRETRAIN_SEEDS must not be empty")
        if not c.OBJECTIVES or len(set(c.OBJECTIVES)) < len(c.OBJECTIVES):
            raise UsageError(f"OBJECTIVES: one or more of {' '.join(OBJECTIVES)}, each once, not "
                             f"'{c.text('OBJECTIVES')}'")
        if c.LR_GRID or c.SWEEP_SEEDS:
            if len(c.LR_GRID) < 2 or not c.SWEEP_SEEDS:
                raise UsageError(f"LR_GRID='{c.text('LR_GRID')}' SWEEP_SEEDS='{c.text('SWEEP_SEEDS')}': a sweep needs "
                                 "two or more LRs and one or more sweep seeds (or neither: every variant at LR)")
        known = registry() if known is None else known
        variants = parse_variants(c.VARIANTS, c.PRETRAIN_SEEDS, known)
        check_design(c, variants)
        if "electra" in c.OBJECTIVES:
            check_generator(c, variants[0].name)
        # objective-major: the MLM entries in VARIANTS order, then the same variants with ELECTRA
        entries = [Entry(e.name, e.seeds, o) for o in c.OBJECTIVES for e in variants]
        spec = ReportSpec.declare(c.ENDPOINTS, c.text("EQUIVALENCE_BITS"))  # the one parse of the declaration
        spec.check({e.label: e.seeds for e in entries if e.objective == "mlm"})
        if any(e.target == "halfway" for e in spec.endpoints) and not c.LR_GRID:
            raise UsageError("ENDPOINTS: updates_to@halfway takes its target from the LR sweep (B's mean final loss "
                             "at its chosen LR): set LR_GRID and SWEEP_SEEDS, or give the target in bits "
                             "(updates_to@9.0:A:B)")
        return cls(c, entries, task_names(c.TASKS, c.TASKS_DIR), {e.name: known[e.name] for e in variants}, spec)

    # ---- folders ------------------------------------------------------------------------------------------
    @property
    def out(self) -> str:
        return self.config.OUT

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def entry(self, label: str) -> Entry:
        return next(e for e in self.variants if e.label == label)

    def pretrain_dir(self, label: str, seed: int) -> str:
        return self.path("pretrain", label, f"seed{seed}")

    def finetune_dir(self, label: str, seed: int, task: str, lr: str, k: int) -> str:
        """A fine-tuning run's folder (``tupe_glue.finetune.run_name``: ``lr5e-4_seed1`` as typed before, else the LR's
        short spelling)."""
        from tupe_glue.finetune import run_name

        runs = self.path("finetune", label, f"seed{seed}")
        return os.path.join(runs, task, run_name(runs, task, float(lr), k))

    @property
    def valid_interval(self) -> int:
        return self.config.TOTAL_UPDATES // self.config.VALID_POINTS

    @property
    def max_positions(self) -> int:
        """Positions every model is pre-trained with: room for the longest length of the longer-inputs stage."""
        return self.config.TOKENS_PER_SAMPLE * self.length_factors[-1]

    # ---- parts --------------------------------------------------------------------------------------------
    def pretrain_parts(self) -> List[Tuple[str, int]]:
        """(entry label, pre-training seed) of every model, the stages' first argument the label. Seed by seed:
        every entry's first seed comes before any second, so a study cut short leaves complete pairs."""
        most = max((len(e.seeds) for e in self.variants), default=0)
        return [(e.label, e.seeds[i]) for i in range(most) for e in self.variants if i < len(e.seeds)]

    def sweep_choices(self) -> List["Choice"]:
        """Every MLM model's LR sweep as far as it has run (``tupe_study.sweep``); [] without LR_GRID."""
        from tupe_study.sweep import choices

        if not self.config.LR_GRID:
            return []
        labels = [e.label for e in self.variants if e.objective == "mlm"]
        return choices(self.out, labels, [float(x) for x in self.config.LR_GRID], list(self.config.SWEEP_SEEDS),
                       self.config.TOTAL_UPDATES)

    def sweep_parts(self) -> List[Tuple[str, str, int]]:
        """(label, LR, sweep seed) of every sweep run (the widened LRs once the declared grid's runs are done)."""
        from tupe_study.sweep import parts

        return parts(self.sweep_choices(), list(self.config.SWEEP_SEEDS))

    def finetune_parts(self) -> List[Tuple[str, int, str, str, int]]:
        """Fine-tuning seed first: every model's first seed comes before any second, so a report on an
        unfinished study already compares every model."""
        return [(v, s, t, lr, k) for k in self.seeds for v, s in self.pretrain_parts() for t in self.tasks
                for lr in self.lrs]

    def models_text(self) -> str:
        """``4 variants`` or ``2 variants x objectives mlm, electra``."""
        objectives = list(dict.fromkeys(e.objective for e in self.variants))
        n = len({e.name for e in self.variants})
        return f"{n} variant{'s' if n > 1 else ''}" + (f" x objectives {', '.join(objectives)}"
                                                        if objectives != ["mlm"] else "")

    def variants_text(self) -> str:
        """VARIANTS as the report reads it: every entry with its seeds."""
        return " ".join(f"{e.label}:{','.join(map(str, e.seeds))}" for e in self.variants)


def check_settings(plan: Plan, write: bool = True) -> None:
    """The recorded settings of OUT, the study's declaration: written by the first run, before any part, under a
    first line saying when and at which commit (``# declared ...``); a run whose settings mean otherwise is
    refused (tupe_study.settings.changed_settings). A reader (the report, the archive: ``write`` False) checks and
    writes nothing, so it may run beside a study that holds OUT."""
    now, path = recorded_text(plan.config), plan.path("settings.env")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            recorded = f.read()
        diff = changed_settings(recorded, now)
        if diff:
            raise refusal(path, diff, "this run's settings", "a study compares its variants under the one design it "
                          "declared: use another OUT, or set these back")
        if write and merged_text(recorded, now) != recorded:  # e.g. the first run with ELECTRA records its settings
            write_text(path, merged_text(recorded, now))
    elif write:
        os.makedirs(plan.out, exist_ok=True)
        write_text(path, declared_comment(datetime.now(timezone.utc), code_version()) + now)
