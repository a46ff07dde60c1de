"""The settings of a script read from the environment, once, into a typed settings class (``PretrainConfig`` of
``tupe_pretrain/pretrain.py``, ``FinetuneConfig`` and ``GridConfig`` of ``glue/``, ``C4Config`` of
``tupe_preprocess/c4/pipeline.py``, ``StudyConfig`` of ``tupe_study/settings.py``): one mechanism for every entry point.

A settings class is a frozen dataclass of :class:`Settings` whose fields are named as the environment variables
(``TOTAL_UPDATES``), each declared with :func:`setting` (its default as the environment would write it, its help,
its kind)::

    @dataclass(frozen=True)
    class PretrainConfig(Settings):
        TOTAL_UPDATES: Optional[int] = setting("auto", "updates (auto: the recipe's)", "auto/int1")

The kind says what a value may be (:data:`KINDS`: ``int1`` a whole number >= 1, ``auto/int1`` the word auto or
one, ``mlm/electra`` one of the words, ``[num+]`` a list of numbers > 0, empty: any text) and what it becomes
(:func:`parse`: an int, a :class:`Num`, a bool for ``0/1``, None for ``auto``, a tuple for a list, else the text);
a setting declared ``parsed_as=`` a class is that class's ``parse`` of its text instead (the study's ``MODEL_ARGS``).
Every construction checks every field: text (a default, the environment's value) is parsed, and a value
(``replace(config, GPUS=2)``) is checked as it is, never through text (:func:`holds`): a value of another kind is a
UsageError naming the setting, before any work.
``Config.read(environ)`` takes a setting's non-empty environment value, else its default (an old name still sets
the new one, with a warning); ``--help`` lists :meth:`Settings.tunables`; a run prints :func:`shown`;
:func:`check_names` refuses a misspelt setting (``VARIENT=bert-a``) before any work, with "did you mean", and
another trainer's name of one (``MAX_UPDATE``: fairseq's, declared beside the setting as ``others=``), naming
ours; :func:`child_environ` is the environment a child process gets (no setting of the parent's taken for the
child's).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from tupe_common.errors import UsageError
from tupe_common.numbers import number

Say = Callable[[str], None]


@dataclass(frozen=True)
class Tunable:
    name: str
    default: str
    help: str
    kind: str = ""  # what a value may be: alternatives joined by "/", each a word of KINDS or a literal word


def _whole(text: str) -> Optional[int]:
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else None


def _at_least(value: Optional[float], low: float) -> bool:
    return value is not None and value >= low


# kind word -> (does the value fit, what the error line calls it); a kind joins words and these by "/"
KINDS: Dict[str, Tuple[Callable[[str], bool], str]] = {
    "int": (lambda v: _whole(v) is not None, "an integer"),
    "int0": (lambda v: _at_least(_whole(v), 0), "a whole number"),
    "int1": (lambda v: _at_least(_whole(v), 1), "a positive whole number"),
    "num": (lambda v: number(v) is not None, "a number"),
    "num0": (lambda v: _at_least(number(v), 0), "a number >= 0"),
    "num+": (lambda v: _at_least(number(v), 0) and number(v) != 0, "a number > 0"),
    "frac": (lambda v: _at_least(number(v), 0) and number(v) < 1, "a fraction in [0, 1)"),
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# kind word -> does a value (what parse makes of text: an int, a number) fit; KINDS says the same of text
VALUE_KINDS: Dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "int0": lambda v: _is_int(v) and v >= 0,
    "int1": lambda v: _is_int(v) and v >= 1,
    "num": _is_real,
    "num0": lambda v: _is_real(v) and v >= 0,
    "num+": lambda v: _is_real(v) and v > 0,
    "frac": lambda v: _is_real(v) and 0 <= v < 1,
}


def _element(kind: str) -> Optional[str]:
    """The element kind of a list kind ``[num+]``; None for any other kind."""
    return kind[1:-1] if kind.startswith("[") and kind.endswith("]") else None


def items(text: str) -> List[str]:
    """A list setting's elements: split on spaces and commas; ``none`` is the empty list."""
    return [] if text.strip() == "none" else text.replace(",", " ").split()


def fits(kind: str, value: str) -> bool:
    """Whether ``value`` is of ``kind`` (empty: anything; ``[k]``: a list of k)."""
    element = _element(kind)
    if element is not None:
        return all(fits(element, x) for x in items(value))
    return not kind or any(KINDS[k][0](value) if k in KINDS else value == k for k in kind.split("/"))


def describe(kind: str) -> str:
    """``kind`` in words: 'auto or a positive whole number', 'mlm or electra', 'one of auto, 0, 1'."""
    element = _element(kind)
    if element is not None:
        return f"a list (spaces or commas) of which each is {describe(element)}"
    said = [KINDS[k][1] if k in KINDS else k for k in kind.split("/")]
    return f"one of {', '.join(said)}" if len(said) > 2 else " or ".join(said)


class Num(float):
    """A number that keeps the text it was written as: ``Num("1e-4")`` is 0.0001 and prints as 1e-4 (commands
    and records show the user's spelling, and a recorded run compares as it did)."""

    text: str

    def __new__(cls, text: str) -> "Num":
        number = super().__new__(cls, float(text))
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Num({self.text!r})"

    def __reduce__(self) -> Tuple[type, Tuple[str]]:  # a copy or a pickle keeps the spelling
        return Num, (self.text,)


def parse(kind: str, value: str) -> Any:
    """``value`` (of ``kind``, :func:`fits`) as what a program uses: None for ``auto``, a bool for a ``0/1``
    choice, an int for the int kinds, a :class:`Num` for the number kinds, a tuple for a list, else the text."""
    element = _element(kind)
    if element is not None:
        return tuple(parse(element, x) for x in items(value))
    words = kind.split("/") if kind else []
    if value == "auto" and "auto" in words:
        return None
    if {w for w in words if w != "auto"} == {"0", "1"}:
        return value == "1"
    for w in words:
        if w in KINDS and KINDS[w][0](value):
            return int(value) if w.startswith("int") else Num(value)
    return value


def holds(kind: str, value: Any) -> bool:
    """Whether ``value``, not text, is of ``kind`` as :func:`parse` would make it: None for ``auto``, a bool (or 0,
    1) for a ``0/1`` choice, an int for the int kinds, a finite number for the number kinds, a tuple of such for a
    list; a kind of words or any text holds text, so a value there is taken as its text. Text is :func:`fits`' to
    check."""
    element = _element(kind)
    if element is not None:
        return isinstance(value, tuple) and all(fits(element, x) if isinstance(x, str) else holds(element, x)
                                                for x in value)
    words = kind.split("/") if kind else []
    if value is None:
        return "auto" in words
    if {w for w in words if w != "auto"} == {"0", "1"}:
        return isinstance(value, bool) or _is_int(value) and value in (0, 1)
    if not any(w in VALUE_KINDS for w in words):
        return fits(kind, text(value))  # a word or free text: the value's text is the value
    return any(VALUE_KINDS[w](value) for w in words if w in VALUE_KINDS)


def value_of(kind: str, value: Any) -> Any:
    """``value`` as the field holds it: text parsed (:func:`parse`), a value as it is (a ``0/1`` choice a bool, a
    list's text elements parsed); ``value`` fits ``kind`` (:func:`fits`, :func:`holds`)."""
    if isinstance(value, str):
        return parse(kind, value)
    element = _element(kind)
    if element is not None:
        return tuple(value_of(element, x) for x in value)
    words = kind.split("/") if kind else []
    if value is not None and {w for w in words if w != "auto"} == {"0", "1"}:
        return bool(value)
    if value is not None and not any(w in VALUE_KINDS for w in words):
        return text(value)
    return value


def arg_type(kind: str) -> Callable[[str], Any]:
    """argparse's ``type=`` for an option of ``kind`` (``int1``, ``num+``, ...): the value :func:`parse` gives, or
    argparse's one usage line (exit 2): ``argument --steps: '0' is not a positive whole number``."""

    def convert(value: str) -> Any:
        if not fits(kind, value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {describe(kind)}")
        return parse(kind, value)

    return convert


def text(value: Any) -> str:
    """A parsed value as the environment writes it (:func:`parse` undone): auto, 1/0, a list joined by spaces (an
    empty one as ``none``: an empty value would read as the default)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return " ".join(text(x) for x in value) or "none"  # an empty list: what reads back as one (not the default)
    return str(value)


def setting(default: str, help: str, kind: str = "", others: Sequence[str] = (), **extra: Any) -> Any:
    """A field of a :class:`Settings` class: ``default`` as the environment would write it (``{NAME}`` in the help
    is written as is), ``kind`` what a value may be (:data:`KINDS`), ``others`` other trainers' names of it as
    environment variables (fairseq's ``MAX_UPDATE`` for ``--max-update``, Hugging Face's ``MAX_STEPS``), which
    :func:`check_names` refuses naming this one, ``extra`` what a script adds to the row (``parsed_as``: a class
    whose ``parse(text)`` makes the value, which ``str()`` writes back as the text: ``tupe_core.facts.ModelArgs``)."""
    for word in (_element(kind) or kind).split("/") if kind else ():
        if not re.fullmatch(r"[a-z_0-9+.\-]+", word):
            raise ValueError(f"kind word {word!r} (of {kind!r})")
    return field(default=default, metadata={"help": help, "kind": kind, "others": tuple(others), **extra})


S = TypeVar("S", bound="Settings")


def _parsed(name: str, cls: type, value: Any) -> Any:
    """The value of a setting of a type of its own (``setting(..., parsed_as=ModelArgs)``, its kind empty): text
    parsed by ``cls.parse`` (its ValueError a UsageError naming the setting), a value of ``cls`` as it is; the
    value's ``str()`` is its text (:func:`text`)."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise UsageError(f"{name} must be {cls.__name__} or its text, not {value!r}")
    try:
        return cls.parse(value)
    except ValueError as e:
        raise UsageError(f"{name}='{value}': {e}") from None


@dataclass(frozen=True)
class Settings:
    """A script's settings, typed (module docstring). Subclasses set ``RENAMED`` (old name -> new name)."""

    RENAMED: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), f.metadata["kind"]
            if f.metadata.get("parsed_as"):
                object.__setattr__(self, f.name, _parsed(f.name, f.metadata["parsed_as"], value))
                continue
            if not (fits(kind, value) if isinstance(value, str) else holds(kind, value)):
                raw = value if isinstance(value, str) else text(value)  # the refusal says it as the environment would
                element = _element(kind)
                bad = next((x for x in items(raw) if not fits(element, x)), raw) if element is not None else raw
                raise UsageError(f"{f.name} must be {describe(kind)}, not '{bad}'"
                                 + (f" (in '{raw}')" if bad != raw else ""))
            object.__setattr__(self, f.name, value_of(kind, value))

    @classmethod
    def tunables(cls) -> Tuple[Tunable, ...]:
        """The rows of ``--help`` and of :func:`check_names`: name, default, help, kind, in declaration order."""
        return tuple(Tunable(f.name, f.default, f.metadata["help"], f.metadata["kind"])
                     for f in dataclasses.fields(cls))

    @classmethod
    def names(cls) -> List[str]:
        """Every setting's name and every old name (what :func:`check_names` knows)."""
        return [*(f.name for f in dataclasses.fields(cls)), *cls.RENAMED]

    @classmethod
    def others(cls) -> Dict[str, str]:
        """Another trainer's name -> the setting it names here (each setting's ``others``: :func:`setting`)."""
        return {other: f.name for f in dataclasses.fields(cls) for other in f.metadata.get("others", ())}

    @classmethod
    def read(cls: Type[S], environ: Mapping[str, str], say: Optional["Say"] = None,
             defaults: Optional[Mapping[str, str]] = None, **values: Any) -> S:
        """The settings of ``environ`` (a non-empty value, else the default, or its value in ``defaults``;
        ``values`` given by the caller instead), each checked and converted; an old name sets the new one, with a
        warning to ``say``."""
        rows = [dataclasses.replace(t, default=(defaults or {}).get(t.name, t.default)) for t in cls.tunables()]
        raw = resolve(rows, environ, say or (lambda line: None), cls.RENAMED)
        return cls(**{**raw, **values})

    def text(self, name: str) -> str:
        """Setting ``name`` as the environment writes it."""
        return text(getattr(self, name))

    def texts(self) -> Dict[str, str]:
        """Every setting as the environment writes it (a child process's environment, a record)."""
        return {f.name: self.text(f.name) for f in dataclasses.fields(self)}


def table(text: str, **values: object) -> Tuple[Tunable, ...]:
    """The tunables of ``text``'s ``NAME | kind | default | help`` lines (blank lines skipped; ``str.format`` fills
    ``{...}`` in each part with ``values``)."""
    rows = []
    for line in text.strip().splitlines():
        name, kind, default, help_ = (part.strip().format(**values) for part in line.split("|", 3))
        setting(default, help_, kind)  # checks the kind's words
        rows.append(Tunable(name, default, help_, kind))
    return tuple(rows)


def settings_class(name: str, rows: Sequence[Tunable], doc: str) -> Type[Settings]:
    """A :class:`Settings` class made from table rows, for settings whose defaults are known only at run time (the
    C4 pipeline's come from its steps' parsers, which import sentencepiece)."""
    fields = [(t.name, Any, setting(t.default, t.help, t.kind)) for t in rows]
    return dataclasses.make_dataclass(name, fields, bases=(Settings,), frozen=True, namespace={"__doc__": doc})


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


def usage_rows(tunables: Sequence[Tunable]) -> str:
    """``  NAME  default  help`` lines for ``--help`` (an empty default shown as "")."""
    return "".join(f"  {t.name:<22} {t.default or chr(34) * 2:<20} {t.help}\n" for t in tunables)


def shown(settings: Settings) -> str:
    """``environment (NAME=value [default])`` and a line per setting: what a run prints as it starts."""
    return "environment (NAME=value [default])\n" + "\n".join(
        f"  {f'{t.name}={settings.text(t.name)}':<22} [{t.default}]" for t in settings.tunables())


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
                passed_on: Callable[[], Iterable[str]] = tuple, others: Optional[Mapping[str, str]] = None) -> None:
    """UsageError for the first setting of ``environ`` given by another trainer's name (``others``: that name ->
    ours), so ``MAX_UPDATE=10`` does not leave TOTAL_UPDATES at its default: 'MAX_UPDATE is another trainer's name
    ...: use TOTAL_UPDATES ...'; then for the first misspelt one (:func:`misspelt`), so ``VARIENT=bert-a`` does not
    train the default variant: 'VARIENT is not a setting of pretrain.sh: did you mean VARIANT? ...'."""
    known, others = set(known), others or {}
    theirs = sorted(n for n in environ if n in others and n not in known and environ[n] != "")
    theirs = sorted(set(theirs) - set(passed_on())) if theirs else []
    if theirs:
        name = theirs[0]
        raise UsageError(f"{name} is another trainer's name (fairseq's or Hugging Face's): use {others[name]}, "
                         f"{prog}'s ({prog} --help says what it means; unset {name} if it is meant for another "
                         "program)")
    bad = misspelt(known, environ, prefixes, passed_on)
    if bad:
        name, meant = bad[0]
        guess = f"did you mean {meant}?" if meant else f"no setting of {prog} is called that"
        raise UsageError(f"{name} is not a setting of {prog}: {guess} ({prog} --help lists them; unset {name} if "
                         "it is meant for another program)")


def child_environ(environ: Mapping[str, str], parent: Iterable[str], child: Iterable[str] = ()) -> Dict[str, str]:
    """The environment of a child process: ``environ`` without the parent's settings (``parent``: its names, old
    ones included) that the child does not declare (``child``), so that a parent's setting is never read by the
    child, nor taken for a misspelling of one of its own (the study's SEEDS for the C4 step's SEED). Everything
    else passes as it is (PATH, OMP_*, CUDA_*, NCCL_*, SLURM_*, HF_*, ...): not an allow-list."""
    dropped = set(parent) - set(child)
    return {name: value for name, value in environ.items() if name not in dropped}
