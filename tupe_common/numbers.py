"""One spelling per number: the short text that names a value in run folders and records (``lr1e-3_seed1``), so
that ``1e-3`` and ``0.001`` name one run.

:func:`short` is the spelling new folders take; :func:`same_number` compares spellings by value (a folder spelt
otherwise with the same value is the same run).
"""
from __future__ import annotations

from decimal import Decimal


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


def same_number(a: str, b: str) -> bool:
    """Whether two spellings name one value (``1e-3`` and ``0.001``); text that is no number compares as text."""
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b
