"""One spelling per number: the short text that names a value in run folders and records (``lr1e-3_seed1``), so
that ``1e-3`` and ``0.001`` name one run.

:func:`short` is the spelling new names take; :func:`number` reads one (by value: :func:`same_number`).
:func:`named` is the one lookup of a name made of numbers (a fine-tuning run's ``lr{}_seed{}``, a sweep's
``lr{}``): the existing entry spelt otherwise with the same values, else the short spelling, so that a run is never
made twice under two spellings. :func:`check_once` refuses a declared list that holds one value twice.
"""
from __future__ import annotations

import math
import os
import re
from decimal import Decimal
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from tupe_common.errors import UsageError

# a number as written in decimal (``2e-5``, ``.5``, ``-1``): no nan, inf, ``1_0`` or spaces, which Python's float
# would take but no command line or run folder name should carry
NUMBER = r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"


def short(value: float) -> str:
    """The shorter of the plain and the scientific spelling of ``value``'s shortest round-trip digits (ties: the
    plain one): 0.001 -> ``1e-3``, 0.0005 -> ``5e-4``, 0.01 -> ``0.01``, 0.0015 -> ``0.0015``, 2.0 -> ``2``."""
    d = Decimal(repr(float(value))).normalize()
    sign, digits, exponent = d.as_tuple()
    head = "".join(map(str, digits))
    mantissa = head[0] + ("." + head[1:] if len(head) > 1 else "")
    scientific = f"{'-' if sign else ''}{mantissa}e{exponent + len(digits) - 1}"
    plain = format(d, "f")
    return plain if len(plain) <= len(scientific) else scientific


def number(text: str) -> Optional[float]:
    """The finite value ``text`` spells as a :data:`NUMBER`, else None."""
    if not re.fullmatch(NUMBER, text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def same_number(a: str, b: str) -> bool:
    """Whether two spellings name one value (``1e-3`` and ``0.001``); text that is no number compares as text."""
    x, y = number(a), number(b)
    return a == b if x is None or y is None else x == y


def spelling(value: Union[int, float]) -> str:
    """The one spelling of a value in a name: a whole-number kind (a seed) as an integer, a float :func:`short`."""
    return str(int(value)) if isinstance(value, int) else short(value)


def values_of(template: str, name: str) -> Optional[Tuple[float, ...]]:
    """The values ``name`` spells in ``template``'s form, one per ``{}`` (``lr{}_seed{}``: ``lr0.001_seed1`` ->
    (0.001, 1.0)); None for a name of another form."""
    m = re.fullmatch(f"({NUMBER})".join(map(re.escape, template.split("{}"))), name)
    values = tuple(number(g) for g in m.groups()) if m else None
    return None if values is None or None in values else values


def by_value(template: str, names: Iterable[str]) -> Dict[Tuple[float, ...], List[str]]:
    """The names of ``template``'s form, sorted, grouped by the values they spell (one group for ``lr1e-3_seed1`` and
    ``lr0.001_seed1``); names of another form left out."""
    groups: Dict[Tuple[float, ...], List[str]] = {}
    for name in sorted(names):
        values = values_of(template, name)
        if values is not None:
            groups.setdefault(values, []).append(name)
    return groups


def named(parent: str, template: str, *values: Union[int, float]) -> str:
    """The name in ``parent`` of ``template`` filled with ``values``: the entry that spells them otherwise where
    one exists (``lr0.001_seed1`` or ``lr5e-4_seed1``, as typed before), else the one :func:`spelling`
    (``lr1e-3_seed1``). Two entries of the same values are a UsageError naming both."""
    new = template.format(*map(spelling, values))
    found = by_value(template, os.listdir(parent) if os.path.isdir(parent) else []).get(
        tuple(float(v) for v in values), [])
    if len(found) > 1:
        raise UsageError(f"{parent}: {' and '.join(found)} name one run ({new} in its one spelling): move all but one "
                         "away")
    return found[0] if found else new


def check_once(what: str, values: Sequence, noun: str) -> None:
    """Each value of a declared list once, numbers by value (``1e-3`` and ``0.001`` are one LR), other text as
    text: a repeat is a UsageError naming both spellings. A repeated seed, LR or task would make one run twice,
    or count it twice; neither is what a list means."""
    seen: Dict[object, str] = {}
    for text in map(str, values):
        value = number(text)
        key = text if value is None else value
        if key in seen:
            same = (f"{noun} {text} is given twice" if text == seen[key] else
                    f"{seen[key]} and {text} are one {noun} ({short(value)}), given twice")
            raise UsageError(f"{what}: {same}; give each {noun} once")
        seen[key] = text
