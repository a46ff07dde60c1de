"""The learning-rate sweep: each variant at its own best LR, chosen by a rule declared before the study runs.

``LR_GRID`` and ``SWEEP_SEEDS`` (recorded in ``settings.env`` with the rest of the declaration) make the ``sweep``
stage: every MLM model pre-trained at every LR of the grid on every sweep seed, at the confirmation's preset and
budget, into ``OUT/sweep/V/lr{LR}/seedS/``. The rule (``LR_RULE=lowest-mean-final``, the only one):

- a model's LR is the one with the lowest mean final validation loss over the sweep seeds (exact over the logged
  losses); ties go to the smaller LR; a run that diverged (a NaN or infinite loss, or no final validation although
  it finished: fairseq's FloatingPointError ends a sweep run, ``tupe_study.stages.pretrain_into``) counts as the
  worst loss at its LR;
- a best LR at the edge of the grid is not a tuned LR: the model's grid widens once, by one step beyond that edge
  at the grid's own ratio there (``3e-3`` after ``1e-3 3e-3`` gives ``9e-3``), and the rule is applied again; a
  best LR still at the edge of the widened grid is used, and the report says it is at the edge.

When every sweep run has finished, the first confirmation pre-training writes the **second declaration** into
``settings.env`` (dated, with the commit): the chosen LR of every model (``CHOSEN_LRS``) and the resolved target of
an ``updates_to@halfway`` endpoint (``UPDATES_TO_TARGET``). A resume whose sweep gives other choices is refused.
The report shows the sweep (``sweep_lines``): final loss against LR per model, every seed.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from tupe_common.errors import UsageError
from tupe_common.numbers import named, short
from tupe_study.runs import pretrain_finished

SECOND_DECLARATION = ("CHOSEN_LRS", "UPDATES_TO_TARGET")  # the settings.env lines the sweep writes, not settings


def widened(grid: Sequence[float], best: float) -> Optional[float]:
    """The one LR beyond the edge that ``best`` sits on, at the grid's ratio there (3 significant digits); None when
    ``best`` is inside the grid (or the grid has one LR: no ratio)."""
    g = sorted(grid)
    if len(g) < 2 or g[0] < best < g[-1]:
        return None
    lr = g[0] * g[0] / g[1] if best == g[0] else g[-1] * g[-1] / g[-2]
    return float(f"{lr:.3g}")


def worst_if_diverged(loss: Optional[float]) -> float:
    """A final loss for the rule: a diverged run (NaN, infinite or missing) is the worst, +inf."""
    return math.inf if loss is None or math.isnan(loss) or math.isinf(loss) else loss


def as_logged(loss: float) -> Fraction:
    """A logged loss exactly as the decimal it was logged as (its shortest repr), so that equal logs are equal."""
    return Fraction(repr(loss))


def exact_mean(losses: Sequence[Optional[float]]) -> Union[Fraction, float]:
    """The mean of logged losses, exact (each as the decimal it was logged as), so that means equal in the logged
    decimals are equal and a tie is a tie (a float mean of 6.0 and 6.0004 differs from that of 6.0002 and 6.0002);
    +inf when a run diverged."""
    values = [worst_if_diverged(x) for x in losses]
    if any(math.isinf(v) for v in values):
        return math.inf
    return sum(as_logged(v) for v in values) / len(values)


def lowest_mean(finals: Mapping[float, Mapping[int, Optional[float]]]) -> float:
    """The LR with the lowest mean final loss over its seeds (diverged runs +inf), ties to the smaller LR."""
    def mean(lr: float) -> Union[Fraction, float]:
        return exact_mean(list(finals[lr].values()))

    return min(sorted(finals), key=mean)


@dataclass
class Choice:
    """One model's sweep: its final loss per LR and seed (None: not finished yet), the LR widened to (if any), and
    the chosen LR once every run has finished."""

    label: str
    grid: List[float]  # the declared grid, ascending
    finals: Dict[float, Dict[int, Optional[float]]] = field(default_factory=dict)
    extra: Optional[float] = None  # the widened LR, once the grid's runs are done and the best sat on an edge
    chosen: Optional[float] = None  # once every run (the widened ones too) has finished

    @property
    def at_edge(self) -> bool:
        """The chosen LR is at the edge of the grid it was chosen from (the widened one when it widened)."""
        lrs = sorted(self.finals)
        return self.chosen is not None and self.chosen in (lrs[0], lrs[-1]) and len(lrs) > 1

    def mean(self, lr: float) -> Optional[float]:
        values = list(self.finals.get(lr, {}).values())
        if not values or any(v is None for v in values):
            return None
        return float(exact_mean(values))  # the rule's mean, shown


def choose(label: str, grid: Sequence[float], seeds: Sequence[int],
           final: Callable[[str, float, int], Tuple[bool, Optional[float]]]) -> Choice:
    """The rule applied to ``label``'s sweep; ``final(label, lr, seed)`` -> (finished, final loss or None)."""
    c = Choice(label, sorted(grid))

    def read(lrs: Sequence[float]) -> bool:
        done = True
        for lr in lrs:
            c.finals[lr] = {}
            for s in seeds:
                finished, loss = final(label, lr, s)
                c.finals[lr][s] = (loss if loss is not None else math.nan) if finished else None
                done &= finished
        return done

    if not read(c.grid):
        return c
    best = lowest_mean(c.finals)
    c.extra = widened(c.grid, best)
    if c.extra is not None and not read([c.extra]):
        return c
    c.chosen = lowest_mean(c.finals)
    return c


# ---- the study's sweep -----------------------------------------------------------------------------------------


def sweep_dir(out: str, label: str, lr: float, seed: int) -> str:
    """A sweep run's folder: OUT/sweep/V/lr{LR}/seedS/, the LR by value (``tupe_common.numbers.named``)."""
    parent = os.path.join(out, "sweep", label)
    return os.path.join(parent, named(parent, "lr{}", lr), f"seed{seed}")


def logged_final(out: str, label: str, lr: float, seed: int, total_updates: int) -> Tuple[bool, Optional[float]]:
    """(finished, final validation loss) of one sweep run: finished once its ``pretrain.done`` exists; the loss at
    the budget from its log, None when that validation is missing or not a number (a diverged run)."""
    from tupe_study.runs import parse_valid_curve

    folder = sweep_dir(out, label, lr, seed)
    if not pretrain_finished(folder):
        return False, None
    log = os.path.join(folder, "train.log")
    curve = parse_valid_curve(log) if os.path.isfile(log) else {}
    loss = curve.get(total_updates)
    return True, None if loss is None or math.isnan(loss) else loss


def choices(out: str, labels: Sequence[str], grid: Sequence[float], seeds: Sequence[int],
            total_updates: int) -> List[Choice]:
    return [choose(label, grid, seeds, lambda lb, lr, s: logged_final(out, lb, lr, s, total_updates))
            for label in labels]


def parts(choices_: Sequence[Choice], seeds: Sequence[int]) -> List[Tuple[str, str, int]]:
    """(label, LR as named, sweep seed) of every sweep run: the declared grid's, seed by seed, then the widened
    LRs' once known (appended, so the indices of ``--list`` and SLURM arrays stay)."""
    first = [(c.label, short(lr), s) for s in seeds for lr in choices_[0].grid for c in choices_] if choices_ else []
    more = [(c.label, short(c.extra), s) for s in seeds for c in choices_ if c.extra is not None]
    return first + more


# ---- the second declaration ------------------------------------------------------------------------------------


def read_declared(recorded: Mapping[str, str]) -> Dict[str, str]:
    """The second declaration among a settings.env's values (``tupe_study.settings.read_recorded``): empty when the sweep
    has not been declared yet."""
    return {name: recorded[name] for name in SECOND_DECLARATION if name in recorded}


def chosen_text(chosen: Mapping[str, float]) -> str:
    return " ".join(f"{label}:{short(lr)}" for label, lr in chosen.items())


def parse_chosen(text: str) -> Dict[str, float]:
    out = {}
    for item in text.split():
        m = re.fullmatch(r"([^:\s]+):(\S+)", item)
        if not m:
            raise UsageError(f"CHOSEN_LRS entry '{item}' in settings.env: write LABEL:LR (the sweep writes it)")
        out[m.group(1)] = float(m.group(2))
    return out


def second_declaration(chosen: Mapping[str, float], target: Optional[float], commit: str,
                       now: Optional[datetime] = None) -> str:
    """The lines appended to settings.env: a dated comment naming the commit, the chosen LRs, the resolved target."""
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"# second declaration, {when}, commit {commit}: chosen by LR_RULE from the finished sweep, before any "
             "confirmation pre-training", f"CHOSEN_LRS={chosen_text(chosen)}"]
    if target is not None:
        lines.append(f"UPDATES_TO_TARGET={target:.4f}")
    return "\n".join(lines) + "\n"


def differences(recorded: Mapping[str, str], chosen: Mapping[str, float], target: Optional[float]) -> List[str]:
    """What the sweep gives now against what settings.env declared ('< declared', '> now'), compared by value."""
    out = []
    before = parse_chosen(recorded.get("CHOSEN_LRS", ""))
    if before != dict(chosen):
        out += [f"< CHOSEN_LRS={recorded.get('CHOSEN_LRS', '')}", f"> CHOSEN_LRS={chosen_text(chosen)}"]
    if target is not None or "UPDATES_TO_TARGET" in recorded:
        old = recorded.get("UPDATES_TO_TARGET")
        if old is None or target is None or abs(float(old) - target) > 5e-5:
            out += [f"< UPDATES_TO_TARGET={old}", f"> UPDATES_TO_TARGET={'none' if target is None else f'{target:.4f}'}"]
    return out


# ---- the report's section --------------------------------------------------------------------------------------


def sweep_lines(study_choices: Sequence[Choice], declared: Mapping[str, str], seeds: Sequence[int],
                power_lines: Sequence[str] = ()) -> List[str]:
    """The report's "Learning-rate sweep" section: final loss against LR per model, every seed, the mean, the LR the
    rule chose (marked), the widening, and an LR at the edge named; nothing when the study has no sweep."""
    if not study_choices:
        return []
    L = ["## Learning-rate sweep", "",
         f"Every model at every LR of the grid on the sweep seeds ({', '.join(map(str, seeds))}; no confirmation seed "
         "is among them), at the confirmation's preset and budget. The rule, declared before the study ran "
         "(`LR_RULE=lowest-mean-final`): the LR with the lowest mean final validation loss over the sweep seeds, ties "
         "to the smaller LR, a diverged run (NaN or no final loss) the worst; a best LR at the grid's edge widens the "
         "grid once, one step beyond that edge at the grid's ratio there. `**x**`: the chosen LR.", ""]
    for c in study_choices:
        L += [f"**{c.label}**", "", "| LR | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |",
              "|" + "---|" * (len(seeds) + 2)]
        for lr in sorted(c.finals):
            cells = " | ".join("…" if c.finals[lr].get(s, None) is None else
                               ("diverged" if math.isnan(c.finals[lr][s]) else f"{c.finals[lr][s]:.4f}") for s in seeds)
            mean = c.mean(lr)
            name = f"**{short(lr)}**" if lr == c.chosen else short(lr)
            widen = " (widened)" if lr == c.extra else ""
            mean_text = "…" if mean is None else "diverged" if math.isinf(mean) else f"{mean:.4f}"  # the worst
            L.append(f"| {name}{widen} | {cells} | {mean_text} |")
        if c.chosen is None:
            L += ["", f"Not finished (`…`: a run still to do): no LR chosen for {c.label} yet."]
        elif c.at_edge:
            L += ["", f"**{c.label}'s chosen LR {short(c.chosen)} is at the edge of its "
                  f"{'widened ' if c.extra is not None else ''}grid**: it is not a tuned LR (a better one may lie "
                  "beyond), and the confirmation compares it as it is."]
        elif c.extra is not None:
            L += ["", f"The best LR of the declared grid sat on its edge; the grid widened once to {short(c.extra)}."]
        L.append("")
    chosen = {c.label: c.chosen for c in study_choices if c.chosen is not None}
    if declared.get("CHOSEN_LRS"):
        recorded = parse_chosen(declared["CHOSEN_LRS"])
        same = recorded == chosen
        L.append(f"Declared in `settings.env` before the first confirmation pre-training: `CHOSEN_LRS="
                 f"{declared['CHOSEN_LRS']}`" + ("" if same else " — **this differs from what the sweep gives now "
                                                 f"({chosen_text(chosen)})**") + ".")
        if declared.get("UPDATES_TO_TARGET"):
            L.append(f"The `updates_to` target, resolved by its declared rule then: "
                     f"`UPDATES_TO_TARGET={declared['UPDATES_TO_TARGET']}` bits.")
        L.append("")
    elif len(chosen) == len(study_choices):
        L += ["The sweep is finished, but no confirmation pre-training has declared its choice yet.", ""]
    L += list(power_lines)
    return L


def power_lines(study_choices: Sequence[Choice], pairs: Sequence[Tuple[str, str]], n_confirm: int,
                family: int) -> List[str]:
    """A check beside the sweep, not used to change the design: for each declared final-loss pair, the sweep seeds'
    paired differences at the chosen LRs, their effect size and the power of the declared confirmation seeds."""
    from tupe_study.power import paired_t_power

    by_label = {c.label: c for c in study_choices}
    L = []
    for a, b in pairs:
        ca, cb = by_label.get(a), by_label.get(b)
        if not ca or not cb or ca.chosen is None or cb.chosen is None:
            continue
        fa, fb = ca.finals[ca.chosen], cb.finals[cb.chosen]
        diffs = [as_logged(fa[s]) - as_logged(fb[s]) for s in sorted(set(fa) & set(fb))
                 if not (math.isnan(fa[s]) or math.isnan(fb[s]))]  # exact, as logged: equal ones have no spread
        if len(diffs) < 2:
            continue
        mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
        d = abs(mean) / sd if sd > 0 else math.inf
        power = "—" if math.isinf(d) or n_confirm < 2 else f"{paired_t_power(d, n_confirm, 0.05 / family):.2f}"
        L.append(f"Power check (as `--plan` on the sweep seeds; the confirmation's seeds were fixed before the sweep and "
                 f"are not changed by it): final loss {a} - {b} at the chosen LRs, per sweep seed "
                 f"{', '.join(f'{float(x):+.4f}' for x in diffs)}, d = {d:.2f}, power {power} with the {n_confirm} "
                 f"confirmation seeds at alpha = 0.05 / {family}. From {len(diffs)} seeds, d is a rough guide.")
    return L + ([""] if L else [])


def report_section(out: str, labels: Sequence[str], total_updates: int, declared: Sequence,
                   finished: Mapping[str, Sequence]) -> List[str]:
    """The report's section for a study whose settings.env declares a sweep ([] otherwise): the sweep read from
    OUT/sweep, the second declaration, and the power check at the declared number of confirmation seeds."""
    from tupe_study.settings import read_recorded
    from tupe_common.tunables import items

    values = read_recorded(out)
    grid, seeds = items(values.get("LR_GRID", "none")), [int(s) for s in items(values.get("SWEEP_SEEDS", "none"))]
    if not grid or not seeds:
        return []
    study_choices = choices(out, labels, [float(x) for x in grid], seeds, total_updates)
    pairs = [(e.a, e.b) for e in declared if e.measure == "final_loss"]
    confirm = len(items(values.get("PRETRAIN_SEEDS", ""))) or min(
        (len({s.seed for s in finished.get(a, [])} & {s.seed for s in finished.get(b, [])}) for a, b in pairs), default=0)
    return sweep_lines(study_choices, read_declared(values), seeds,
                       power_lines(study_choices, pairs, confirm, max(len(declared), 1)))
