"""FROZEN: how a variant record written before the encodings owned their options decodes. Never edit this file.

Until 2026-12 a checkpoint recorded its positional variant as one long-integer tensor, the values of the 14 fields of
the old ``PositionalVariant`` in the order below (a string field as the index of its value in the field's choices;
fields were appended, so older records are shorter), and an exported Hugging Face ``config.json`` held one key per
field. Both decode here, through this one table, to the (encoding name, options) entries of today's record
(``record.py``); the registry turns those into the variant. New encodings and options never appear here: they exist
only in JSON records.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .record import UPGRADE, NewerRecordError

# (field, default, choices) of the old record, in record order
FIELDS: Tuple[Tuple[str, Any, Tuple[str, ...]], ...] = (
    ("input_pe", False, ()),
    ("untied_pos", False, ()),
    ("untie_cls", False, ()),
    ("rel_pos", False, ()),
    ("pos_mixed_terms", False, ()),
    ("rel_pos_bins", 32, ()),
    ("max_rel_pos", 128, ()),
    ("distance_prior", "none", ("none", "gaussian", "learned_gaussian")),
    ("sinusoidal_pe", False, ()),
    ("alibi", False, ()),
    ("attention_block", "standard", ("standard", "rope", "deberta", "pam_concat", "pam_sequential", "pam_window")),
    ("no_position", False, ()),
    ("sinusoidal_scaled", True, ()),
    ("encoding_id", 0, ()),
)
def encoding_id(variant_name: str) -> int:
    """The old record number of the encoding of a variant registered without flags: a checksum of the variant's
    name (the old registry's rule)."""
    return zlib.crc32(variant_name.encode("utf-8")) & 0x7FFFFFFF or 1


# the old record numbers of the built-in encodings without flags -> their encodings' names
ENCODING_IDS: Dict[int, str] = {encoding_id("kerple"): "kerple"}
# the old fields of every variant registered when this table was frozen, those away from their defaults (an old
# HF config without a field takes its variant's value)
VARIANT_FIELDS: Dict[str, Dict[str, Any]] = {
    "bert_a": {"input_pe": True},
    "bert_r": {"input_pe": True, "rel_pos": True},
    "tupe_a": {"untied_pos": True, "untie_cls": True},
    "tupe_r": {"untied_pos": True, "untie_cls": True, "rel_pos": True},
    "tupe_a_tie_cls": {"untied_pos": True},
    "bert_ad": {"untied_pos": True, "pos_mixed_terms": True},
    "gaussian_prior": {"distance_prior": "gaussian"},
    "learned_gaussian": {"distance_prior": "learned_gaussian"},
    "sinusoidal": {"sinusoidal_pe": True},
    "nope": {"no_position": True},
    "t5_rel": {"rel_pos": True},
    "alibi": {"alibi": True},
    "rope": {"attention_block": "rope"},
    "deberta_rel": {"attention_block": "deberta"},
    "pam_concat": {"attention_block": "pam_concat"},
    "pam_sequential": {"attention_block": "pam_sequential"},
    "pam_window": {"attention_block": "pam_window"},
    "kerple": {"encoding_id": 1668552508},
}
NAMES = tuple(name for name, _, _ in FIELDS)


def _legacy(name: str, values: Mapping[str, Any]) -> Any:
    """The value of a field a record written before it existed decodes to."""
    if name == "sinusoidal_scaled":  # records before it hold an unscaled sinusoidal table
        return not values.get("sinusoidal_pe", False)
    return dict((n, d) for n, d, _ in FIELDS)[name]


def fields_from_tensor(record) -> Dict[str, Any]:
    """The old field values of an integer record (any length written so far); a longer one, or a choice beyond the
    table, is refused (``NewerRecordError``)."""
    values_in = [int(x) for x in record.tolist()]
    if len(values_in) > len(FIELDS):
        raise NewerRecordError(
            f"the checkpoint's positional-variant record has {len(values_in)} fields but this tupe_plugin "
            f"knows {len(FIELDS)}: it was written by a newer tupe_plugin, with settings this one cannot "
            f"read; {UPGRADE}")
    values: Dict[str, Any] = {}
    for (name, default, choices), x in zip(FIELDS, values_in):
        if choices and not 0 <= x < len(choices):
            raise NewerRecordError(
                f"the checkpoint's positional variant has --{name.replace('_', '-')} choice #{x}, but this "
                f"tupe_plugin knows only {choices}: it was written by a newer tupe_plugin; {UPGRADE}")
        values[name] = choices[x] if choices else (bool(x) if isinstance(default, bool) else x)
    for name, _, _ in FIELDS[len(values_in):]:
        values[name] = _legacy(name, values)
    return values


def fields_from_config(config: Mapping[str, Any], variant_name: Optional[str]) -> Dict[str, Any]:
    """The old field values of an old HF config (one key per field): a key it lacks takes the legacy value, else the
    value of the variant it names (``tupe_variant``), else the default."""
    base = VARIANT_FIELDS.get(variant_name or "", {})
    values: Dict[str, Any] = {}
    for name, default, _ in FIELDS:
        absent = _legacy(name, values) if name == "sinusoidal_scaled" else base.get(name, default)
        values[name] = config.get(name, absent)
    return values


def entries(values: Mapping[str, Any], encoding_ids: Mapping[int, str] = ENCODING_IDS
            ) -> List[Tuple[str, Dict[str, Any]]]:
    """The (encoding name, options) entries of the old field values, input encoding first; () for NoPE. The fields
    an encoding did not read are dropped. A combination the old validate refused decodes as it reads (the registry
    refuses it). ``encoding_ids``: old record number -> encoding name (the registry adds those of the variants a
    plugin registered without flags)."""
    v = dict(values)
    out: List[Tuple[str, Dict[str, Any]]] = []
    buckets = {"untie_cls": v["untie_cls"], "rel_pos_bins": v["rel_pos_bins"], "max_rel_pos": v["max_rel_pos"]}
    if v["input_pe"]:
        out.append(("learned_absolute", {}))
    if v["sinusoidal_pe"]:
        out.append(("sinusoidal", {"sinusoidal_scaled": v["sinusoidal_scaled"]}))
    if v["untied_pos"] and v["pos_mixed_terms"]:
        out.append(("bert_ad", {}))
    elif v["untied_pos"]:
        out.append(("tupe", {"rel_pos": v["rel_pos"], **buckets}))
    elif v["rel_pos"]:
        out.append(("t5_relative", buckets))
    if v["distance_prior"] != "none":
        out.append((v["distance_prior"] if v["distance_prior"] == "learned_gaussian" else "gaussian_prior", {}))
    if v["alibi"]:
        out.append(("alibi", {}))
    block = v["attention_block"]
    if block == "rope":
        out.append(("rope", {}))
    elif block == "deberta":
        out.append(("deberta", {"max_rel_pos": v["max_rel_pos"]}))
    elif block.startswith("pam_"):
        out.append(("pam", {"mode": block[len("pam_"):]}))
    if v["encoding_id"]:
        name = encoding_ids.get(v["encoding_id"])
        if name is None:
            raise NewerRecordError(
                f"the checkpoint's positional encoding #{v['encoding_id']} is not registered in this process: import "
                "the plugin that registers it (--user-dir), as when it was trained")
        out.append((name, {}))
    inputs = [e for e in out if e[0] in ("learned_absolute", "sinusoidal")]
    return inputs + [e for e in out if e not in inputs]
