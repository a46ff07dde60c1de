"""The ``tupe_roberta`` flags of a set of encodings, and the variant they select: derived from what each encoding
declares (``base.PositionalEncoding``: ``flags``, ``Options``, ``selected_by``, ``combines``), so a new encoding adds
no line here. The registry calls these with its encodings (``registry.py``).

Besides the encodings' flags, two values are set by archs only (no flag reaches them by accident): ``no_position``
(the NoPE arch) and ``arch_encodings`` (the encodings a registered variant has that no flag selects, as KERPLE).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from .options import Flag

ARCH_ONLY: Dict[str, Any] = {"no_position": False, "arch_encodings": ()}
WITHOUT_FLAGS = "a registered encoding without flags"  # how a refusal names an encoding only its arch selects


def declared(encodings: Sequence[type]) -> Dict[str, Flag]:
    """Every flag the encodings declare (their selecting flags, then their options'), in the encodings' order. A flag
    declared by several (``--max-rel-pos``) must have one default; a selecting string flag without choices
    (``--attention-block``) gets its default and every value an encoding is selected by."""
    table: Dict[str, Flag] = {}
    for cls in encodings:
        for flag in (*cls.flags, *cls.option_flags()):
            seen = table.setdefault(flag.name, flag)
            if seen.default != flag.default:
                raise ValueError(f"{flag.option} is declared with the default {seen.default!r} and, by "
                                 f"{cls.__name__}, {flag.default!r}: one flag has one default")
    for name, flag in table.items():
        if isinstance(flag.default, str) and not flag.choices:
            values = [flag.default] + [v for cls in encodings for v in cls.selected_values(name)]
            table[name] = replace(flag, choices=tuple(dict.fromkeys(values)))
    return table


def full(values: Mapping[str, Any], table: Mapping[str, Flag]) -> Dict[str, Any]:
    """Every flag's value: ``values``' where given, else the flag's default (and the arch-only values')."""
    return {**{name: flag.default for name, flag in table.items()}, **ARCH_ONLY,
            **{k: v for k, v in values.items() if k in table or k in ARCH_ONLY}}


def words(name: str, value: Any, table: Mapping[str, Flag]) -> str:
    """A flag with its value as the command line spells it: ``--x``, ``--no-x``, ``--x v``."""
    opt = table[name].option
    return opt if value is True else "--no-" + opt[2:] if value is False else f"{opt} {value}"


def chosen(values: Mapping[str, Any], encodings: Sequence[type]) -> List[type]:
    """The encodings the flag values select, with those of the arch (``arch_encodings``), in the encodings' order."""
    arch = tuple(values.get("arch_encodings", ()))
    return [cls for cls in encodings if cls.selects(values) or cls.name in arch]


def validate(values: Mapping[str, Any], encodings: Sequence[type]) -> None:
    """Refuse flag values that are not a variant, naming the flags to change (``values``: every flag, ``full``):

    * a choice that is not one of its flag's;
    * a position signal that is its variant's only one (an encoding that does not combine), beside another;
    * no signal at all (outside the NoPE arch), or one in the NoPE arch;
    * a flag set away from its default that no encoding of the variant reads (e.g. --untie-cls without a term to
      reset, --no-sinusoidal-scaled without --sinusoidal-pe).
    """
    table = declared(encodings)
    defaults = {name: flag.default for name, flag in table.items()}
    for name, flag in table.items():
        if flag.choices and values[name] not in flag.choices:
            raise ValueError(f"{flag.option} must be one of {flag.choices}, got {values[name]!r}")
    arch = tuple(values.get("arch_encodings", ()))

    def switches(cls) -> Tuple[str, ...]:
        return cls.switches(defaults) if cls.selected_by or cls.flags else (cls.name,)

    def flag(name: str, default: bool = False, on: bool = False) -> str:
        """How a refusal names flag ``name``: with its value, its default (``default``), or as it switches on (``on``)."""
        if name not in table:
            return WITHOUT_FLAGS
        value = table[name].default if default else values[name]
        if not isinstance(table[name].default, bool):
            return table[name].option if on or not default else f"{table[name].option} {value}"
        return words(name, True if on else value, table)

    signal = [name for cls in encodings for name in switches(cls)]
    alone = {name for cls in encodings if not cls.combines for name in switches(cls)}
    on = [name for name in dict.fromkeys(signal) if (values[name] != defaults[name] if name in table else name in arch)]
    only = [name for name in on if name in alone]
    if only and len(on) > 1:  # one encoding at the attention: these are not defined together
        others = [name for name in on if name != only[0]]
        left = ", ".join(flag(name, default=True) for name in table if name in signal and name != only[0])
        raise ValueError(f"{flag(only[0])} cannot be combined with {', '.join(map(flag, others))} (it is the only "
                         f"position signal of its variant): leave the others at their defaults ({left})")
    if values["no_position"] and on:
        raise ValueError("the NoPE arch (nope_*) takes no positional flags; drop them or use another --arch")
    if not on and not values["no_position"]:
        raise ValueError(
            "this variant has no position information at all; the NoPE ablation is its own arch: "
            "--arch nope_base (or nope_large/nope_tiny); see docs/positional_encodings.md"
        )
    picked = chosen(values, encodings)
    read = {name for cls in picked for name in (*cls.selected_by, *(f.name for f in cls.option_flags()))}
    for name, declared_flag in table.items():  # a flag no encoding of this variant reads
        value = values[name]
        if not isinstance(declared_flag.default, bool) or value == declared_flag.default or name in read:
            continue
        readers = [cls for cls in encodings if name in {f.name for f in cls.option_flags()}
                   or cls.selected_by.get(name, not value) == value]
        ways = " or ".join(f"{flags} ({cls.__name__})" if flags else cls.__name__ for cls in readers
                           for flags in [" ".join(flag(s, on=True) for s in switches(cls) if s != name)])
        what = (f"not of this variant's {', '.join(cls.__name__ for cls in picked)}: drop it" if picked
                else "which this variant does not have: drop it, or add what it is a setting of")
        raise ValueError(f"{flag(name)} is a setting of {ways}, {what}")


def flag_values(entries: Sequence[Tuple[type, Any]], encodings: Sequence[type]) -> Dict[str, Any]:
    """Every flag's value (and the arch-only values) that select the encodings ``entries`` ((class, options) pairs)."""
    values = full({}, declared(encodings))
    for cls, options in entries:
        values.update(cls.to_flags(options))
        if not (cls.selected_by or cls.flags):
            values["arch_encodings"] = (*values["arch_encodings"], cls.name)
    values["no_position"] = not entries
    return values
