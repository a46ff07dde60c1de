"""Export a ``tupe_roberta`` fairseq checkpoint as a Hugging Face ``transformers`` model folder.

    tupe-export-hf CKPT OUT_DIR [--spm-model spm.model] [--dict dict.txt] [--head NAME] [--force]

OUT_DIR gets ``config.json``, ``model.safetensors``, the model code (``configuration_tupe.py``,
``modeling_tupe.py`` and the modules of ``tupe_core`` they import, ``remote.SHIPPED``; loaded with
``trust_remote_code=True``) and, with ``--spm-model``, the tokenizer (``tokenization_tupe.py``, ``spm.model``,
fairseq's ``dict.txt``). ``AutoModel``, ``AutoModelForMaskedLM`` and ``AutoModelForSequenceClassification``
load it; a fine-tuned checkpoint's classification head becomes the latter's head. The positional variant
is read from the checkpoint; every variant exports. See docs/hf_export.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from tupe_common.io import atomic_dir, need
from tupe_core.encoder_stack import ACTIVATIONS
from tupe_core.facts import ATTENTION_FALLBACK_KEY, RECORD_BUFFER, VARIANT_KEY
from tupe_core.registry import encodings, from_record
from tupe_tools.checkpoint_record import data_dirs
from tupe_tools.checkpoint_info import find_dict
from tupe_tools.errors import UsageError

from tupe_common.checkpoint_file import load as load_checkpoint
from tupe_tools.checkpoint_record import info_from_state, model_config, model_setting
from tupe_plugin.models.electra_checkpoint import discriminator_for_export
from .remote import CORE, MODEL_FILES, REMOTE, SHIPPED, exported_source

TOKENIZER_FILES = ("tokenization_tupe.py",)
ENCODER = "encoder.sentence_encoder."
LM_HEAD = "encoder.lm_head."
DROPPED = (ENCODER + "positions." + RECORD_BUFFER, ENCODER + "version",  # recorded in config.json instead
           ATTENTION_FALLBACK_KEY)  # a training run's record of its attention path, not a weight


class ExportError(ValueError):
    """The checkpoint cannot be exported; the message says why and what to do."""


class OutDirNotEmptyError(ExportError, UsageError):
    """OUT_DIR holds files and --force was not given: nothing is written (exit 2)."""


class InputInOutDirError(ExportError, UsageError):
    """CKPT, --dict or --spm-model lies inside OUT_DIR, which the export replaces: nothing is written (exit 2)."""


class HeadChoiceError(ExportError, UsageError):
    """--head names no head of the checkpoint, or is missing where it has several (exit 2)."""


def refuse_inputs_inside(out: Path, inputs: Dict[str, Optional[str]]) -> None:
    """Refuse an input (``inputs``: what it is -> its path) that lies inside ``out`` (by real paths), before
    anything is written: replacing OUT_DIR (--force) would delete it."""
    folder = os.path.realpath(out)
    for what, path in inputs.items():
        if path and os.path.commonpath([folder, os.path.realpath(path)]) == folder:
            raise InputInOutDirError(f"{path}: the {what} is inside OUT_DIR {out}, which the export replaces whole; "
                                     f"choose an OUT_DIR outside the {what}'s folder, e.g. {folder}-hf")


def _label_names(state: Dict[str, Any], n: int) -> Optional[List[str]]:
    for d in data_dirs(state)[:1]:
        path = os.path.join(d, "label", "dict.txt")
        if os.path.isfile(path):
            names = [line.split(" ")[0] for line in open(path, encoding="utf-8") if line.strip()]
            if len(names) >= n:
                return names[:n]  # sentence_prediction's label id = label-dict index - 4 specials
    return None


def build_config(state: Dict[str, Any], path: str, head: Optional[Tuple[str, int]]) -> Dict[str, Any]:
    """config.json values of the checkpoint (head: name and number of labels of the exported head)."""
    info = info_from_state(state, path)
    variant = from_record(state["model"][next(k for k in state["model"] if k.endswith(VARIANT_KEY))])
    get = model_setting(state)
    outside = [cls for cls in encodings(variant) if cls is not None and cls.__module__ not in SHIPPED.values()]
    if outside:  # the folder gets the modules of tupe_core that the model code imports (remote.SHIPPED)
        raise ExportError(f"{path}: its positional encoding {outside[0].__name__} is defined outside tupe_core "
                          f"({outside[0].__module__}); the export ships tupe_core's modules only: move its "
                          "module there and register it in tupe_core/registry.py (docs/extending.md)")
    acts = {k: get(k, d) for k, d in (("activation_fn", "gelu"), ("pooler_activation_fn", "tanh"))}
    for k, v in acts.items():
        if v not in ACTIVATIONS:
            raise ExportError(f"{path}: --{k.replace('_', '-')} {v} is not supported by the exporter "
                              f"({', '.join(ACTIVATIONS)})")
    d = int(info["encoder_embed_dim"])
    config = {
        "model_type": "tupe",
        "vocab_size": int(state["model"][ENCODER + "embed_tokens.weight"].size(0)),
        "hidden_size": d,
        "num_hidden_layers": int(info["encoder_layers"]),
        "num_attention_heads": int(info["encoder_attention_heads"]),
        "intermediate_size": int(info["encoder_ffn_embed_dim"]),
        "hidden_act": acts["activation_fn"],
        "hidden_dropout_prob": float(get("dropout", 0.1)),
        "attention_probs_dropout_prob": float(get("attention_dropout", 0.0)),
        "activation_dropout": float(get("activation_dropout", 0.0)),
        "max_position_embeddings": int(info["max_positions"]),
        **({"vocab_identity": info["vocab_identity"]} if info.get("vocab_identity") else {}),  # tupe_common.vocab
        "layer_norm_eps": 1e-5,  # fairseq's LayerNorm
        "normalize_before": bool(get("encoder_normalize_before", False)),
        "layernorm_embedding": ENCODER + "layernorm_embedding.weight" in state["model"],
        "embed_scale": 1.0 if get("no_scale_embedding", True) else d**0.5,
        "tupe_variant": info["variant"],
        "positional_encodings": variant.entries(),  # the variant record (configuration_tupe.py reads it back)
        "lm_head_act": acts["activation_fn"],
        "classifier_act": acts["pooler_activation_fn"],
        "classifier_dropout": float(get("pooler_dropout", 0.0)),
        "classifier_inner_dim": d,
        "classification_head_style": _head_style(state),
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "auto_map": {
            "AutoConfig": "configuration_tupe.TupeConfig",
            "AutoModel": "modeling_tupe.TupeModel",
            "AutoModelForMaskedLM": "modeling_tupe.TupeForMaskedLM",
            "AutoModelForSequenceClassification": "modeling_tupe.TupeForSequenceClassification",
        },
        "architectures": ["TupeForSequenceClassification" if head else "TupeForMaskedLM"],
    }
    if head:
        head_name, n = head
        config["num_labels"] = n
        config["classifier_inner_dim"] = int(state["model"][f"classification_heads.{head_name}.dense.weight"].size(0))
        if n == 1:
            config["problem_type"] = "regression"
        names = _label_names(state, n) if n > 1 else None
        if names:
            config["id2label"] = {str(i): s for i, s in enumerate(names)}
            config["label2id"] = {s: i for i, s in enumerate(names)}
    return config


def _head_style(state: Dict[str, Any]) -> str:
    """The fairseq model's head style, resolved as the plugin resolves it (modules/classification_head.py)."""
    from tupe_plugin.modules.classification_head import head_style

    return head_style(model_config(state))


def pick_head(model_state: Dict[str, torch.Tensor], path: str, wanted: Optional[str]) -> Optional[Tuple[str, int]]:
    heads = sorted({k.split(".")[1] for k in model_state if k.startswith("classification_heads.")})
    if wanted is not None and wanted not in heads:
        raise HeadChoiceError(f"{path}: no classification head '{wanted}'; the checkpoint has {heads or 'none'}")
    if wanted is None and len(heads) > 1:
        raise HeadChoiceError(f"{path}: several classification heads {heads}; choose one with --head NAME")
    name = wanted or (heads[0] if heads else None)
    return None if name is None else (name, int(model_state[f"classification_heads.{name}.out_proj.weight"].size(0)))


def convert_state(model_state: Dict[str, torch.Tensor], path: str, head: Optional[str]) -> Dict[str, torch.Tensor]:
    """fairseq names -> modeling_tupe names (the same names under ``tupe.``/``lm_head.``/``classifier.``)."""
    out, unknown = {}, []
    for key, value in model_state.items():
        if key in DROPPED:
            continue
        if key.startswith(ENCODER):
            out["tupe." + key[len(ENCODER):]] = value
        elif key == LM_HEAD + "weight":
            tied = model_state[ENCODER + "embed_tokens.weight"]
            if value.shape != tied.shape or not torch.equal(value, tied):
                raise ExportError(f"{path}: the LM head's weight is not tied to embed_tokens; the exporter "
                                  "supports tied LM heads only (fairseq RoBERTa's default)")
        elif key.startswith(LM_HEAD):
            out["lm_head." + key[len(LM_HEAD):]] = value
        elif key.startswith("classification_heads."):
            name, rest = key.split(".", 2)[1:]
            if name == head:
                out["classifier." + rest] = value
        else:
            unknown.append(key)
    if unknown:
        raise ExportError(f"{path}: the exporter does not know these weights: {unknown}")
    return {k: v.detach().to(torch.float32 if v.is_floating_point() else v.dtype).contiguous() for k, v in out.items()}


def write_tokenizer(out: Path, spm_model: str, dict_path: str, vocab_size: int, max_positions: int) -> None:
    from .remote.tokenization_tupe import FAIRSEQ_SPECIALS, read_fairseq_dict

    symbols = FAIRSEQ_SPECIALS + read_fairseq_dict(dict_path)
    n = len(symbols) + ("<mask>" not in symbols)
    if n != vocab_size:
        raise ExportError(f"{dict_path}: gives {n} ids (4 specials + {len(symbols) - 4} symbols + <mask>) but the "
                          f"model has {vocab_size} embeddings; pass the dict.txt the model was trained with (--dict)")
    shutil.copyfile(spm_model, out / "spm.model")
    shutil.copyfile(dict_path, out / "dict.txt")
    for f in TOKENIZER_FILES:
        shutil.copyfile(REMOTE / f, out / f)
    tok_cfg = {
        "tokenizer_class": "TupeTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_tupe.TupeTokenizer", None]},
        "model_max_length": max_positions,
        "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n", encoding="utf-8")


def export(checkpoint: str, out_dir: str, spm_model: Optional[str] = None, dict_path: Optional[str] = None,
           head: Optional[str] = None, force: bool = False) -> Path:
    """Write the model folder (under ``OUT_DIR.partial``, renamed when complete); returns OUT_DIR."""
    from safetensors.torch import save_file

    from tupe_plugin import checkpoint_safety  # noqa: F401  (fairseq checkpoint classes for weights_only loading)

    out = Path(out_dir)
    refuse_inputs_inside(out, {"checkpoint": checkpoint, "--dict file": dict_path, "--spm-model file": spm_model})
    if out.exists() and any(out.iterdir()) and not force:
        raise OutDirNotEmptyError(f"{out} exists and is not empty; choose another OUT_DIR or pass --force to replace it")
    if spm_model:
        need(spm_model)  # missing, or a folder: one line naming it
    state = load_checkpoint(checkpoint)
    if discriminator_for_export(state["model"]):  # ELECTRA: the discriminator is the model (docs/electra.md)
        print(f"{checkpoint}: ELECTRA checkpoint: exporting its discriminator; the generator is not exported "
              "and the MLM head (lm_head) is untrained", file=sys.stderr)
    picked = pick_head(state["model"], checkpoint, head)
    config = build_config(state, checkpoint, picked)
    tensors = convert_state(state["model"], checkpoint, picked[0] if picked else None)
    if spm_model:
        dict_path = dict_path or find_dict(state)
        if dict_path is None:
            raise ExportError(f"{checkpoint}: cannot find the data's dict.txt; pass --dict DATA/dict.txt")
        refuse_inputs_inside(out, {"data dictionary": dict_path})  # found from the checkpoint
        from tupe_common.vocab import check_identity, check_pair, dict_identity

        try:  # a tokenizer of another model would give wrong ids: refused before anything is written
            recorded = config.get("vocab_identity")  # the tokenizer's is the checkpoint's where it recorded one
            config["vocab_identity"] = (check_identity(recorded, dict_path, checkpoint) if recorded
                                        else dict_identity(dict_path))
            check_pair(spm_model, dict_path)
        except ValueError as e:
            raise ExportError(str(e)) from None

    with atomic_dir(out) as tmp_dir:  # replaces an empty OUT_DIR, or a full one with --force
        tmp = Path(tmp_dir)
        for f in MODEL_FILES:  # its `from tupe_core.<name> import` lines made `from .<name> import`
            (tmp / f).write_text(exported_source(f), encoding="utf-8")
        for name in SHIPPED:  # the modules of tupe_core the model code imports, as they are, as siblings
            shutil.copyfile(CORE / f"{name}.py", tmp / f"{name}.py")
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        _check_loadable(config, tensors, checkpoint)
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if spm_model:
            write_tokenizer(tmp, spm_model, dict_path, config["vocab_size"], config["max_position_embeddings"])
    return out


def _check_loadable(config: Dict[str, Any], tensors: Dict[str, torch.Tensor], checkpoint: str) -> None:
    """Every exported weight fits modeling_tupe's model of this config, and nothing is missing."""
    from .remote.configuration_tupe import TupeConfig
    from .remote.modeling_tupe import TupeForMaskedLM, TupeForSequenceClassification

    cfg = TupeConfig(**{k: v for k, v in config.items() if k not in ("model_type", "auto_map", "architectures")})
    cls = TupeForSequenceClassification if any(k.startswith("classifier.") for k in tensors) else TupeForMaskedLM
    with torch.device("meta"):
        model = cls(cfg)
    want = model.state_dict()
    extra = sorted(k for k in tensors if k not in want and not k.startswith("lm_head."))
    missing = sorted(k for k in want if k not in tensors)
    bad = sorted(k for k in tensors if k in want and tensors[k].shape != want[k].shape)
    if extra or missing or bad:
        raise ExportError(f"{checkpoint}: weights do not fit the exported model: unexpected {extra}, "
                          f"missing {missing}, wrong shape {bad}")


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_tools.commands.export_hf_parser``."""
    out = export(args.checkpoint, args.out_dir, args.spm_model, args.dict_path, args.head, args.force)
    print(f"exported to {out}")
    print("load it with:\n"
          "    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer\n"
          f"    model = AutoModelForMaskedLM.from_pretrained({str(out)!r}, trust_remote_code=True)"
          + (f"\n    tokenizer = AutoTokenizer.from_pretrained({str(out)!r}, trust_remote_code=True)" if args.spm_model else ""))
    return 0


if __name__ == "__main__":  # python -m tupe_tools.hf.export: the console script tupe-export-hf
    from tupe_tools.commands import dispatch

    sys.exit(dispatch("tupe-export-hf"))
