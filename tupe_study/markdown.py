"""Numbers as the study's Markdown tables write them (the report and its sections' modules)."""
from __future__ import annotations

import math
from typing import Optional


def fmt(x: Optional[float], nd: int = 3) -> str:
    """``x`` to ``nd`` decimals; ``—`` for a missing or NaN value."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def fmt_p(x: Optional[float]) -> str:
    """A p-value for a table: 3 decimals, or 2 significant digits below 0.001."""
    if x is None or math.isnan(x):
        return "—"
    return f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"
