"""The model's facts, named once: the sizes of the archs, the state-dict key of the positional variant's record,
ELECTRA's generator sizes and the keys of its state. Read by the fairseq adapter (``tupe_plugin/models``), by
the checkpoint reader and the launchers (``tupe_tools``, ``pretrain.sh``, the study's plan) without fairseq,
and by the export. Plain Python (no torch).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

# The positional variant's checkpoint record (record.py: JSON as uint8; before 2026-12 an integer tensor) is a
# buffer of the positions module. Its name "variant" is part of this state-dict key in every checkpoint written so far, so it stays;
# in Python the record is ``model.variant_record`` and the decoded dataclass ``model.positional_variant``.
ROPE_SCALINGS = ("none", "linear", "ntk", "yarn")  # RoPE's --rope-scaling choices (rope.py), torch-free for the study
RECORD_BUFFER = "variant"
VARIANT_KEY = f"encoder.sentence_encoder.positions.{RECORD_BUFFER}"
# A model's state dict holds this key (JSON as uint8) only where --tupe-attention auto switched a configuration of
# our Triton kernel to SDPA in the run that saved it (attend.fallback_record): a resumed run starts so.
ATTENTION_FALLBACK_KEY = "attention_fallback"
# The encoder fields a size sets, in the order the model flags print them, and the sizes of the archs
# ``<variant>_<size>`` (tupe_plugin/models/architectures.py registers them).
SIZE_FIELDS = ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads", "encoder_ffn_embed_dim")


def size_flag(field: str) -> str:
    """fairseq's flag of a size field (``SIZE_FIELDS``): ``encoder_layers`` -> ``--encoder-layers``."""
    return f"--{field.replace('_', '-')}"


@dataclass(frozen=True)
class ModelSize:
    """An encoder's size: what an arch's size sets (``SIZES``) and what fairseq's ``--encoder-*`` flags override."""

    layers: int
    embed_dim: int
    heads: int
    ffn_dim: int

    def args(self) -> Dict[str, int]:
        """fairseq's argument names (``SIZE_FIELDS``) -> values."""
        return dict(zip(SIZE_FIELDS, (self.layers, self.embed_dim, self.heads, self.ffn_dim)))

    def fairseq_args(self) -> List[str]:
        """fairseq's flags that set this size: ``--encoder-layers 12 --encoder-embed-dim 768 ...``."""
        return [x for name, value in self.args().items() for x in (size_flag(name), str(value))]

    def with_flags(self, flags: Sequence[str]) -> Tuple["ModelSize", List[str]]:
        """This size with the ``--encoder-*`` size flags of ``flags`` (a command line's words) over it, and the
        other flags, in order: ``--encoder-layers 4 --tupe-attention sdpa`` over base -> (4 layers, the rest of
        base), ``['--tupe-attention', 'sdpa']``. Read by :meth:`ModelArgs.parse` (a ValueError if malformed)."""
        model_args = ModelArgs.parse(" ".join(flags))
        return model_args.over(self), list(model_args.rest)


@dataclass(frozen=True)
class ModelArgs:
    """The study's ``MODEL_ARGS`` (fairseq flags over the arch's size), parsed once, where the settings are read:
    the size flags of ``SIZE_FIELDS`` with their values, in the order written, and every other flag with its words
    as written (``--tupe-attention sdpa``), passed on to fairseq. ``str()`` is the text as written (what
    ``settings.env`` records; ``none`` is no flags, recorded as the empty text, as before), and the command line is
    :meth:`fairseq_args`. Two are equal when they say the same flags (the text aside)."""

    sizes: Tuple[Tuple[str, int], ...] = ()  # (a name of SIZE_FIELDS, its value), in the order written
    rest: Tuple[str, ...] = ()  # the other flags and their words, in the order written
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> "ModelArgs":
        """``text`` read: a ValueError, saying what is wrong, for a size flag without a whole number >= 1 (or given
        twice), a flag that misses a size flag's name (``--encoder-layer``, ``--encoder_layers``: fairseq-train
        refuses it, after the data is prepared, and the study's sizes would miss it), or a word before any flag or
        after a size flag's value."""
        if text == "none":
            return cls()
        words, names = text.split(), {size_flag(f): f for f in SIZE_FIELDS}
        sizes: Dict[str, int] = {}
        rest: List[str] = []
        i, owner = 0, ""  # owner: the flag (not a size flag) that a word after it belongs to
        while i < len(words):
            flag, eq, value = words[i].partition("=")
            if flag in names:
                if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
                    i += 1
                    value = words[i]
                if not (value.isascii() and value.isdigit() and int(value) >= 1):
                    raise ValueError(f"{flag} takes a positive whole number, not '{value}'" if value
                                     else f"{flag} has no value (a positive whole number)")
                if names[flag] in sizes:
                    raise ValueError(f"{flag} is given twice")
                sizes[names[flag]], owner = int(value), ""
            elif flag.startswith("--"):
                spelt = flag.replace("_", "-")
                near = [n for n in names if n.startswith(spelt)] or difflib.get_close_matches(spelt, names, 1, 0.9)
                if near:
                    raise ValueError(f"{flag} is not fairseq's name of a size: did you mean {near[0]}? (the size "
                                     f"flags: {' '.join(names)})")
                rest.append(words[i])
                owner = flag
            elif not owner:
                raise ValueError(f"'{words[i]}' is not a flag" + (" (a size flag takes one value)" if sizes else ""))
            else:
                rest.append(words[i])
            i += 1
        return cls(tuple(sizes.items()), tuple(rest), text)

    def __str__(self) -> str:
        return self.text

    def over(self, size: ModelSize) -> ModelSize:
        """``size`` (the arch's: ``SIZES[SIZE]``) with these size flags over it."""
        return ModelSize(*{**size.args(), **dict(self.sizes)}.values())  # SIZE_FIELDS' order: args()'s

    def fairseq_args(self) -> List[str]:
        """fairseq's words: the size flags (in the order written), then the other flags as written."""
        return [*(x for name, value in self.sizes for x in (size_flag(name), str(value))), *self.rest]


SIZES: Dict[str, ModelSize] = {
    "base": ModelSize(layers=12, embed_dim=768, heads=12, ffn_dim=3072),  # BERT-base (also fairseq's RoBERTa defaults)
    "large": ModelSize(layers=24, embed_dim=1024, heads=16, ffn_dim=4096),  # BERT-large
    "tiny": ModelSize(layers=2, embed_dim=64, heads=4, ffn_dim=128),  # tests and demos
}
# ELECTRA (tupe_plugin/models/electra.py): the parts of its state a fine-tuned model drops, and its generator's
# sizes.
GENERATOR_KEYS = ("generator.", "discriminator_head.")
GENERATOR_SIZE_ARGS = ("generator_layers", "generator_embed_dim", "generator_ffn_embed_dim",
                       "generator_attention_heads")
# ELECTRA's generator / discriminator width ratio per size of SIZES (paper Sec. 3.2 and Table 6; official
# configure_pretraining.py): 1/3 at base, 1/4 at small and large (tiny: as small).
GENERATOR_DIVISORS: Dict[str, int] = {"base": 3, "large": 4, "tiny": 4}


def generator_divisor(args: Any, divisor: int) -> int:
    """``divisor`` if given (> 0), else ELECTRA's default for the arch's size (``<variant>_<size>``)."""
    if divisor > 0:
        return divisor
    arch = getattr(args, "arch", None) or getattr(args, "_name", None) or ""
    size = arch.rsplit("_", 1)[-1]
    if size not in GENERATOR_DIVISORS:
        raise ValueError(f"--arch {arch}: no default generator size for it; pass --generator-size-divisor N "
                         f"(ELECTRA: 3 at base, 4 at small/large)")
    return GENERATOR_DIVISORS[size]


def generator_sizes(args: Any, divisor: int) -> Dict[str, int]:
    """Same depth; width, FFN and heads divided by ``divisor`` (at least one head)."""
    width, ffn, heads = args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads
    sizes = dict(generator_layers=args.encoder_layers, generator_embed_dim=width // divisor,
                 generator_ffn_embed_dim=ffn // divisor, generator_attention_heads=max(1, heads // divisor))
    if width % divisor or ffn % divisor or sizes["generator_embed_dim"] % sizes["generator_attention_heads"]:
        raise ValueError(
            f"--generator-size-divisor {divisor} does not divide the discriminator (width {width}, FFN {ffn}, "
            f"{heads} heads) into whole generator sizes; pick a divisor of {width} and {ffn}"
        )
    return sizes


def is_electra_state(state_dict: Dict[str, Any], prefix: str = "") -> bool:
    """Whether a state dict holds an ELECTRA model (its generator or replaced-token head)."""
    return any(k.startswith(prefix + p) for k in state_dict for p in GENERATOR_KEYS)
