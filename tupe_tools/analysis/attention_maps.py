"""Real attention maps of a ``tupe_roberta`` model over text, per layer and head."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import torch

from tupe_tools.checkpoint_record import checkpoint_info
from tupe_plugin.models.tupe_roberta import TupeRobertaModel


def load_hub(checkpoint: str, data_dir: str = "", spm_model: str = "", objective: Optional[str] = None,
             head: bool = False):
    """The fairseq hub interface (eval mode) of ``checkpoint``; ``data_dir`` holds dict.txt. The checkpoint is
    checked first (``checkpoint_info``: a tupe_roberta checkpoint, of ``objective``, fine-tuned if ``head``),
    then that the dict.txt is the checkpoint's (the identity it recorded) and that ``spm_model`` and the dict.txt
    belong together (``tupe_common.vocab``: a ValueError naming both, where the model would read wrong ids)."""
    from tupe_common.vocab import check_identity, check_pair, data_dict

    info = checkpoint_info(checkpoint, objective=objective, head=head)
    ckpt_dir, ckpt_file = os.path.split(os.path.abspath(checkpoint))
    if info.get("vocab_identity"):
        check_identity(info["vocab_identity"], data_dict(data_dir or ckpt_dir), checkpoint)
    if spm_model:
        check_pair(spm_model, data_dict(data_dir or ckpt_dir))
    kwargs = {"sentencepiece_model": spm_model} if spm_model else {"bpe": None}
    return TupeRobertaModel.from_pretrained(
        ckpt_dir, checkpoint_file=ckpt_file, data_name_or_path=os.path.abspath(data_dir or ckpt_dir), **kwargs
    ).eval()


def encode_sentence(hub, sentence: str) -> Tuple[torch.Tensor, bool]:
    """``<s> pieces </s>`` of ``sentence`` and whether it was cut. A sentence longer than the model's positions loses
    pieces from the right, never its ``</s>``: every pre-training block ends with one (``complete`` blocks are whole
    lines, each binarized with its ``</s>``), and the L&S code (pytorchic-bert) also cuts the text, not [SEP]."""
    tokens = hub.encode(sentence)  # (T,): <s> pieces </s>
    limit = hub.model.max_positions()
    if len(tokens) <= limit:
        return tokens, False
    return torch.cat([tokens[: limit - 1], tokens[-1:]]), True


@torch.no_grad()
def attention_probs(model, tokens: torch.Tensor) -> torch.Tensor:
    """(L, H, T, T) attention probabilities of every layer for one unpadded sequence ``tokens`` (T,)."""
    layers = model.encoder.sentence_encoder.layers
    captured: List[torch.Tensor] = []
    hooks, paths = [], []
    for layer in layers:
        attn = layer.self_attn
        paths.append(attn.attention_path)
        attn.attention_path = "explicit"  # the plain path returns the probabilities
        hooks.append(attn.register_forward_hook(lambda m, i, out: captured.append(out[1][0])))
    try:
        model(tokens.unsqueeze(0), features_only=True)
    finally:
        for layer, path, hook in zip(layers, paths, hooks):
            layer.self_attn.attention_path = path
            hook.remove()
    return torch.stack(captured).float()
