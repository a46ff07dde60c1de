"""Validation MLM loss at the pre-training length T and at longer lengths (2T, 4T): what happens to a
positional encoding on inputs longer than it was trained on.

The study pre-trains every model with positions for the longest length (``--max-positions 4T``) while its
sequences are T tokens, so each can be run at 4T. The same validation text (the first ``tokens`` tokens of
the ``valid`` split, one stream as fairseq's ``masked_lm`` task reads it) is cut into blocks of L - 1
tokens, each after ``<s>`` (fairseq's ``TokenBlockDataset`` + ``PrependTokenDataset``), for every length L.
The masked tokens are the same at every length: 15% of the stream's positions, drawn once from a fixed
seed, 80% replaced by ``<mask>``, 10% by a random token, 10% kept (fairseq's defaults); only the context
around them changes. Loss: cross-entropy at the masked tokens in bits, as fairseq's ``masked_lm`` logs it.

A variant that keeps a learned parameter per position or per distance has never trained those beyond T:
its loss there measures random initial values, not the encoding. ``untrained_beyond`` says which and why;
such a variant is measured at T only and the report gives the reason instead of a number. An ELECTRA model
is not measured at all (``NOT_FOR_ELECTRA`` says why).
"""
from __future__ import annotations

import math
import os
from typing import List, Optional, Sequence

import numpy as np

from tupe_common.io import write_json

MASK_PROB, RANDOM_PROB, KEEP_PROB = 0.15, 0.1, 0.1
NOT_FOR_ELECTRA = ("ELECTRA: the discriminator (the encoder that is fine-tuned) has no MLM head to score "
                   "masked tokens with; the generator has one, but it is another, 1/N-width network")


def untrained_beyond(variant, trained: int) -> Optional[str]:
    """Why a ``PositionalVariant``'s positions beyond the trained length ``trained`` (T) mean nothing, or None
    when they do (fixed functions of position or distance, buckets that saturate, or no positions at all)."""
    if variant.attention_block == "deberta" and trained <= variant.max_rel_pos:
        # row i - j + k of 2k, clamped: T tokens reach rows k - T + 1 .. k + T - 1, so row 0 (every key k or more
        # to the right of its query) is trained only when T > k; beyond that the clamp saturates, as T5's buckets
        return (f"relative embeddings clipped at k = {variant.max_rel_pos} (--max-rel-pos): at T = {trained} <= k the "
                "row of the keys k or more to the right of their query was never trained")
    if variant.input_pe:
        return "learned absolute position embeddings: the rows past T were never trained"
    if variant.untied_pos:
        return "learned absolute positions (the untied positional term): the rows past T were never trained"
    if variant.distance_prior == "learned_gaussian":
        return "a learned weight per distance |j-i|: the distances of T and more were never trained"
    if variant.attention_block in ("pam_concat", "pam_sequential"):
        return "learned position-only weights per distance |j-i|: the distances of T and more were never trained"
    return None


def block_masks(n: int, seed: int, vocab: int, first_real: int):
    """(is_masked, replacement) for a stream of n tokens: which positions are masked and what they become
    (-1: <mask>, -2: kept, else a random token id in [first_real, vocab))."""
    rng = np.random.default_rng(seed)
    masked = rng.random(n) < MASK_PROB
    u = rng.random(n)
    repl = np.where(u < 1 - RANDOM_PROB - KEEP_PROB, -1, np.where(u < 1 - KEEP_PROB, -3, -2))
    random_ids = rng.integers(first_real, vocab, size=n)
    repl = np.where(repl == -3, random_ids, repl)
    return masked, repl


def mlm_loss_bits(model, dictionary, stream: np.ndarray, length: int, masked: np.ndarray, repl: np.ndarray,
                  tokens_per_batch: int = 8192) -> float:
    """Mean cross-entropy in bits at the masked positions of ``stream`` cut into blocks of ``length``."""
    import torch
    import torch.nn.functional as F
    from fairseq.data.data_utils import collate_tokens

    device = next(model.parameters()).device
    size = length - 1
    blocks = [(s, min(s + size, len(stream))) for s in range(0, len(stream), size)]
    per_batch = max(1, tokens_per_batch // length)
    total, count = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(blocks), per_batch):
            inputs, targets, where = [], [], []
            for s, e in blocks[b:b + per_batch]:
                tok = stream[s:e].copy()
                m, r = masked[s:e], repl[s:e]
                tok[m & (r == -1)] = dictionary.index("<mask>")
                rnd = m & (r >= 0)
                tok[rnd] = r[rnd]
                inputs.append(torch.tensor(np.concatenate([[dictionary.bos()], tok]), dtype=torch.long))
                targets.append(torch.tensor(stream[s:e][m], dtype=torch.long))
                where.append(torch.tensor(np.concatenate([[False], m])))
            src = collate_tokens(inputs, pad_idx=dictionary.pad()).to(device)
            mask = collate_tokens(where, pad_idx=False).to(device).bool()
            logits = model(src, masked_tokens=mask)[0]
            target = torch.cat(targets).to(device)
            total += float(F.cross_entropy(logits.float(), target, reduction="sum"))
            count += int(target.numel())
    return total / max(count, 1) / math.log(2)


def read_stream(shard: str, dictionary, tokens: int) -> np.ndarray:
    """The first ``tokens`` tokens of the shard's ``valid`` split, sentences (each ending in </s>) joined."""
    from fairseq.data import data_utils

    data = data_utils.load_indexed_dataset(os.path.join(shard, "valid"), dictionary)
    if data is None:
        raise FileNotFoundError(f"{shard}/valid.idx: no validation split")
    out: List[np.ndarray] = []
    have = 0
    for i in range(len(data)):
        out.append(data[i].numpy())
        have += len(out[-1])
        if have >= tokens:
            break
    return np.concatenate(out)[:tokens].astype(np.int64)


def measure(checkpoint: str, shard: str, lengths: Sequence[int], tokens: int, out: str, seed: int = 1) -> dict:
    """Write (and return) {"variant", "positions", "lengths": {L: bits or None}, "tokens", "masked",
    "not_beyond": reason or None} for a pre-trained checkpoint; ``lengths[0]`` is the trained length T."""
    import torch

    from tupe_plugin.analysis.attention_maps import load_hub

    hub = load_hub(checkpoint, shard)
    model = hub.model.cuda() if torch.cuda.is_available() else hub.model
    d = hub.task.source_dictionary
    positions = int(model.max_positions())
    variant = model.positional_variant
    reason = untrained_beyond(variant, lengths[0])
    stream = read_stream(shard, d, tokens)
    masked, repl = block_masks(len(stream), seed, len(d), d.nspecial)
    result = {}
    for i, length in enumerate(lengths):
        if i > 0 and reason is not None:
            result[str(length)] = None
        elif length > positions:
            result[str(length)] = None
            reason = reason or (f"pre-trained with {positions} positions, fewer than {length} (a study from before "
                                "the longer-inputs stage: rerun its pre-training with LENGTH_FACTORS set)")
        else:
            result[str(length)] = mlm_loss_bits(model, d, stream, length, masked, repl)
    record = {"variant": variant.name, "positions": positions, "lengths": result, "tokens": int(len(stream)),
              "masked": int(masked.sum()), "not_beyond": reason}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_json(out, record)
    return record
