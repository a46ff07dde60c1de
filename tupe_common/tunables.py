"""The settings of a script read from the environment (``train_scripts/pretrain.py``, ``glue/finetune.py``, ``glue/grid.py``,
``preprocess/c4/pipeline.py``; the study reads its own table with :func:`whole` too).

A table is written as lines ``NAME | default | help`` (``str.format`` fills ``{...}`` in the default and the help,
so a default can come from the recipe); a setting's value is its non-empty environment value, else its default; an
old name still sets the new one, with a warning. ``--help`` lists the table (:func:`usage_rows`); a run prints every
value beside its default (:func:`shown`); :func:`whole` reads a setting as a whole number or names it in a usage
error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

from tupe_common.errors import UsageError

Say = Callable[[str], None]


@dataclass(frozen=True)
class Tunable:
    name: str
    default: str
    help: str


def table(text: str, **values: object) -> Tuple[Tunable, ...]:
    """The tunables of ``text``'s ``NAME | default | help`` lines (blank lines skipped)."""
    rows = []
    for line in text.strip().splitlines():
        name, default, help_ = (part.strip() for part in line.split("|", 2))
        rows.append(Tunable(name, default.format(**values), help_.format(**values)))
    return tuple(rows)


def resolve(tunables: Sequence[Tunable], environ: Mapping[str, str], say: Say,
            renamed: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Every tunable's value: a non-empty environment value, else its default. ``renamed``: old name -> new name
    (the old one sets the new one unless that is set too, with a warning either way)."""
    values = {t.name: environ.get(t.name) or t.default for t in tunables}
    for old, new in (renamed or {}).items():
        if not environ.get(old):
            continue
        if environ.get(new):
            say(f"warning: {old} is a deprecated name of {new}; {new}={environ[new]} is set, so {old}={environ[old]} "
                "is ignored")
        else:
            values[new] = environ[old]
            say(f"warning: {old} is a deprecated name of {new}: set {new}={environ[old]} instead")
    return values


def whole(values: Mapping[str, str], name: str, positive: bool = True) -> int:
    """The setting ``name`` as a whole number (a positive one unless ``positive`` is False), else a UsageError
    naming it."""
    v = values[name]
    if not re.fullmatch(r"[0-9]+", v) or (positive and int(v) == 0):
        raise UsageError(f"{name} must be a {'positive ' if positive else ''}whole number, not '{v}'")
    return int(v)


def usage_rows(tunables: Sequence[Tunable]) -> str:
    """``  NAME  default  help`` lines for ``--help`` (an empty default shown as "")."""
    return "".join(f"  {t.name:<22} {t.default or chr(34) * 2:<20} {t.help}\n" for t in tunables)


def shown(tunables: Sequence[Tunable], values: Mapping[str, str]) -> str:
    """``environment (NAME=value [default])`` and a line per tunable: what a run prints as it starts."""
    return "environment (NAME=value [default])\n" + "\n".join(
        f"  {f'{t.name}={values[t.name]}':<22} [{t.default}]" for t in tunables)
