"""What an encoding's options and flags are: ``Flag`` (a ``--flag`` of ``tupe_roberta``), ``option`` (the metadata of
one field of an encoding's ``Options`` dataclass: its flag's help and choices) and ``NoOptions``.

An encoding declares its options as a frozen dataclass whose fields have defaults; a field made with ``option(...)``
is also the ``--flag`` of its name (``rel_pos_bins`` -> ``--rel-pos-bins``), one with ``option(..., flag=False)`` is
set by how the flags select the encoding (PAM's ``mode`` by ``--attention-block pam_<mode>``). docs/extending.md
shows one.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Tuple


@dataclass(frozen=True)
class Flag:
    """One ``--flag`` of ``tupe_roberta``: its field name (``rel_pos_bins``), default, help and, for a string, its
    choices (empty for a selecting flag such as ``--attention-block``: its choices are the default and the values
    the encodings are selected by)."""

    name: str
    default: Any
    help: str
    choices: Tuple[str, ...] = ()

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


def option(default: Any, help: str, choices: Tuple[str, ...] = (), flag: bool = True):
    """A field of an encoding's ``Options``: its default, and the help and choices of its flag (``flag=False``: no
    flag of its own)."""
    return field(default=default, metadata={"help": help, "choices": choices, "flag": flag})


@dataclass(frozen=True)
class NoOptions:
    """The options of an encoding that has none."""


def option_flags(options_cls: type) -> Tuple[Flag, ...]:
    """The flags of an ``Options`` dataclass, in field order."""
    return tuple(Flag(f.name, f.default, f.metadata.get("help", ""), f.metadata.get("choices", ()))
                 for f in fields(options_cls) if f.metadata.get("flag", True))


def choices(options_cls: type) -> Dict[str, Tuple[str, ...]]:
    """field -> its choices, for the fields that have some."""
    return {f.name: f.metadata["choices"] for f in fields(options_cls) if f.metadata.get("choices")}
