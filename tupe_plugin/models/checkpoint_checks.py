"""Checks of a checkpoint against the model it is loaded into, with messages that say what to do.

Called from ``TupeRobertaModel.upgrade_state_dict_named``, i.e. before torch compares shapes: without
them a checkpoint binarized with another dictionary fails deep inside fairseq (a size mismatch of
``embed_tokens`` or an assertion about ``<mask>``) instead of naming the two dictionaries.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from fairseq.utils import safe_getattr

EMBED_KEY = "encoder.sentence_encoder.embed_tokens.weight"


class DictionaryMismatchError(ValueError):
    """The checkpoint's vocabulary and the task's dictionary differ in size."""


def checkpoint_path(args: Any) -> Optional[str]:
    """The checkpoint ``fairseq-train`` restores (``--finetune-from-model``, else ``--restore-file``
    resolved as fairseq does against ``--save-dir``), or None where the args do not say."""
    path = safe_getattr(args, "finetune_from_model") or safe_getattr(args, "restore_file")
    if not path:
        return None
    if path == "checkpoint_last.pt" and safe_getattr(args, "save_dir"):
        path = os.path.join(args.save_dir, path)  # fairseq's default: the run's own last checkpoint
    return path


def dictionary_path(args: Any) -> Optional[str]:
    """The dict.txt the task read: ``DATA/input0/dict.txt`` for sentence_prediction, else ``DATA/dict.txt``
    (the first of ``shard0:shard1:...``)."""
    data = safe_getattr(args, "data")
    if not data:
        return None
    first = str(data).split(os.pathsep)[0]
    sub = "input0" if safe_getattr(args, "task") == "sentence_prediction" else ""
    return os.path.join(first, sub, "dict.txt")


def check_dictionary(state_dict: Dict[str, Any], name: str, dictionary_size: int, args: Any) -> None:
    """Refuse a checkpoint whose embedding has another number of rows than the task's dictionary."""
    key = (name + "." if name else "") + EMBED_KEY
    embed = state_dict.get(key)
    if embed is None or embed.size(0) == dictionary_size:
        return
    ckpt, dict_txt = checkpoint_path(args), dictionary_path(args)
    ckpt_text = f"the checkpoint {ckpt}" if ckpt else "the checkpoint"
    dict_text = f"the task's dictionary {dict_txt}" if dict_txt else "the task's dictionary"
    raise DictionaryMismatchError(
        f"{ckpt_text} has a vocabulary of {embed.size(0)} ids but {dict_text} gives {dictionary_size} "
        "(both counting the 4 specials and <mask>): the data was binarized with another dict.txt. "
        "Binarize it with the checkpoint's dictionary (fairseq-preprocess --srcdict CHECKPOINT_DIR/dict.txt, "
        "or tupe_preprocess.glue_binarize --dict ...)"
    )
