"""The declaration's syntax: ENDPOINTS and EQUIVALENCE_BITS as written -> what they declare (standard library only:
settings.env's meaning and the plan read it before any statistics are imported). ``parse_declaration`` is the one
parse of ENDPOINTS; ``tupe_study.endpoints`` (which re-exports these names) tests what it declares."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from tupe_common.errors import UsageError

# measure -> what it is; both are in bits of validation MLM loss, so one margin serves both
MEASURES: Dict[str, str] = {
    "final_loss": "final validation MLM loss (bits)",
    "loss_auc": "area under the validation-loss curve divided by the updates it spans (bits): the mean loss "
                "over training, lower when a model reaches low losses sooner",
    "updates_to": "the update at which the validation loss first reaches the target (interpolated between the two "
                  "validations around it; censored at the budget when it never does): fewer is sooner",
}
UPDATES_TO = "updates_to"
HALFWAY = "halfway"  # the target halfway from the unigram baseline to B's mean final sweep loss (halfway_target)


@dataclass(frozen=True)
class Endpoint:
    measure: str
    a: str
    b: str
    target: str = ""  # updates_to's: bits as written, or "halfway"; "" for the other measures
    written: str = field(default="", compare=False)  # the entry as the user wrote it (messages); "" when read back

    @property
    def entry(self) -> str:
        """The entry for messages: as written when it was parsed from ENDPOINTS, else as ``text`` gives it."""
        return self.written or self.text

    @property
    def key(self) -> str:
        """The measure with its target (``updates_to@9.0``): what ``family_tests``'s values are keyed by."""
        return f"{self.measure}@{self.target}" if self.target else self.measure

    @property
    def text(self) -> str:
        return f"{self.key}:{self.a}:{self.b}"

    @property
    def label(self) -> str:
        return f"{self.key}: {self.a} - {self.b}"

    def target_bits(self, halfway: Optional[float] = None) -> Optional[float]:
        """The target in bits: the number written, or for ``halfway`` the resolved ``halfway`` (None while it is
        not resolved); None for a measure without a target."""
        if not self.target:
            return None
        return halfway if self.target == HALFWAY else float(self.target)


def _target_error(measure: str, target: Optional[str]) -> Optional[str]:
    """What is wrong with an entry's target, or None."""
    if measure != UPDATES_TO:
        return None if target is None else (f"only {UPDATES_TO} takes a target (@BITS or @{HALFWAY}); write "
                                            f"{measure}:A:B")
    if target is None:
        return f"{UPDATES_TO} needs a target: write {UPDATES_TO}@BITS:A:B (e.g. {UPDATES_TO}@9.0:tupe-r:bert-a) or " \
               f"{UPDATES_TO}@{HALFWAY}:A:B"
    if target == HALFWAY or positive_bits(target) is not None:
        return None
    return f"the target must be a positive number of bits or {HALFWAY}, not '{target}'"


def parse_declaration(text: str) -> List[Endpoint]:
    """ENDPOINTS as written -> its endpoints, in the order given (``none``: no declared comparison): the one parse of
    the setting (the plan's report specification, ``tupe_study.report_spec``, settings.env's meaning, ``--plan``).
    Only ``updates_to`` takes (and needs) a target: ``updates_to@BITS:A:B`` or ``updates_to@halfway:A:B``; each
    entry once, each question once (``refuse_repeated_questions``). Which models the study has is
    ``check_models``'."""
    if text.strip() in ("", "none"):
        return []
    out: List[Endpoint] = []
    for entry in text.split():
        m = re.fullmatch(r"([a-z_]+)(?:@([^:]*))?:([a-z0-9_-]+):([a-z0-9_-]+)", entry)
        if not m:
            raise UsageError(f"ENDPOINTS entry '{entry}': write MEASURE:A:B (e.g. final_loss:tupe-r:bert-a) or "
                             f"{UPDATES_TO}@TARGET:A:B, or none")
        measure, target, a, b = m.group(1), m.group(2), m.group(3).replace("_", "-"), m.group(4).replace("_", "-")
        if measure not in MEASURES:
            raise UsageError(f"ENDPOINTS entry '{entry}': the measures are {', '.join(MEASURES)}, not '{measure}'")
        problem = _target_error(measure, target)
        if problem:
            raise UsageError(f"ENDPOINTS entry '{entry}': {problem}")
        e = Endpoint(measure, a, b, target or "", written=entry)
        if any(_same(e, f) for f in out):
            raise UsageError(f"ENDPOINTS entry '{entry}' is given twice")
        out.append(e)
    refuse_repeated_questions(out)
    refuse_two_halfway_targets(out)
    return out


def check_models(endpoints: Sequence[Endpoint], seeds: Mapping[str, Sequence[int]]) -> None:
    """A UsageError unless A and B of every endpoint are two of the study's MLM models (``seeds``: each with its
    pre-training seeds) that share at least 2 seeds (a t-test needs 2)."""
    for e in endpoints:
        entry = e.entry
        for name in (e.a, e.b):
            if name not in seeds:
                raise UsageError(f"ENDPOINTS entry '{entry}': '{name}' is not an MLM model of this study "
                                 f"(VARIANTS: {' '.join(seeds)})")
        shared = set(seeds[e.a]) & set(seeds[e.b])
        if e.a == e.b or len(shared) < 2:
            raise UsageError(f"ENDPOINTS entry '{entry}': a declared comparison needs two different models that "
                             f"share 2 or more pre-training seeds (they share {len(shared)})")


def parse_endpoints(text: str, seeds: Mapping[str, Sequence[int]]) -> List[Endpoint]:
    """ENDPOINTS -> its endpoints (``parse_declaration``), checked against the study's MLM models and their
    pre-training seeds ``seeds`` (``check_models``)."""
    endpoints = parse_declaration(text)
    check_models(endpoints, seeds)
    return endpoints


def meaning(e: Endpoint) -> tuple:
    """An endpoint as compared: measure, A, B and target, whatever the spelling of its target (``@9`` is ``@9.0``)."""
    return e.measure, e.a, e.b, e.target_bits(-1.0)


def _same(e: Endpoint, f: Endpoint) -> bool:
    """The same comparison, whatever the spelling of its target (``@9`` and ``@9.0``)."""
    return meaning(e) == meaning(f)


def refuse_repeated_questions(endpoints: Sequence[Endpoint]) -> None:
    """One question asked twice in one declaration is a UsageError naming both entries: ``final_loss:tupe-r:bert-a``
    and ``final_loss:bert-a:tupe-r`` are one two-sided test of the same pair on the same measure (its p-value is the
    same), so the family would count it twice and Holm's correction would be wrong."""
    asked: Dict[tuple, str] = {}  # (measure, target, {A, B}) -> the entry that asked it
    for e in endpoints:
        entry = e.entry
        question = (e.measure, e.target_bits(-1.0), frozenset((e.a, e.b)))
        if question in asked:
            raise UsageError(f"ENDPOINTS entries '{asked[question]}' and '{entry}' ask one question ({e.measure} of "
                             f"{e.a} against {e.b}, a two-sided test either way round): declare it once")
        asked[question] = entry


def refuse_two_halfway_targets(endpoints: Sequence[Endpoint]) -> None:
    """``halfway`` is resolved once (``UPDATES_TO_TARGET``, from B's sweep): ``updates_to@halfway`` entries with
    different B would each need their own target, so they are a UsageError naming both (give one a number of bits)."""
    halfway = [e for e in endpoints if e.measure == UPDATES_TO and e.target == HALFWAY]
    other = next((e for e in halfway if e.b != halfway[0].b), None)
    if other is not None:
        raise UsageError(f"ENDPOINTS entries '{halfway[0].entry}' and '{other.entry}': halfway is one target, "
                         f"resolved from one B's sweep ({halfway[0].b}, not also {other.b}): give the other a target "
                         "in bits (updates_to@BITS:A:B)")


def parse_margin(text: str) -> Optional[float]:
    """EQUIVALENCE_BITS -> the margin in bits (``none``: no equivalence is ever concluded)."""
    if text.strip() in ("", "none"):
        return None
    margin = positive_bits(text)
    if margin is None:
        raise UsageError(f"EQUIVALENCE_BITS must be a positive number of bits or none, not '{text}'")
    return margin


def positive_bits(text: str) -> Optional[float]:
    """``text`` as a positive, finite number of bits (an updates_to target, the equivalence margin); None if it is
    not one (not a number, 0 or less, NaN, infinite)."""
    try:
        bits = float(text)
    except ValueError:
        return None
    return bits if bits > 0 and not math.isinf(bits) else None
