"""The model's facts, named once: the sizes of the archs, the state-dict key of the positional variant's record,
ELECTRA's generator sizes and the keys of its state. Read by the fairseq adapter (``tupe_plugin/models``), by
the checkpoint reader and the launchers (``tupe_tools``, ``pretrain.sh``, the study's plan) without fairseq,
and by the export. Plain Python (no torch).
"""
from __future__ import annotations

from dataclasses import dataclass
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
        return [x for name, value in self.args().items() for x in (f"--{name.replace('_', '-')}", str(value))]

    def with_flags(self, flags: Sequence[str]) -> Tuple["ModelSize", List[str]]:
        """This size with the ``--encoder-*`` size flags of ``flags`` (a command line's words) over it, and the
        other flags, in order: ``--encoder-layers 4 --tupe-attention sdpa`` over base -> (4 layers, the rest of
        base), ``['--tupe-attention', 'sdpa']``."""
        values, rest, i = self.args(), [], 0
        while i < len(flags):
            name = flags[i][2:].replace("-", "_") if flags[i].startswith("--") else ""
            if name in values and i + 1 < len(flags) and flags[i + 1].isdigit():
                values[name] = int(flags[i + 1])
                i += 2
            else:
                rest.append(flags[i])
                i += 1
        return ModelSize(*(values[f] for f in SIZE_FIELDS)), rest


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
