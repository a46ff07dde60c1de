"""The Markdown tables of positional variants in README.md and docs/positional_encodings.md, made from the
registry (``tupe_core/registry.py``) so that no hand-written list of variants can drift from it.

A table sits between two marker lines, ``<!-- variants:NAME -->`` and ``<!-- /variants:NAME -->``.
``python -m tupe_tools.variant_table FILE...`` rewrites the marked tables of the files in place
(run from the repository root: ``python -m tupe_tools.variant_table README.md
docs/positional_encodings.md``); without files it prints every table. ``tests/test_docs.py`` fails when a
file's table differs from what this module makes.
"""
from __future__ import annotations

import re
import sys
from typing import Callable, Dict, List

from tupe_common.io import write_text

from tupe_core.record import PositionalVariant
from tupe_core.registry import ABOUT, DEFAULT_VARIANT, VARIANTS, arch_only, flags_of

REGENERATE = "python -m tupe_tools.variant_table README.md docs/positional_encodings.md"


def escape(cell: str) -> str:
    """A table cell's text with its ``|`` escaped (``|j-i|`` would end the cell)."""
    return cell.replace("|", "\\|")


def summary_table() -> str:
    """One row per variant: its base arch, its ``pretrain.sh`` name, what it is and its source."""
    rows = ["| `--arch` (base size) | `VARIANT=` | what it is (source) |", "|---|---|---|"]
    rows += [f"| `{name}_base` | `{name.replace('_', '-')}` | {escape(about)} |" for name, about in ABOUT.items()]
    return "\n".join(rows)


def _field_flags(variant: PositionalVariant) -> List[str]:
    """``flags_of(variant)`` cut into one flag (with its value) per flag, in the flags' order."""
    return re.split(r" (?=--)", flags_of(variant))


def flag_difference(variant: PositionalVariant, base: PositionalVariant) -> str:
    """The flags that turn ``base`` into ``variant`` on the same arch; what only an arch sets cannot be flags."""
    if arch_only(variant) or arch_only(base):
        return f"only `--arch {variant.name}_*` (no flag combination reaches it)"
    changed = [new for new, old in zip(_field_flags(variant), _field_flags(base)) if new != old]
    return f"`{' '.join(changed)}`" if changed else "(the defaults)"


def flags_table() -> str:
    """One row per variant: the flags that select it on ``tupe_roberta_base`` (TUPE-R by default)."""
    base = VARIANTS[DEFAULT_VARIANT]
    rows = ["| variant | flags on `tupe_roberta_base` (TUPE-R without flags) |", "|---|---|"]
    rows += [f"| `{name}` | {flag_difference(variant, base)} |" for name, variant in VARIANTS.items()]
    return "\n".join(rows)


TABLES: Dict[str, Callable[[], str]] = {"summary": summary_table, "flags": flags_table}


def marked(name: str) -> re.Pattern:
    """The marker lines of table ``name`` and what lies between them."""
    return re.compile(rf"(<!-- variants:{name} -->\n)(.*?)(<!-- /variants:{name} -->)", re.DOTALL)


def _between_markers(table: str) -> Callable[[re.Match], str]:
    """A substitution that keeps the two marker lines and puts ``table`` between them."""
    return lambda m: m.group(1) + table + "\n" + m.group(3)


def regenerate(text: str) -> str:
    """``text`` with every marked table replaced by the registry's."""
    for name, make in TABLES.items():
        text = marked(name).sub(_between_markers(make()), text)
    return text


def main(argv: List[str]) -> int:
    if not argv:
        print("\n\n".join(f"<!-- variants:{name} -->\n{make()}\n<!-- /variants:{name} -->"
                          for name, make in TABLES.items()))
        return 0
    for path in argv:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not any(marked(name).search(text) for name in TABLES):
            print(f"error: {path} has no variant table between <!-- variants:NAME --> markers", file=sys.stderr)
            return 2
        new = regenerate(text)
        if new != text:
            write_text(path, new)
            print(f"updated {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
