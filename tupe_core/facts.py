"""The model's facts, named once: the sizes of the archs, the state-dict key of the positional variant's record,
ELECTRA's generator sizes and the keys of its state. Read by the fairseq adapter (``tupe_plugin/models``), by
the checkpoint reader and the launchers (``tupe_plugin_cli``, ``pretrain.sh``, the study's plan) without fairseq,
and by the export. Plain Python (no torch).
"""
from __future__ import annotations

from typing import Any, Dict

# The positional variant's checkpoint record (record.py: JSON as uint8; before 2026-12 an integer tensor) is a
# buffer of the positions module. Its name "variant" is part of this state-dict key in every checkpoint written so far, so it stays;
# in Python the record is ``model.variant_record`` and the decoded dataclass ``model.positional_variant``.
RECORD_BUFFER = "variant"
VARIANT_KEY = f"encoder.sentence_encoder.positions.{RECORD_BUFFER}"
# A model's state dict holds this key (JSON as uint8) only where --tupe-attention auto switched a configuration of
# our Triton kernel to SDPA in the run that saved it (attend.fallback_record): a resumed run starts so.
ATTENTION_FALLBACK_KEY = "attention_fallback"
# The encoder fields a size sets, in the order the model flags print them, and the sizes of the archs
# ``<variant>_<size>`` (tupe_plugin/models/architectures.py registers them).
SIZE_FIELDS = ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads", "encoder_ffn_embed_dim")


def _size(layers: int, width: int, heads: int, ffn: int) -> Dict[str, int]:
    return dict(zip(SIZE_FIELDS, (layers, width, heads, ffn)))


SIZES: Dict[str, Dict[str, int]] = {
    "base": _size(12, 768, 12, 3072),  # BERT-base (also fairseq's RoBERTa defaults)
    "large": _size(24, 1024, 16, 4096),  # BERT-large
    "tiny": _size(2, 64, 4, 128),  # tests and demos
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
