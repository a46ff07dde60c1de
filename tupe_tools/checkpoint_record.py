"""What a ``tupe_roberta`` checkpoint records, read without fairseq: its arch, positional variant, sizes and
objective (``tupe-checkpoint-info``'s JSON, the model flags that rebuild it).

``tupe-checkpoint-info`` and the GLUE scripts (``tupe_glue/finetune_helper.py``, before fairseq-train starts in a
process of its own) read these facts here for a torch import (~3 s), not torch and fairseq (~7.5 s): the record
and the state-dict keys come from ``tupe_core`` (``record.py``, ``facts.py``), as in the model.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional

from tupe_core.facts import GENERATOR_SIZE_ARGS, SIZE_FIELDS, VARIANT_KEY, is_electra_state, size_flag
from tupe_core.record import PositionalVariant  # noqa: F401  (the one record class: tests compare)
from tupe_core.registry import flags_of, from_record

from tupe_common.checkpoint_file import CheckpointError, load


def objective_info(model_state: Dict[str, Any], get) -> Dict[str, Any]:
    """``tupe-checkpoint-info``'s objective entries: ``mlm``, or ``electra`` with the generator's sizes
    (``get`` reads the checkpoint's model config; sizes missing there are read from the weights)."""
    if not is_electra_state(model_state):
        return {"objective": "mlm"}
    shapes = {
        "generator_layers": len({k.split(".")[3] for k in model_state if k.startswith("generator.sentence_encoder.layers.")}),
        "generator_embed_dim": model_state["generator.lm_head.dense.weight"].size(1),
        "generator_ffn_embed_dim": model_state["generator.sentence_encoder.layers.0.fc1.weight"].size(0),
        "generator_attention_heads": None,
    }
    return {"objective": "electra", **{k: get(k) if get(k) is not None else shapes[k] for k in GENERATOR_SIZE_ARGS}}


def data_dirs(state: Dict[str, Any]) -> List[str]:
    """The data folders the checkpoint was trained on (its ``--data``, colon-separated shards)."""
    cfg = state.get("cfg") or {}
    task = cfg.get("task") if hasattr(cfg, "get") else None
    data = (task.get("data") if hasattr(task, "get") else getattr(task, "data", None)) if task is not None else None
    if data is None and "args" in state:
        data = getattr(state["args"], "data", None)
    return [d for d in str(data or "").split(os.pathsep) if d]




def checkpoint_info(path: str, objective: Optional[str] = None, head: bool = False) -> Dict[str, Any]:
    """What the checkpoint ``path`` is, after the checks of :func:`tupe_common.checkpoint_file.load`; refused,
    naming the file, when it is not a tupe_roberta checkpoint, not of ``objective`` ("mlm", "electra"), or
    (``head``) has no classification head, i.e. it is not fine-tuned. Tensors are not read (mmap)."""
    state = load(path, mmap=True)
    info = info_from_state(state, path)
    if objective is not None and info["objective"] != objective:
        why = {"mlm": "its discriminator has no trained MLM head; pass a checkpoint pre-trained with OBJECTIVE=mlm",
               "electra": "pass a checkpoint pre-trained with OBJECTIVE=electra"}[objective]
        raise CheckpointError(f"{path}: an {info['objective'].upper()} checkpoint where an {objective.upper()} one "
                              f"is needed: {why}")
    if head and not any(".classification_heads." in k or k.startswith("classification_heads.") for k in state["model"]):
        raise CheckpointError(f"{path}: a pre-trained checkpoint, with no classification head; pass a fine-tuned one "
                              "(glue/finetune.sh with KEEP_CHECKPOINTS=1 keeps its checkpoint_best.pt)")
    return info


def model_config(state: Dict[str, Any]) -> Any:
    """The model settings of a loaded checkpoint: ``cfg.model`` (fairseq >= 0.10, fairseq-hydra-train), else the
    older ``args`` namespace; None if it has neither."""
    cfg = state.get("cfg") or {}
    model_cfg = cfg.get("model") if hasattr(cfg, "get") else None
    return state.get("args") if model_cfg is None else model_cfg


def model_setting(state: Dict[str, Any]) -> Callable[..., Any]:
    """``get(name, default=None)``: one setting of ``model_config(state)``, ``default`` where it is absent or None."""
    model_cfg = model_config(state)

    def get(name: str, default: Any = None) -> Any:
        value = model_cfg.get(name) if hasattr(model_cfg, "get") else getattr(model_cfg, name, None)
        return default if value is None else value

    return get


def info_from_state(state: Dict[str, Any], path: str) -> Dict[str, Any]:
    """``checkpoint_info`` of an already loaded checkpoint dict (``path`` names it in errors)."""
    model_state = state.get("model", {})
    key = next((k for k in model_state if k.endswith(VARIANT_KEY) or k == VARIANT_KEY), None)
    if key is None:
        raise CheckpointError(
            f"{path}: no '{VARIANT_KEY}' in the model state: not a tupe_roberta checkpoint "
            "(for the original TUPE release, run tupe-convert-original first)"
        )
    get = model_setting(state)
    variant = from_record(model_state[key])
    return {
        "arch": get("arch") or get("_name"),
        "variant": variant.name,
        "variant_flags": flags_of(variant),
        "max_positions": get("max_positions"),
        **{field: get(field) for field in SIZE_FIELDS},
        **objective_info(model_state, get),  # mlm, or electra and its generator's sizes
        "vocab_identity": get("vocab_identity"),  # its dictionary's (tupe_common.vocab.identity); None before 2026-12
        # the layer settings the archs leave to their defaults (gelu, Post-LN, a layernorm on the embeddings)
        "activation_fn": get("activation_fn", "gelu"),
        "encoder_normalize_before": bool(get("encoder_normalize_before", False)),
        "layernorm_embedding": bool(get("layernorm_embedding", True)),
    }


def fairseq_args(info: Dict[str, Any]) -> str:
    """The flags that rebuild the model: arch, positions, sizes (a run may have resized its arch), variant, and the
    layer settings where they are not the archs' defaults (an activation other than gelu, Pre-LN, no layernorm
    on the embeddings: a converted original may have any of them)."""
    sizes = " ".join(f"{size_flag(k)} {info[k]}" for k in SIZE_FIELDS if info.get(k) is not None)
    layers = [f"--activation-fn {info['activation_fn']}" if info.get("activation_fn", "gelu") != "gelu" else "",
              "--encoder-normalize-before" if info.get("encoder_normalize_before") else "",
              "" if info.get("layernorm_embedding", True) else "--no-layernorm-embedding"]
    return " ".join([f"--arch {info['arch']} --max-positions {info['max_positions']} {sizes} {info['variant_flags']}",
                     *filter(None, layers)])

