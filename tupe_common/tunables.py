"""The settings of a script read from the environment (``train_scripts/pretrain.py``, ``glue/finetune.py``, ``glue/grid.py``,
``preprocess/c4/pipeline.py``; the study reads its own table with :func:`whole` too).

A table is written as lines ``NAME | kind | default | help`` (``str.format`` fills ``{...}`` in the default and the
help, so a default can come from the recipe); the kind says what a value may be (:data:`KINDS`: ``int1`` a whole
number >= 1, ``auto/int1`` the word auto or one, ``mlm/electra`` one of the words, empty: any text), and
:func:`check` refuses every value of another kind by name, before any work; a setting's value is its non-empty environment value, else its default; an
old name still sets the new one, with a warning. ``--help`` lists the table (:func:`usage_rows`); a run prints every
value beside its default (:func:`shown`); :func:`whole` reads a setting as a whole number or names it in a usage
error; :func:`check_names` refuses a misspelt setting (``VARIENT=bert-a``) before any work, with "did you mean".
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tupe_common.errors import UsageError

Say = Callable[[str], None]


@dataclass(frozen=True)
class Tunable:
    name: str
    default: str
    help: str
    kind: str = ""  # what a value may be: alternatives joined by "/", each a word of KINDS or a literal word


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None  # no nan, no inf


def _whole(text: str) -> Optional[int]:
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else None


def _at_least(value: Optional[float], low: float) -> bool:
    return value is not None and value >= low


# kind word -> (does the value fit, what the error line calls it); a kind joins words and these by "/"
KINDS: Dict[str, Tuple[Callable[[str], bool], str]] = {
    "int": (lambda v: _whole(v) is not None, "an integer"),
    "int0": (lambda v: _at_least(_whole(v), 0), "a whole number"),
    "int1": (lambda v: _at_least(_whole(v), 1), "a positive whole number"),
    "num": (lambda v: _number(v) is not None, "a number"),
    "num0": (lambda v: _at_least(_number(v), 0), "a number >= 0"),
    "num+": (lambda v: _at_least(_number(v), 0) and _number(v) != 0, "a number > 0"),
    "frac": (lambda v: _at_least(_number(v), 0) and _number(v) < 1, "a fraction in [0, 1)"),
}


def fits(kind: str, value: str) -> bool:
    """Whether ``value`` is of ``kind`` (empty: anything)."""
    return not kind or any(KINDS[k][0](value) if k in KINDS else value == k for k in kind.split("/"))


def describe(kind: str) -> str:
    """``kind`` in words: 'auto or a positive whole number', 'mlm or electra', 'one of auto, 0, 1'."""
    said = [KINDS[k][1] if k in KINDS else k for k in kind.split("/")]
    return f"one of {', '.join(said)}" if len(said) > 2 else " or ".join(said)


def check(tunables: Sequence[Tunable], values: Mapping[str, str]) -> None:
    """UsageError for the first value that is not of its tunable's kind, naming the setting and what it may be;
    every choice, number and list is checked at once, before any work."""
    for t in tunables:
        if not fits(t.kind, values[t.name]):
            raise UsageError(f"{t.name} must be {describe(t.kind)}, not '{values[t.name]}'")


def table(text: str, **values: object) -> Tuple[Tunable, ...]:
    """The tunables of ``text``'s ``NAME | kind | default | help`` lines (blank lines skipped)."""
    rows = []
    for line in text.strip().splitlines():
        name, kind, default, help_ = (part.strip() for part in line.split("|", 3))
        for word in kind.split("/") if kind else ():
            if not re.fullmatch(r"[a-z_0-9+.\-]+", word):
                raise ValueError(f"{name}: kind word {word!r} (table line {line!r})")
        rows.append(Tunable(name, default.format(**values), help_.format(**values), kind))
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


def edit_distance(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (insert, delete, substitute, swap two neighbours: 1 each)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def nearest(name: str, known: Iterable[str]) -> Optional[str]:
    """The known setting that ``name`` most likely misspells: the same in another case, or one edit away from a
    name of 4 or more characters; None when none is that close (short names such as LR are near too much to guess;
    two edits would catch a launcher's ROLE_RANK as NODE_RANK)."""
    best: Optional[str] = None
    for k in known:
        if name.upper() == k:
            return k
        if len(k) < 4:
            continue
        if best is None and edit_distance(name, k) == 1:
            best = k
    return best


def misspelt(known: Iterable[str], environ: Mapping[str, str], prefixes: Sequence[str] = (),
             passed_on: Callable[[], Iterable[str]] = tuple) -> List[Tuple[str, Optional[str]]]:
    """(name, what it may mean) of every environment variable that looks like one of ``known`` but is not: a
    near miss (:func:`nearest`) or an unknown name with one of the script's own ``prefixes`` (FT_...). Names of
    ``passed_on()`` (other scripts' settings that this one hands on) are never flagged; it is called only when
    something is."""
    known = sorted(set(known))
    found = [(n, nearest(n, known)) for n in sorted(environ) if n not in known and environ[n] != ""]
    found = [(n, k) for n, k in found if k is not None or any(n.startswith(p) for p in prefixes)]
    if found:
        other = set(passed_on())
        found = [(n, k) for n, k in found if n not in other]
    return found


def check_names(known: Iterable[str], environ: Mapping[str, str], prog: str, prefixes: Sequence[str] = (),
                passed_on: Callable[[], Iterable[str]] = tuple) -> None:
    """UsageError for the first misspelt setting of ``environ`` (:func:`misspelt`), so ``VARIENT=bert-a`` does not
    train the default variant: 'VARIENT is not a setting of pretrain.sh: did you mean VARIANT? ...'."""
    bad = misspelt(known, environ, prefixes, passed_on)
    if bad:
        name, meant = bad[0]
        guess = f"did you mean {meant}?" if meant else f"no setting of {prog} is called that"
        raise UsageError(f"{name} is not a setting of {prog}: {guess} ({prog} --help lists them; unset {name} if "
                         "it is meant for another program)")
