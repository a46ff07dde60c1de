"""ELECTRA checkpoints read as their discriminator: the state-dict surgery, without the ELECTRA model.

``tupe_roberta`` loading an ELECTRA state (fine-tuning, the hub interface), ``tupe-checkpoint-info`` and
``tupe-export-hf`` need only this, so it imports neither ``tupe_roberta`` nor ``electra`` (which builds on
``tupe_roberta``): the two model modules do not import each other. The keys: the discriminator is
``encoder.*`` (an MLM ``tupe_roberta``'s keys without ``encoder.lm_head``), the generator ``generator.*``,
the replaced-token head ``discriminator_head.*`` (models/electra.py).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import torch
from fairseq.models.roberta.model import RobertaLMHead
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from torch import nn

from tupe_core.facts import GENERATOR_KEYS, is_electra_state

logger = logging.getLogger(__name__)


def keep_discriminator(state_dict: Dict[str, Any], name: str = "", lm_head: Optional[nn.Module] = None) -> bool:
    """In place: an ELECTRA state dict becomes its discriminator's ``tupe_roberta`` state. The generator
    and the replaced-token head are dropped (logged); with ``lm_head`` (the loading model's MLM head),
    the MLM head the discriminator never had is filled with its current values, its output weight tied to
    the checkpoint's token embeddings. Returns False (and changes nothing) for any other state."""
    prefix = name + "." if name else ""
    if not is_electra_state(state_dict, prefix):
        return False
    dropped = [k for k in state_dict if any(k.startswith(prefix + p) for p in GENERATOR_KEYS)]
    for k in dropped:
        del state_dict[k]
    logger.info(f"ELECTRA checkpoint: keeping the discriminator; dropped the generator and the replaced-token "
                f"head ({len(dropped)} tensors)")
    if lm_head is not None and not any(k.startswith(prefix + "encoder.lm_head.") for k in state_dict):
        for k, v in lm_head.state_dict().items():
            state_dict[prefix + "encoder.lm_head." + k] = v
        state_dict[prefix + "encoder.lm_head.weight"] = state_dict[prefix + "encoder.sentence_encoder.embed_tokens.weight"]
        logger.info("ELECTRA checkpoint: the discriminator has no MLM head; encoder.lm_head keeps its initial values")
    return True


def discriminator_for_export(state_dict: Dict[str, Any]) -> bool:
    """:func:`keep_discriminator` for a model folder (tupe-export-hf): the MLM head the discriminator
    never had gets fairseq's initial values (seeded, so an export is reproducible), tied to the token
    embeddings. Returns whether the state was an ELECTRA one."""
    embed = state_dict.get("encoder.sentence_encoder.embed_tokens.weight")
    if embed is None or not is_electra_state(state_dict):
        return False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        head = RobertaLMHead(embed.size(1), embed.size(0), "gelu", embed)
        init_bert_params(head.dense)
    return keep_discriminator(state_dict, "", head)
