"""The report's specification: what the study declared before it ran, as the report states and tests it.

``ReportSpec`` holds the declared comparisons (ENDPOINTS, parsed once by ``tupe_study.endpoints.parse_declaration``,
with the text as written, which the report quotes), the equivalence margin (EQUIVALENCE_BITS) and the resolved target
of ``updates_to@halfway`` (UPDATES_TO_TARGET, the sweep's second declaration); the Holm family is its endpoints
(``family_size``). The plan builds it once from the settings (``tupe_study.plan.Plan.report_spec``), the report stage
hands it to the report as an object, and an archive keeps it as ``report_spec.json`` (``to_json``), which the
archive's render reads back (``load``). An archive written before that file has none: its specification is derived
from its report arguments, which are checked against its settings.env, as before.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from tupe_study.declaration import Endpoint, check_models, meaning, parse_declaration, parse_margin, positive_bits
from tupe_common.errors import UsageError

SPEC_FILE = "report_spec.json"
VERSION = 1


@dataclass(frozen=True)
class ReportSpec:
    text: str = "none"  # ENDPOINTS as written ("none": nothing declared)
    endpoints: Tuple[Endpoint, ...] = ()  # the same, parsed, in the order given
    margin: Optional[float] = None  # EQUIVALENCE_BITS in bits (None: no equivalence is concluded)
    updates_to_target: Optional[float] = None  # updates_to@halfway's target in bits, once the sweep resolved it

    @classmethod
    def declare(cls, endpoints: str = "none", equivalence_bits: str = "none",
                updates_to_target: Optional[float] = None) -> "ReportSpec":
        """From the settings as written; a UsageError naming what is wrong."""
        return cls(endpoints, tuple(parse_declaration(endpoints)), parse_margin(equivalence_bits), updates_to_target)

    @classmethod
    def from_settings(cls, env: Mapping[str, str]) -> "ReportSpec":
        """From settings.env's lines (``tupe_study.settings._lines``): its absent lines read as none."""
        target = env.get("UPDATES_TO_TARGET")
        bits = None if target is None else positive_bits(target)
        if target is not None and bits is None:
            raise UsageError(f"UPDATES_TO_TARGET={target}: not a positive number of bits")
        return cls.declare(env.get("ENDPOINTS", "none"), env.get("EQUIVALENCE_BITS", "none"), bits)

    @property
    def family_size(self) -> int:
        """The declared family's size (Holm): every declared comparison, tested or not."""
        return len(self.endpoints)

    def resolved(self, updates_to_target: Optional[float]) -> "ReportSpec":
        """The same declaration with the sweep's resolved target."""
        return replace(self, updates_to_target=updates_to_target)

    def check(self, seeds: Mapping[str, Sequence[int]]) -> None:
        """A UsageError unless every comparison is of two MLM models of the study sharing 2 or more seeds."""
        check_models(self.endpoints, seeds)

    def to_json(self) -> Dict[str, Any]:
        return {"version": VERSION, "endpoints_text": self.text,
                "endpoints": [{"measure": e.measure, "a": e.a, "b": e.b, "target": e.target} for e in self.endpoints],
                "family_size": self.family_size, "equivalence_bits": self.margin,
                "updates_to_target": self.updates_to_target}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ReportSpec":
        """The inverse of ``to_json``; a ValueError when ``data`` is not one (its endpoints are read as stored, not
        parsed again)."""
        try:
            if data["version"] != VERSION:
                raise ValueError(f"version {data['version']!r}, not {VERSION}")
            written = str(data["endpoints_text"]).split()  # the entries as the user wrote them, for messages
            written = written if len(written) == len(data["endpoints"]) else [""] * len(data["endpoints"])
            endpoints = tuple(Endpoint(str(e["measure"]), str(e["a"]), str(e["b"]), str(e["target"]), written=w)
                              for e, w in zip(data["endpoints"], written))
            spec = cls(str(data["endpoints_text"]), endpoints, _number(data["equivalence_bits"]),
                       _number(data["updates_to_target"]))
            if data["family_size"] != spec.family_size:
                raise ValueError(f"family_size {data['family_size']!r} for {spec.family_size} endpoints")
            try:  # the text the report quotes declares the endpoints it tests, or the quote would misstate them
                quoted = parse_declaration(spec.text)
            except UsageError as e:
                raise ValueError(f"endpoints_text {spec.text!r}: {e}") from None
            if [meaning(e) for e in quoted] != [meaning(e) for e in endpoints]:
                raise ValueError(f"endpoints_text {spec.text!r} does not declare the endpoints stored beside it")
        except (KeyError, TypeError) as e:
            raise ValueError(f"missing or malformed {e}") from None
        return spec

    @classmethod
    def load(cls, path: str) -> "ReportSpec":
        """Read ``path`` (a report_spec.json); a ValueError naming it when it is not one."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_json(json.load(f))
        except (json.JSONDecodeError, ValueError) as e:
            raise ValueError(f"{path}: not a report specification ({e})") from None

    def disagreement(self, other: "ReportSpec") -> Optional[str]:
        """The first thing ``other`` declares otherwise, as 'SETTING: mine against theirs'; None when they agree
        (the endpoints by meaning, in any order, as settings.env compares them; the margin; the target to
        settings.env's 4 decimals)."""
        def family(spec: "ReportSpec") -> frozenset:  # in any order (one family); updates_to@9 is updates_to@9.0
            return frozenset(meaning(e) for e in spec.endpoints)

        if family(self) != family(other):
            return f"ENDPOINTS: {self.text!r} against {other.text!r}"
        if self.margin != other.margin:
            return f"EQUIVALENCE_BITS: {_text(self.margin)} against {_text(other.margin)}"
        a, b = self.updates_to_target, other.updates_to_target
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > 5e-5):
            return f"UPDATES_TO_TARGET: {_text(a)} against {_text(b)}"
        return None


def _number(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _text(value: Optional[float]) -> str:
    return "none" if value is None else f"{value:g}"
