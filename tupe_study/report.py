"""The study's report: ``python -m tupe_study.report OUT --variants ...`` (the ``report`` stage runs it).

Writes ``OUT/report.md``, ``OUT/study.csv`` (one row per variant), ``OUT/correlation.csv``,
``OUT/differences.csv`` (every downstream difference with its interval), ``OUT/order.csv`` (the word-order
drops) and ``OUT/overview.png`` (``tupe_study.figure``). Everything missing is listed in the report.

Units: fairseq's ``masked_lm`` criterion logs its loss in bits (``loss / sample_size / log(2)``, in
``fairseq/criterions/masked_lm.py``), so the unigram baseline is the entropy of the training tokens in
bits (docs/study.md explains the baseline and every other measure). An ELECTRA model (``V+electra``) logs
other quantities (``tupe_plugin/criterions/electra.py``: the generator's MLM loss, the discriminator's BCE, both
in bits): they have a table of their own, out of the MLM-loss comparisons and the unigram check; downstream,
every model is compared with every other whatever its objective.

This module is the command: it reads the study (``tupe_study.runs``), computes the numbers
(``tupe_study.report_tables``: the rows, correlations and checks, importable from here as before) and the
declared comparisons' tests (``tupe_study.endpoint_report``), and writes the text (``tupe_study.report_markdown``).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List, Optional, Sequence

from tupe_study import flatness, sweep
from tupe_study.compare import bootstrap_pairs, order_drops, paired_differences
from tupe_study.endpoint_report import declared_tests
from tupe_study.endpoints import logged_resolution
from tupe_study.report_markdown import report_markdown
from tupe_study.report_spec import ReportSpec
from tupe_study.report_tables import (CORRELATION_COLUMNS, ELECTRA_MIN_GAIN, MEASURES, correlation_family,  # noqa: F401
                                      correlations, rate_entropy_bits, seed_noise, untrained_discriminators,
                                      variant_row, weak_variants, write_tables)
from tupe_study.runs import ELECTRA_KEYS, Variant, curve_holes, load_study, run_section, token_counts, variant_seeds
from tupe_common.errors import command_name, UsageError, exit_main
from tupe_common.io import read_data_path, write_text
from tupe_study.stats import entropy_bits
from tupe_study.valid_se import small_split_problem
from tupe_study.valid_se import section_lines as valid_se_lines


def unigram_baseline(out: str, data: Optional[str] = None) -> float:
    """The entropy (bits) of the training tokens of ``data`` (a fairseq data path or a folder with data_path.txt;
    default OUT/c4/data-bin): the MLM loss of a model that ignores context."""
    return entropy_bits(token_counts(":".join(read_data_path(data or os.path.join(out, "c4", "data-bin")))))


def leave_out_unfit_curves(study: Sequence[Variant], total_updates: int, valid_interval: int,
                           problems: List[str]) -> None:
    """Name among ``problems``, and leave out, each pre-training whose losses cannot be read as final: a NaN or
    infinite loss (diverged), a last validation before the budget (unfinished); name the holes of a curve."""
    for model in study:
        for run in model.seeds:
            logged = run.curve or run.electra.get(ELECTRA_KEYS[0], {})
            diverged = [u for u, x in sorted(logged.items()) if not math.isfinite(x)]
            if diverged:  # a NaN or infinite loss: named, left out, and the report goes on
                problems.append(f"{model.name} seed {run.seed}: validation loss {logged[diverged[0]]} at update "
                                f"{diverged[0]} (diverged): its losses are left out of every table and test")
                run.curve, run.electra = {}, {}
                continue
            if logged and max(logged) < total_updates:  # still running, or stopped: its last loss is no final
                problems.append(f"{model.name} seed {run.seed}: pre-training unfinished (last validation at update "
                                f"{max(logged)} of {total_updates}): its losses are left out until it finishes")
                run.curve, run.electra = {}, {}
                continue
            holes = curve_holes(logged, valid_interval, total_updates)
            if holes:
                problems.append(f"{model.name} seed {run.seed}: no validation logged at update(s) "
                                f"{', '.join(map(str, holes))}, so its curve points there are read from the nearest "
                                "validation (a resumed run's log lost the lines before its kill, before 24674e3)")


def parser() -> argparse.ArgumentParser:
    """The command's arguments (tupe_study.stages.report_argv writes them; an archive's report.json keeps them)."""
    p = argparse.ArgumentParser(prog=command_name("python -m tupe_study.report"), description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the study folder (OUT of tupe-study)")
    p.add_argument("--variants", required=True, help="model labels in report order, space-separated (a variant, "
                   "or V+electra for its ELECTRA model); NAME:S1,S2 gives a model its own pre-training seeds")
    p.add_argument("--pretrain-seeds", default="1", help="pre-training seeds of the variants without their own (default 1)")
    p.add_argument("--total-updates", type=int, required=True, help="pre-training budget in updates")
    p.add_argument("--data", help="fairseq data path a:b:c or a folder with data_path.txt (unigram baseline; "
                                  "default OUT/c4/data-bin)")
    p.add_argument("--valid-interval", type=int, default=0,
                   help="updates between validations (study.sh: TOTAL_UPDATES / VALID_POINTS): a curve that lacks one "
                        "is named among the report's problems (default 0: not checked)")
    p.add_argument("--unigram-bits", type=float, help="the unigram baseline in bits, instead of computing it from "
                   "--data (an archive of the study keeps it, not the data: tupe_study.archive)")
    p.add_argument("--min-gap-bits", type=float, default=1.0,
                   help="warn unless every variant ends this many bits below the unigram baseline (default 1)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--finetune-grid", metavar="TASKS:LRS:SEEDS",
                   help="the fine-tuning runs every model should have, e.g. SST-2,RTE:1e-5,2e-5:1,2,3; "
                        "the report names each model seed that lacks some (default: only those with none); none: the "
                        "study fine-tunes nothing (TASKS=none), so no run is missing")
    p.add_argument("--endpoints", default="none", help="the declared comparisons, MEASURE:A:B or "
                   "updates_to@TARGET:A:B ... (tupe_study/endpoints.py; default none: everything exploratory)")
    p.add_argument("--updates-to-target", type=float, metavar="BITS",
                   help="the resolved target of updates_to@halfway endpoints, in bits (tupe_study.endpoints.halfway_target); "
                        "without it they are not tested")
    p.add_argument("--equivalence-bits", default="none", help="the declared equivalence margin in bits (default none)")
    p.add_argument("--warmup", type=int, help="pre-training warmup updates (the LR schedule that the flatness check "
                   "weighs the loss changes by; default: WARMUP of OUT/settings.env, else 0)")
    p.add_argument("--title", default="Study report")
    return p


def study_relative(line: str, out: str) -> str:
    """A problem line with the study folder's own path left out (``pretrain/B/seed1/train.log`` for
    ``OUT/pretrain/B/seed1/train.log``): the report of a study and that of its archive, another folder, read the same,
    and a published report does not carry the machine's paths."""
    for prefix in dict.fromkeys((os.path.join(out, ""), os.path.join(os.path.abspath(out), ""))):
        line = line.replace(prefix, "")
    return line


def main(argv: Optional[Sequence[str]] = None, spec: Optional[ReportSpec] = None) -> int:
    """The report of the study ``argv[0]``. ``spec``: the declaration to state and test (the plan's, or an archive's
    report_spec.json); without one, that of --endpoints, --equivalence-bits and --updates-to-target."""
    p = parser()
    args = p.parse_args(argv)
    from tupe_common.io import need

    need(args.out, "folder")  # a study folder that is not there, or a file: one line naming it, exit 1
    seeds = [int(s) for s in args.pretrain_seeds.replace(",", " ").split()]
    try:
        variants = variant_seeds(args.variants, seeds)
    except ValueError as e:
        p.error(str(e))
    grid = None
    if args.finetune_grid == "none":
        grid = ([], [], [])
    elif args.finetune_grid:
        lists = [x.split(",") for x in args.finetune_grid.split(":")]
        try:
            if len(lists) != 3 or not all(all(items) for items in lists):
                raise ValueError
            for lr in lists[1]:
                float(lr)  # a number, kept as written for the report
            grid = (lists[0], lists[1], [int(k) for k in lists[2]])
        except ValueError:
            p.error(f"--finetune-grid {args.finetune_grid!r}: write TASK,TASK:LR,LR:SEED,SEED")
    problems: List[str] = []
    unigram: Optional[float] = args.unigram_bits
    if unigram is None:
        try:
            unigram = unigram_baseline(args.out, args.data)
        except (OSError, ValueError) as e:
            problems.append(f"unigram baseline not computed: {e}")
    study = load_study(args.out, variants, problems, grid)
    leave_out_unfit_curves(study, args.total_updates, args.valid_interval, problems)
    columns = sorted({c for v in study for s in v.seeds for c in s.tasks})
    drops = order_drops(study, problems)
    rows = [variant_row(v, columns, args.total_updates, unigram, drops) for v in study]
    weak = weak_variants(rows, unigram, args.min_gap_bits)
    corr = correlation_family(correlations(rows) + (correlations(rows, weak) if weak else []))
    mlm = [v for v in study if v.objective == "mlm"]
    resolution = logged_resolution([x for v in study for s in v.seeds
                                    for x in list(s.curve.values()) + list(s.electra.get("gen_loss", {}).values())])
    loss_pairs = paired_differences({v.name: {s.seed: s.final for s in v.seeds if s.final is not None} for v in mlm},
                                    resolution)
    gen_pairs = paired_differences({v.name: {s.seed: s.electra_final("gen_loss") for s in v.seeds
                                             if s.electra_final("gen_loss") is not None}
                                    for v in study if v.objective == "electra"}, resolution)
    intervals = bootstrap_pairs(study, columns, problems, args.resamples)  # every model, whatever its objective
    try:
        if spec is None:  # the declaration of the command line (an archive written before report_spec.json)
            spec = ReportSpec.declare(args.endpoints, args.equivalence_bits, args.updates_to_target)
        spec.check({v.name: [s.seed for s in v.seeds] for v in mlm})
    except UsageError as e:
        p.error(str(e))
    declared, margin, halfway = list(spec.endpoints), spec.margin, spec.updates_to_target
    if halfway is not None and not (halfway > 0 and math.isfinite(halfway)):
        p.error(f"--updates-to-target {halfway:g}: give the resolved target, a positive number of bits")
    finished = {v.name: [s for s in v.seeds if s.curve and max(s.curve) >= args.total_updates] for v in mlm}
    endpoints = declared_tests(declared, finished, args.total_updates, resolution, margin, halfway)
    problems += [x for x in [small_split_problem(args.out)] if x]
    sections = {"valid_se": valid_se_lines(args.out, mlm, declared, margin),
                "sweep": sweep.report_section(args.out, [v.name for v in mlm], args.total_updates, declared, finished),
                "flatness": flatness.report_section(finished, declared, flatness.recorded_warmup(args.out, args.warmup),
                                                    args.total_updates)}
    problems = [study_relative(line, args.out) for line in problems]
    md = report_markdown(rows, columns, study, args.total_updates, unigram, args.min_gap_bits, corr, loss_pairs,
                         intervals, drops, problems, args.title, run_section(args.out), gen_pairs, endpoints,
                         spec.text, resolution, sections)
    write_tables(args.out, rows, corr, study, columns, intervals, endpoints, declared, drops)
    write_text(os.path.join(args.out, "report.md"), md)
    from tupe_study.figure import overview

    overview(os.path.join(args.out, "overview.png"), study, rows, columns, [c for c in corr if not c["without"]],
             unigram, endpoints, weak)
    print(md, end="")
    if weak:
        print(f"\nWARNING: {', '.join(weak)} did not end {args.min_gap_bits:g} bit(s) below the unigram baseline "
              f"({unigram:.3f} bits): this preset is not fit for comparing positional encodings.", file=sys.stderr)
    untrained = untrained_discriminators(rows)
    if untrained:
        print(f"\nWARNING: the discriminator of {', '.join(untrained)} ended less than {100 * ELECTRA_MIN_GAIN:g}% "
              "below the entropy of the replace rate: ELECTRA is not trained yet at this preset.", file=sys.stderr)
    print(f"\nwrote {args.out}/report.md, study.csv, endpoints.csv, correlation.csv, differences.csv, order.csv, overview.png",
          file=sys.stderr)
    return 0


def cli() -> None:
    """The console script ``tupe-study-report``."""
    exit_main(main, "tupe-study-report")


if __name__ == "__main__":
    exit_main(main, "python -m tupe_study.report")
