"""The report's Markdown (``report_markdown``): the sections in their order, each from the numbers of
``tupe_study.report_tables`` and the declared comparisons' lines (``tupe_study.endpoint_report``); the sections
other modules render come in as lines (the sweep, the flatness check, the validation set's standard error)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from tupe_study.compare import AVERAGE, PAIRED_BOOTSTRAP, T_TEST, Interval, OrderDrop, Paired
from tupe_study.endpoint_report import endpoint_lines
from tupe_study.endpoints import EndpointResult
from tupe_study.markdown import fmt as _f, fmt_p as _p
from tupe_study.longer_inputs import ROPE_SCALED
from tupe_study.noise import DRAWS, span_tests
from tupe_study.report_tables import (ELECTRA_MIN_GAIN, FRACTIONS, beyond_noise, seed_noise, untrained_discriminators,
                                      weak_variants)
from tupe_study.runs import Variant, loss_at, split_label

NOPE_TOLERANCE = 1.0  # points: nope's drop on a shuffle must be within this of 0 (it cannot see word order)
SHOW_ALL_PAIRS = 28  # the report lists every pair up to this many (8 variants); beyond, differences.csv does


def _fraction_header(variants: Sequence[Variant], frac: float, total_updates: int) -> str:
    """The column of the loss at ``frac`` of the budget, naming the validation it reads where there is none at that
    update (each curve's nearest, ties the earlier: ``tupe_study.runs.loss_at``)."""
    wanted = round(frac * total_updates)
    read = sorted({loss_at(s.curve, wanted)[1] for v in variants if v.objective == "mlm" for s in v.seeds if s.curve})
    head = f"@{int(frac * 100)}%"
    return head if read in ([], [wanted]) else f"{head} (read at {', '.join(map(str, read))})"


def _correlation_table(corr: Sequence[Dict]) -> List[str]:
    L = ["| measure | n variants | Spearman | p (permutation) | Holm p (all correlations) | Pearson |",
         "|---|---|---|---|---|---|"]
    return L + [f"| {c['measure']} | {c['n']} | {_f(c['spearman'])} | {_f(c['spearman_p'])} | {_f(c['p_holm'])} | "
                f"{_f(c['pearson'])} |" for c in corr]


def _correlation_family_lines(corr: Sequence[Dict]) -> List[str]:
    """Which correlations survive Holm over the report's family of them (none without a p)."""
    if not corr or not corr[0]["family_size"]:
        return []
    survive = [c["measure"] for c in corr if c["p_holm"] <= 0.05]
    return [f"Holm p: adjusted over every correlation this report computes, one family of {corr[0]['family_size']} "
            "(each measure of each objective, with and without the unfit variants); below 0.05 after it: "
            + ("; ".join(survive) if survive else "none") + "."]


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a bare | would split the cell (``|j-i|``)."""
    return text.replace("|", "\\|")


def _paired_lines(pairs: List[Paired], n_seeds: int, what: str, resolution: float) -> List[str]:
    if not pairs:
        return ["No pairs.", ""]
    shown, L = pairs, []
    if n_seeds >= 2 and len(pairs) > SHOW_ALL_PAIRS:  # one shared seed measures no spread: listed only in small studies
        shown = [p for p in pairs if len(p.diffs) >= 2]
        L += [f"{len(pairs) - len(shown)} of the {len(pairs)} pairs share one pre-training seed: not listed, since one "
              "seed measures no spread (each variant's loss per seed: `final_valid_loss_by_seed` in `study.csv`).", ""]
    seeds = sorted({s for p in shown for s in p.diffs})
    if shown:
        L += ["| a - b | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | SD over seeds | 95% t-interval | p |",
              "|" + "---|" * (len(seeds) + 5)]
    for p in shown:
        t = p.test  # None with one shared seed: nothing to test
        L.append(f"| {p.a} - {p.b} | " + " | ".join(_f(p.diffs.get(s), 4) for s in seeds) + f" | {_f(p.mean, 4)} | "
                 + ("— | — | — |" if t is None else f"{t.sd:.4f} | [{t.low:+.4f}, {t.high:+.4f}] | {_p(t.p)} |"))
    L.append("")
    if n_seeds < 2:
        L.append(f"One pre-training seed: no spread over seeds is measured ({what}); rerun with PRETRAIN_SEEDS=3 or more "
                 "(a t-test over 2 seeds has 1 degree of freedom).")
    else:
        L.append("Exploratory: a t-test over the per-seed differences (n - 1 degrees of freedom, the 95% t-interval of "
                 f"their mean; the spread floored at the logging step, {resolution:g}), p unadjusted. Only the declared "
                 "comparisons above are tested as a family.")
    return L + [""]


def _noise_cell(iv: Interval, noise: Dict[str, Tuple[float, str]]) -> str:
    if iv.column not in noise:
        return "— | not measured"
    return f"{noise[iv.column][0]:.2f} | {'beyond' if beyond_noise(iv.diff, iv.column, noise) else 'within'}"


def _interval_lines(intervals: List[Interval], noise: Optional[Dict[str, Tuple[float, str]]] = None) -> List[str]:
    noise = noise or {}
    if not intervals:
        return ["No pair of variants with paired dev predictions.", ""]
    counts: Dict[str, int] = {}
    methods: Dict[str, int] = {}
    for iv in intervals:
        counts[iv.verdict] = counts.get(iv.verdict, 0) + 1
        methods[iv.method] = methods.get(iv.method, 0) + 1
    m, pairs = len(intervals), len({(iv.a, iv.b) for iv in intervals})
    excluded = sum(iv.excludes_zero for iv in intervals)
    one_seed = sum(iv.seeds < 2 for iv in intervals)
    shown = intervals if pairs <= SHOW_ALL_PAIRS else [iv for iv in intervals if iv.excludes_zero]
    L = ["Exploratory, every one: an interval and an unadjusted p, no verdict beyond what the interval holds (the "
         "declared comparisons above are the report's only tests). Each difference is score(a) - score(b) (points "
         "of the task's metric), paired by (pre-training seed, fine-tuning seed), each run at its model's chosen LR: "
         "per shared pre-training seed the mean over its fine-tuning runs on the whole dev set, then the mean over "
         "those seeds. The pre-training seed is the larger noise, so a difference is measured at the level of the "
         "pre-training seeds the two models share:", "",
         f"- **1 seed**: {PAIRED_BOOTSTRAP} over the dev examples and the fine-tuning runs (95% percentile interval). "
         "It says at most that the dev set tells these two checkpoints apart (**dev set only**), not that another "
         "pre-training would agree: it cannot see the pre-training seed's noise.",
         f"- **2 seeds or more**: {T_TEST}: the 95% interval of the mean over seeds, two half-widths added in "
         "quadrature: the per-seed differences' (t with n - 1 degrees of freedom x s / sqrt(n)) and the dev set's "
         "(the normal's 1.96 x its standard error from the per-example differences; every seed is scored on the "
         "same dev examples, so their spread cannot show that noise). It covers at least 95% whatever the share "
         "of the two; p is where its edge reaches 0.", "",
         f"**{m} comparisons** ({pairs} pairs of models, each on every column and the average); {excluded} intervals "
         f"exclude 0, where about {m * 0.05:.3g} would by chance alone if no two models differed and every interval "
         f"saw all the noise; {one_seed} of them rest on one pre-training seed and cannot see the seeds' noise, so "
         "they exclude 0 more often than that.", "",
         "Methods: " + "; ".join(f"{k}: {n}" for k, n in sorted(methods.items())) + ". "
         "Intervals: " + "; ".join(f"{k}: {n}" for k, n in sorted(counts.items())) + ".", ""]
    if noise:
        beyond = sum(bool(beyond_noise(iv.diff, iv.column, noise)) for iv in intervals)
        L += ["**Seed noise**, beside every difference: the pre-training seed's noise measured in this study, per "
              "column the largest spread (max - min) of one model's score over its own pre-training seeds ("
              + "; ".join(f"{col} {x:.2f} ({who})" for col, (x, who) in noise.items()) + "). A difference within it "
              "can come from the pre-training seed alone, whatever its interval says (an interval from one shared "
              f"seed cannot see that noise); {beyond} of the {m} differences are beyond it. Read no order of the "
              "models from differences within it.", ""]
    else:
        L += ["**Seed noise**: not measured (no model of this study has two or more pre-training seeds with "
              "fine-tuning results), so no difference here can be set against the pre-training seed's noise.", ""]
    if len(shown) < len(intervals):
        L += [f"Only the differences whose interval excludes 0 are listed; all {m} are in `differences.csv`.", ""]
    L += ["| a - b | task | difference | 95% interval | p (unadjusted) | method | runs | per pre-training seed | "
          "interval | seed noise | difference vs seed noise |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for iv in shown:
        seeds = ", ".join(f"{s}: {d:+.2f}" for s, d in sorted(iv.by_seed.items()))
        L.append(f"| {iv.a} - {iv.b} | {iv.column} | {iv.diff:+.2f} | [{iv.low:+.2f}, {iv.high:+.2f}] | {_p(iv.p)} | "
                 f"{iv.method_label} | {iv.runs} | {seeds} | {iv.verdict} | {_noise_cell(iv, noise)} |")
    return L + [""]


def _order_lines(drops: List[OrderDrop]) -> List[str]:
    if not drops:
        return ["No word-order results (the order stage did not run, or ORDER_WINDOWS=none).", ""]
    perts = list(dict.fromkeys(d.perturbation for d in drops))
    cols = list(dict.fromkeys(d.column for d in drops))
    by = {(d.variant, d.column, d.perturbation): d for d in drops}
    variants = list(dict.fromkeys(d.variant for d in drops))
    L = ["Score drop (points) when the dev set's word order is perturbed: original minus perturbed, the mean over "
         "the runs at the chosen LR ± the spread (max - min) over them. `shuffle_n`: words shuffled within "
         "windows of n; `random`: all words shuffled; `role_swap` (NLI tasks): subject and object of entailed "
         "hypotheses swapped, against the same items unswapped.", ""]
    for col in cols:
        here = [p for p in perts if any(d.column == col and d.perturbation == p for d in drops)]
        first = {p: next(d for d in drops if d.column == col and d.perturbation == p) for p in here}
        L += [f"**{col}**", "", "| variant | " + " | ".join(here) + " |", "|" + "---|" * (len(here) + 1)]
        for v in variants:
            cells = [f"{by[(v, col, p)].mean:+.2f} ± {by[(v, col, p)].spread:.2f}" if (v, col, p) in by else "—"
                     for p in here]
            L.append(f"| {v} | " + " | ".join(cells) + " |")
        L += ["", "Examples whose text the perturbation changed, of those it applies to: "
              + ", ".join(f"{p} {first[p].changed} of {first[p].examples}" for p in here) + ".", ""]
    nope = [d for d in drops if split_label(d.variant)[0] == "nope" and d.perturbation.startswith(("shuffle", "random"))]
    if nope:
        bad = [d for d in nope if abs(d.mean) > NOPE_TOLERANCE]
        L += [("**CHECK FAILED:** nope cannot see word order, yet its score moved by "
               + ", ".join(f"{d.mean:+.2f} ({d.variant} {d.column} {d.perturbation})" for d in bad)
               + f" (more than {NOPE_TOLERANCE:g} point): the perturbation or the evaluation is wrong; do not read "
               "this table.") if bad else
              f"Check: nope (no position information) moves by at most {max(abs(d.mean) for d in nope):.2f} points "
              "on the shuffles, as a model blind to word order must.", ""]
    else:
        L += ["(No `nope` in this study: the check that a model blind to word order shows no drop was not made.)", ""]
    return L


def _longer_lines(study: List[Variant], rows: List[Dict]) -> List[str]:
    lengths = sorted({int(L) for v in study for s in v.seeds if s.longer for L in s.longer["lengths"]})
    if len(lengths) < 2:
        return ["Not measured (LENGTH_FACTORS=1, or the longer stage has not run).", ""]
    T = lengths[0]
    L = [f"Validation MLM loss (bits) of the same text cut into blocks of T = {T} tokens (the pre-training length) "
         "and longer, the same tokens masked at every length. Every model was pre-trained with positions for the "
         "longest length; a variant with learned parameters per position or distance never trained those past T, "
         "and is not measured there; an ELECTRA model is not measured at all.", "",
         "| variant | " + " | ".join(f"{L_ // T}T = {L_}" for L_ in lengths) + " | not measured (beyond T, or at all), because |",
         "|" + "---|" * (len(lengths) + 2)]
    for v, r in zip(study, rows):
        L.append(f"| {v.name} | " + " | ".join(_f(r.get(f"loss_len{L_}")) for L_ in lengths)
                 + f" | {_cell(r.get('longer_not_measured') or '')} |")
        for scaling in ROPE_SCALED:
            if any(scaling in s.rope_scaled for s in v.seeds):
                L.append(f"| {v.name}+{scaling} | "
                         + " | ".join(_f(r.get(f"rope_{scaling}_loss_len{L_}")) for L_ in lengths) + " |  |")
    scaled = [f"`{v.name}+{scaling}`" for v in study for scaling in ROPE_SCALED
              if any(scaling in s.rope_scaled for s in v.seeds)]
    if scaled:
        L[2:2] = [f"{', '.join(scaled)}: the checkpoint of the model named before the `+`, evaluated with that RoPE scaling "
                  "(tupe_core/rope.py: linear is position interpolation, ntk the NTK-aware base, yarn YaRN's ramp "
                  "and temperature) at each length L beyond T, by s = L/T; at T the rotation is the trained one, so "
                  "that column is plain RoPE's. Nothing was trained with a scaling.", ""]
    return L + [""]


def _electra_lines(variants: List[Variant], rows: List[Dict], gen_pairs: List[Paired], resolution: float = 0.0) -> List[str]:
    here = [r for r in rows if r["objective"] == "electra"]
    if not here:
        return []
    L = ["## Pre-training: ELECTRA (generator MLM loss, discriminator loss)", "",
         "The final validation of each ELECTRA run (`--criterion electra`, docs/electra.md), mean over its "
         "pre-training seeds: the generator's MLM loss in bits over the masked tokens and its accuracy there; the "
         "discriminator's loss (binary cross-entropy in bits per non-pad token), its accuracy and the share of the "
         "tokens the generator replaced. These are other quantities than an MLM model's loss (the generator is "
         "1/N of the width; the discriminator's task gets harder as its generator gets better), so they are not in "
         "the MLM tables, the unigram check or the loss comparisons above; the objectives are compared downstream.",
         "", "Two baselines say whether each network learned its task: the generator's loss below the unigram "
         "baseline (as for an MLM model), and the discriminator's loss against the entropy of the replace rate, "
         "what a detector that knows only how often tokens are replaced (and flags none) scores; \"removed\" is "
         "the share of that entropy the discriminator took away, its recall the share of replaced tokens it flagged.",
         "", "| model | generator loss | below unigram | generator acc. (%) | discriminator loss | rate's entropy | "
         "removed (%) | recall (%) | discriminator acc. (%) | replace rate (%) | spread over seeds (gen / disc) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in here:
        gain = None if r["disc_gain"] is None else 100 * r["disc_gain"]
        L.append(f"| {r['variant']} | {_f(r['final_gen_loss'])} | {_f(r['gen_below_unigram_bits'])} | "
                 f"{_f(r['final_gen_acc'], 2)} | {_f(r['final_disc_loss'], 4)} | {_f(r['disc_rate_entropy_bits'], 4)} | "
                 f"{_f(gain, 1)} | {_f(r['final_disc_recall'], 2)} | {_f(r['final_disc_acc'], 2)} | "
                 f"{_f(r['final_replace_rate'], 2)} | {_f(r['final_gen_loss_spread'])} / {_f(r['final_disc_loss_spread'], 4)} |")
    L += [""]
    if len(here) > 1:
        n_seeds = max(len(v.seeds) for v in variants if v.objective == "electra")
        L += ["### Generator loss paired by pre-training seed (row minus column model)", "",
              "Generators of the same size, each the variant's own encoder: their MLM losses compare as the MLM "
              "models' do. The discriminator losses are not ranked: each faces its own generator's replacements.",
              ""] + _paired_lines(gen_pairs, n_seeds, "generator loss", resolution)
    return L


def _within_noise_lines(variants: Sequence[Variant], columns: Sequence[str],
                        noise: Dict[str, Tuple[float, str]]) -> List[str]:
    """Which columns of the fine-tuning table span more than the seed noise across the models (``tupe_study.noise``: an
    order of the models may be read there) and which do not."""
    if not noise:
        return ["No model has two or more pre-training seeds with fine-tuning results: the seed noise is not measured, "
                "so no order of the models in this table can be told from it."]
    keys = {f"{c}_median": c for c in columns} | {"downstream_avg": AVERAGE}
    cells = [f"{keys[k]}: the models span {t.span:.2f}, models with no difference more than {t.limit:.2f} in 5% of "
             f"simulated studies (seed SD {t.sd:.2f}, {t.df} df; p {t.p:.3f}: "
             + ("**beyond the noise**: an order may be read" if t.beyond else "**within the noise**: read no order "
                "of the models") + ")" for k, t in span_tests(variants, list(keys), columns).items()]
    return ["Ranks only beyond the seed noise. Per column the span (max - min) of the models' scores (the mean over "
            "a model's pre-training seeds of its per-seed score) is set against the spans of simulated studies with "
            "no difference between the models, each model with its own number of seeds and every per-seed score "
            "drawn from one normal whose SD is the pooled within-model SD of the models with two or more seeds "
            f"(re-estimated in each simulated study; {DRAWS:,} studies, fixed seed): beyond it when p <= 0.05, a rule "
            "that fires in at most 5% of studies with no difference: " + "; ".join(cells) + "."] if cells else []


def _finetune_lines(rows: List[Dict], columns: List[str], variants: List[Variant], intervals: List[Interval],
                   noise: Dict[str, Tuple[float, str]]) -> List[str]:
    """The fine-tuning section: the table of medians, how to read it, the seed noise and the differences."""
    L = ["## Fine-tuning: median over seeds at the chosen LR (spread = max - min)", ""]
    if columns:
        several = [r for r in rows if r["downstream_avg_seed_spread"] is not None]
        extra = " | average by pre-training seed" if several else ""
        L += ["| variant | " + " | ".join(columns) + f" | average{extra} |", "|" + "---|" * (len(columns) + 2 + bool(several))]
        for r in rows:
            by_seed = ""
            if several:
                by_seed = " | —" if r["downstream_avg_seed_spread"] is None else " | " + ", ".join(
                    f"{seed}: {float(x):.2f}" for seed, x in (p.split(":") for p in r["downstream_avg_by_seed"].split())
                ) + f" (spread {r['downstream_avg_seed_spread']:.2f})"
            L.append(f"| {r['variant']} | " + " | ".join(
                f"{_f(r[f'{c}_median'], 2)} ± {_f(r[f'{c}_spread'], 2)}" for c in columns)
                + f" | {_f(r['downstream_avg'], 2)}{by_seed} |")
        L += ["", "Per model, per LR the median over the fine-tuning seeds, the LR with the best median (MNLI-mm at "
              "MNLI-m's LR), as `tupe_glue.collect`; `± x`: the spread of those seeds' scores (pooled over pre-training "
              "seeds); the average is the mean of the task medians (per pre-training seed, then the mean over them)."]
        if several:
            L += ["The spread of the average over pre-training seeds is what a comparison on one pre-training seed "
                  "cannot see: " + ", ".join(f"{r['variant']} {r['downstream_avg_seed_spread']:.2f}" for r in several)
                  + " points. A difference from one shared pre-training seed that is not larger than these can "
                  "come from the pre-training seed alone."]
        L += [""] + _within_noise_lines(variants, columns, noise)
        L += ["", "### Downstream differences (exploratory), at the level of the pre-training seeds", ""] + _interval_lines(intervals, noise)
    else:
        L += ["No fine-tuning results.", ""]
    return L


def _locality_lines(rows: List[Dict], corr: List[Dict]) -> List[str]:
    """The locality and symmetry section: the table, the correlations with and without the unfit variants."""
    L = ["## Locality and symmetry (Chen et al. 2023) vs the downstream average", "",
          "| variant | locality (pos) | symmetry (pos) | locality (attn) | symmetry (attn) | downstream avg |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['variant']} | {_f(r['loc_pos'])} | {_f(r['sym_pos'])} | {_f(r['loc_attn'])} | "
                 f"{_f(r['sym_attn'])} | {_f(r['downstream_avg'], 2)} |")
    L += [""] + _correlation_table([c for c in corr if not c["without"]])
    corr_without = [c for c in corr if c["without"]]
    if corr_without:
        L += ["", f"Without the variants that failed their own sanity check ({corr_without[0]['without']}: less than "
              "the preset's gap below the unigram baseline, above), whose downstream averages say little about "
              "their encoding:", ""] + _correlation_table(corr_without)
    L += ["", "`—`: undefined (fewer than 2 variants with both values, or one side constant; p needs 3). p: the "
          "share of the pairings of the downstream averages with the variants whose |rho| reaches the observed "
          "one (exact up to n = 7, else 20,000 random pairings), two-sided; it treats each variant's values as "
          "exact, so the dev-set and seed noise of the averages comes on top. Exploratory, outside the declared "
          "comparisons' family: the unadjusted p beside its Holm-adjusted one. With a handful of variants a "
          "correlation is a description, not evidence: at n = 4 even |rho| = 1 has p = 1/12."]
    return L


def report_markdown(rows: List[Dict], columns: List[str], variants: List[Variant], total_updates: int,
                    unigram: Optional[float], min_gap: float, corr: List[Dict], loss_pairs: List[Paired],
                    intervals: List[Interval], drops: List[OrderDrop], problems: List[str], title: str,
                    run: Sequence[str] = (), gen_pairs: Sequence[Paired] = (),
                    endpoints: Sequence[EndpointResult] = (), declared: str = "none", resolution: float = 0.0,
                    sections: Optional[Dict[str, List[str]]] = None) -> str:
    """The report's text; ``sections``: lines of the sections other modules render, by where they go ("sweep" after
    the variants, "flatness" after the pre-training table, "valid_se" after its
    paired differences)."""
    sections = sections or {}
    mlm = [r for r in rows if r["objective"] == "mlm"]
    n_seeds = max((len(v.seeds) for v in variants if v.objective == "mlm"), default=0)
    noise = seed_noise(variants, columns)
    L = [f"# {title}", "", "![overview](overview.png)", ""]
    weak = weak_variants(rows, unigram, min_gap)
    if weak:
        L += [f"> **WARNING: not fit for purpose.** {', '.join(weak)} did not end at least {min_gap:g} bit(s) below "
              f"the unigram baseline ({unigram:.3f} bits): such a model barely uses context, so differences "
              "between positional encodings say little. Use more updates or a bigger preset.", ""]
    untrained = untrained_discriminators(rows)
    if untrained:
        L += [f"> **WARNING: ELECTRA not trained yet.** The discriminator of {', '.join(untrained)} ended less than "
              f"{100 * ELECTRA_MIN_GAIN:g}% below the entropy of the replace rate (the loss of a detector that flags "
              "no token): it has barely learned replaced-token detection, so its downstream scores are those of an "
              "encoder its own objective hardly trained, and ELECTRA-vs-MLM differences say little. Use more "
              "updates or a bigger preset.", ""]
    L += ["## Variants", "", "| variant | what it is | objective | pre-training seeds |", "|---|---|---|---|"]
    L += [f"| {v.name} | {_cell(v.about) or '—'} | {v.objective} | {', '.join(str(s.seed) for s in v.seeds)} |"
          for v in variants]
    L += [""] + sections.get("sweep", [])
    L += ["## Declared comparisons (confirmatory)", ""] + endpoint_lines(endpoints, declared, total_updates)
    L += ["## Pre-training: validation MLM loss (bits)", "",
          f"Unigram baseline (entropy of the training tokens, what a model ignoring context scores): "
          f"**{_f(unigram)} bits**. Budget: {total_updates} updates; the same data order, masks and seed for "
          "every variant.", "",
          "| variant | final | best | below unigram | "
          + " | ".join(_fraction_header(variants, f, total_updates) for f in FRACTIONS)
          + " | spread over seeds |", "|" + "---|" * (5 + len(FRACTIONS))]
    for r in mlm:
        L.append(f"| {r['variant']} | {_f(r['final_valid_loss'], 4)} | {_f(r['best_valid_loss'], 4)} | "
                 f"{_f(r['below_unigram_bits'], 4)} | "
                 + " | ".join(_f(r[f'loss_at_{int(f * 100)}pct'], 4) for f in FRACTIONS)
                 + f" | {_f(r['final_valid_loss_spread'], 4)} |")
    seed_sets = {v.name: [s.seed for s in v.seeds] for v in variants if v.objective == "mlm"}
    if len({tuple(x) for x in seed_sets.values()}) > 1:
        L += ["", "A variant's loss is the mean over its own seeds; the paired table below compares the seeds both "
              "variants have.", ""]
    else:
        L += ["", f"Pre-training seeds per variant: {n_seeds}. Losses are means over them.", ""]
    L += sections.get("flatness", [])
    L += ["### Differences paired by pre-training seed (final validation loss, row minus column variant; exploratory)",
          ""]
    L += _paired_lines(loss_pairs, n_seeds, "loss", resolution) + sections.get("valid_se", [])  # none without its data
    L += _electra_lines(variants, rows, list(gen_pairs), resolution)
    L += ["## Longer inputs", ""] + _longer_lines(variants, rows)
    L += _finetune_lines(rows, columns, variants, intervals, noise)
    L += ["## Word-order sensitivity", ""] + _order_lines(drops)
    L += _locality_lines(rows, corr)
    L += _correlation_family_lines(corr) + ["", "## Missing parts and problems", ""]
    L += [f"- {p}" for p in problems] or ["- none"]
    L += [""] + list(run)
    return "\n".join(L).rstrip("\n") + "\n"
