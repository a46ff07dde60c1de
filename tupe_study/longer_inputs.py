"""Validation MLM loss at the pre-training length T and at longer lengths (2T, 4T): what happens to a
positional encoding on inputs longer than it was trained on.

The study pre-trains every model with positions for the longest length (``--max-positions 4T``) while its
sequences are T tokens, so each can be run at 4T.

At T the stage reruns pre-training's own validation of the checkpoint: the ``masked_lm`` task its ``cfg.task``
records (data, ``--sample-break-mode``, ``--tokens-per-sample``, mask probabilities, seed) loads the ``valid``
split as fairseq's train loop does (``TokenBlockDataset`` blocks of whole sentences, each after ``<s>``;
``MaskTokensDataset`` at epoch 1), in the same batches (``--batch-size-valid``, the first ``--max-valid-steps``
+ 1 per process), scored as fairseq's ``masked_lm`` criterion scores them. So the loss at T is the validation
loss fairseq logged for the checkpoint (``extra_state["val_loss"]``; recorded next to it).

At 2T and 4T the same task with ``--tokens-per-sample`` 2T / 4T packs the same sentences into its own blocks
(the same ``TokenBlockDataset``, the same break mode), and every token reads as it did at T: masked, replaced
or kept as pre-training's validation drew it. The targets are the same tokens at every length, so only the
context around them changes. One kind of target has no counterpart in a longer block: a masked ``<s>`` (the
first position of a T block; the task masks the ``<s>`` too). Its loss at T is kept at every length, so every
length averages the same targets. Loss: cross-entropy at the targets in bits, as fairseq's ``masked_lm`` logs it.

A variant that keeps a learned parameter per position or per distance has never trained those beyond T:
its loss there measures random initial values, not the encoding. ``untrained_beyond`` says which and why;
such a variant is measured at T only and the report gives the reason instead of a number. An ELECTRA model
is not measured at all (``NOT_FOR_ELECTRA`` says why).

A RoPE model can be measured with a RoPE scaling (``rope_scaling``: linear, ntk or yarn; tupe_core/rope.py), set at
evaluation only: at each length L beyond T the rotation is rescaled by ``s = L / T`` (YaRN's ramp reading T), at T it
is the trained one. The record says which (``rope_scaling``); the model's parameters and record are untouched. The
study's longer stage measures every RoPE model so once per scaling of ``ROPE_SCALINGS`` (``scaled_json``: its record
beside the plain one; the report's rows ``rope+linear``, ...).
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tupe_common.io import write_json
from tupe_core.facts import ROPE_SCALINGS

NOT_FOR_ELECTRA = ("ELECTRA: the discriminator (the encoder that is fine-tuned) has no MLM head to score "
                   "masked tokens with; the generator has one, but it is another, 1/N-width network")
ROPE_SCALED = tuple(s for s in ROPE_SCALINGS if s != "none")  # what the longer stage measures beside plain RoPE
TASK_FIELDS = ("tokens_per_sample", "sample_break_mode", "mask_prob", "leave_unmasked_prob", "random_token_prob",
               "mask_whole_words", "mask_multiple_length", "seed")  # recorded in the JSON, read from cfg.task


def untrained_beyond(variant, trained: int) -> Optional[str]:
    """Why a ``PositionalVariant``'s positions beyond the trained length ``trained`` (T) mean nothing, or None
    when they do: what its encodings declare (``PositionalEncoding.untrained_beyond``)."""
    from tupe_core.registry import untrained_beyond as declared

    return declared(variant, trained)


def rescalable(variant) -> bool:
    """Whether a ``PositionalVariant`` is RoPE as trained without a scaling: what the longer stage also measures with
    each of ``ROPE_SCALED``."""
    options = variant.options("rope")
    return options is not None and options.rope_scaling == "none"


def scaled_json(out: str, rope_scaling: str) -> str:
    """The record of the model of ``out`` (a plain record, ``.../seedS.json``) measured with ``rope_scaling``:
    ``.../seedS.rope-linear.json`` beside it."""
    return (out[:-len(".json")] if out.endswith(".json") else out) + f".rope-{rope_scaling}.json"


def rescale_rope(model, rope_scaling: str, length: int, trained: int) -> None:
    """Set ``model``'s RoPE scaling for inputs of ``length`` tokens, trained at ``trained`` (T): ``rope_scaling`` with
    the factor ``length / T``; at T (or with ``none``) the rotation stays as the model was trained."""
    from dataclasses import replace

    from tupe_core.rope import SCALINGS, Rope

    if rope_scaling not in SCALINGS:
        raise ValueError(f"rope_scaling must be one of {SCALINGS}, got {rope_scaling!r}")
    positions = model.encoder.sentence_encoder.positions
    if not isinstance(positions, Rope):
        raise ValueError(f"rope_scaling {rope_scaling!r} applies to a RoPE model; this one is "
                         f"{model.positional_variant.name}")
    if rope_scaling != "none" and length > trained:
        positions.rescale(replace(positions.options, rope_scaling=rope_scaling, rope_scaling_factor=length / trained,
                                  rope_scaling_length=trained if rope_scaling == "yarn" else 0))


def masked_lm_task(cfg, dictionary, tokens_per_sample: int):
    """The checkpoint's own ``masked_lm`` task (``cfg`` is its whole config) with blocks of ``tokens_per_sample``."""
    from fairseq.tasks.masked_lm import MaskedLMTask
    from omegaconf import OmegaConf

    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    if task_cfg.get("_name") != "masked_lm":
        raise ValueError(f"the checkpoint was pre-trained with --task {task_cfg.get('_name')}, not masked_lm")
    task_cfg["tokens_per_sample"] = tokens_per_sample
    return MaskedLMTask(OmegaConf.create(task_cfg), dictionary)


def block_slices(task) -> np.ndarray:
    """(blocks, 2): where each block of the task's ``valid`` split starts and ends in the split's tokens (its
    sentences joined in order), from the task's own ``TokenBlockDataset``."""
    # fairseq 0.12.3 tasks/masked_lm.py: the split as PrependTokenDataset(TokenBlockDataset(...)), before masking
    blocks = task._load_dataset_split("valid", epoch=1, combine=False)
    return np.array(blocks.dataset.slice_indices, dtype=np.int64)  # a copy, kept after the dataset is gone


@dataclass
class Validation:
    """Pre-training's validation at T laid out on the ``valid`` split's n tokens (its sentences joined)."""
    batches: List[dict]  # fairseq's own batches, in its order
    inputs: np.ndarray  # (n,) each token as the model read it at T: <mask>, a random token or itself
    targets: np.ndarray  # (n,) the token where the validation scored it, else pad
    bos_targets: int  # the scored <s> (a T block's first position): no counterpart in a longer block
    text_tokens: int  # the tokens of the scored blocks, without their <s>


def pretraining_validation(cfg, task, max_positions: int) -> Validation:
    """Pre-training's validation as fairseq's train loop builds it: trainer.get_valid_iterator's arguments,
    fairseq_cli/train.py validate()'s loop (fairseq 0.12.3)."""
    from fairseq import utils

    task.load_dataset("valid", combine=False, epoch=1)
    data, ds = task.dataset("valid"), cfg.dataset
    itr = task.get_batch_iterator(
        dataset=data, max_tokens=ds.max_tokens_valid, max_sentences=ds.batch_size_valid,
        max_positions=utils.resolve_max_positions(task.max_positions(), max_positions),
        ignore_invalid_inputs=ds.skip_invalid_size_inputs_valid_test,
        required_batch_size_multiple=ds.required_batch_size_multiple, seed=cfg.common.seed, epoch=1,
        num_workers=0, disable_iterator_cache=True)
    batches = itr.next_epoch_itr(shuffle=False, set_dataset_epoch=False)
    if ds.max_valid_steps is not None:
        # each process stops at `i > max_valid_steps` (so after max_valid_steps + 1 batches), process r having
        # batches r, r + W, ...: together the first (max_valid_steps + 1) x W
        batches = itertools.islice(batches, (ds.max_valid_steps + 1) * cfg.distributed_training.distributed_world_size)
    batches = list(batches)

    slices = block_slices(task)
    pad = task.source_dictionary.pad()
    n = int(slices[:, 1].max())
    inputs, targets = np.full(n, pad, dtype=np.int64), np.full(n, pad, dtype=np.int64)
    scored = np.zeros(len(slices), dtype=bool)
    for b in batches:
        scored[b["id"].numpy()] = True
    bos_targets = text_tokens = 0
    for i, (s, e) in enumerate(slices):  # every block's masks (also the unscored ones: context at 2T, 4T)
        item = data[i]  # epoch 1's masks (get_batch_iterator set the epoch)
        src, tgt = item["net_input.src_tokens"].numpy(), item["target"].numpy()
        assert len(src) == e - s + 1, (i, len(src), s, e)
        inputs[s:e] = src[1:]
        if scored[i]:
            targets[s:e] = tgt[1:]
            bos_targets += int(tgt[0] != pad)
            text_tokens += int(e - s)
    return Validation(batches, inputs, targets, bos_targets, text_tokens)


def _target_losses(model, src, target, pad):
    """Cross-entropy (nats) of each target and its (row, column): fairseq 0.12.3 criterions/masked_lm.py, unsummed."""
    import torch.nn.functional as F

    masked = target.ne(pad)
    logits = model(src, masked_tokens=masked)[0]
    return F.cross_entropy(logits.float(), target[masked], reduction="none"), masked.nonzero()


@dataclass
class PerBlock:
    """The validation at T block by block: each scored block's index in the split (ascending), its summed
    cross-entropy (nats) and its targets."""
    block: np.ndarray
    nats: np.ndarray
    masked: np.ndarray


def loss_at_t(model, val: Validation, pad: int, device) -> Tuple[float, float, PerBlock]:
    """(all targets, the masked <s> alone): summed cross-entropy in nats over fairseq's own batches; and the
    same per block."""
    total = bos = 0.0
    ids, nats, counts = [], [], []
    for b in val.batches:
        ce, where = _target_losses(model, b["net_input"]["src_tokens"].to(device), b["target"].to(device), pad)
        total += float(ce.sum())
        bos += float(ce[where[:, 1] == 0].sum())  # right-padded rows: column 0 is each block's <s>
        rows, row = len(b["id"]), where[:, 0].cpu().numpy()
        ids.append(b["id"].numpy())
        nats.append(np.bincount(row, weights=ce.double().cpu().numpy(), minlength=rows))
        counts.append(np.bincount(row, minlength=rows))
    order = np.argsort(np.concatenate(ids), kind="stable")  # the split's order: the same for every model of a seed
    per = PerBlock(np.concatenate(ids)[order], np.concatenate(nats)[order], np.concatenate(counts)[order])
    return total, bos, per


def blocks_path(out: str) -> str:
    """Where ``measure`` writes the per-block record beside its JSON ``out`` (tupe_study.valid_se reads it)."""
    return out[:-len(".json")] + ".blocks.json" if out.endswith(".json") else out + ".blocks.json"


def longer_blocks(val: Validation, slices: np.ndarray, bos: int, pad: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """(input, target) of each block of ``slices`` that holds a target: ``<s>`` then the tokens as read at T; the
    target is pad where nothing is scored (the ``<s>`` always)."""
    out = []
    for s, e in slices:
        if (val.targets[s:e] != pad).any():
            out.append((np.concatenate([[bos], val.inputs[s:e]]), np.concatenate([[pad], val.targets[s:e]])))
    return out


def loss_of_blocks(model, blocks: List[Tuple[np.ndarray, np.ndarray]], length: int, pad: int, device,
                   tokens_per_batch: int) -> float:
    """Summed cross-entropy (nats) at the targets of ``blocks`` (each at most ``length`` long)."""
    import torch
    from fairseq.data.data_utils import collate_tokens

    blocks = sorted(blocks, key=lambda b: len(b[0]))  # little padding
    per_batch, total = max(1, tokens_per_batch // length), 0.0
    for i in range(0, len(blocks), per_batch):
        src = collate_tokens([torch.from_numpy(x) for x, _ in blocks[i:i + per_batch]], pad).to(device)
        tgt = collate_tokens([torch.from_numpy(y) for _, y in blocks[i:i + per_batch]], pad).to(device)
        total += float(_target_losses(model, src, tgt, pad)[0].sum())
    return total


def measure(checkpoint: str, shard: str, lengths: Sequence[int], out: str, tokens_per_batch: int = 8192,
            rope_scaling: Optional[str] = None, write_blocks: bool = True) -> dict:
    """Write (and return) the record of a pre-trained checkpoint (``lengths[0]``: its own T):

    ``lengths``: {L: bits, or None where not measured}; ``not_beyond``: why not, or None; ``variant``,
    ``positions``; ``tokens``: the validated text (tokens of the blocks scored at T, without their <s>);
    ``masked``: the targets, of which ``masked_bos`` are a T block's <s>; ``blocks``: {L: blocks run};
    ``valid_batches``: fairseq's batches at T; ``task``: the checkpoint's masking and packing settings;
    ``logged_valid_loss``: the validation loss fairseq logged at the checkpoint (None without one) and
    ``difference_from_logged``: the loss at T minus it. Beside ``out`` (``blocks_path``): the scoring at T block by
    block, ``block`` (index in the split), ``bits`` (summed loss in bits) and ``masked`` (targets), in block
    order, for the validation loss's own standard error (tupe_study.valid_se); ``per_block_total_bits`` in the record
    is their loss (the sum of ``bits`` over the sum of ``masked``), the loss at T up to float rounding.
    ``rope_scaling`` (a RoPE model only): the scaling beyond T (``rescale_rope``), recorded as ``rope_scaling``.
    ``write_blocks`` False: no per-block record (a scaled measurement: at T its scoring is the plain record's)."""
    import torch

    from tupe_tools.analysis.attention_maps import load_hub

    hub = load_hub(checkpoint, shard, objective="mlm")  # ELECTRA: NOT_FOR_ELECTRA
    cfg, d = hub.cfg, hub.task.source_dictionary
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = hub.model.to(device)
    T = int(cfg.task.tokens_per_sample)
    if int(lengths[0]) != T:
        raise ValueError(f"{checkpoint} was pre-trained with --tokens-per-sample {T}, not {lengths[0]}")
    positions = int(model.max_positions())
    variant = model.positional_variant
    reason = untrained_beyond(variant, T)
    if rope_scaling is not None:
        rescale_rope(model, rope_scaling, T, T)  # refuses a model that is not RoPE before any work

    val = pretraining_validation(cfg, masked_lm_task(cfg, d, T), positions)
    masked = int((val.targets != d.pad()).sum()) + val.bos_targets
    assert masked == sum(int(b["target"].ne(d.pad()).sum()) for b in val.batches), "a target missing in the stream"
    bits = 1 / max(masked, 1) / math.log(2)
    blocks = {str(T): sum(len(b["id"]) for b in val.batches)}
    with torch.no_grad():
        at_t, bos_at_t, per_block = loss_at_t(model, val, d.pad(), device)
        result: Dict[str, Optional[float]] = {str(T): at_t * bits}
        for length in lengths[1:]:
            if reason is None and length > positions:
                reason = (f"pre-trained with {positions} positions, fewer than {length} (a study from before the "
                          "longer-inputs stage: rerun its pre-training with LENGTH_FACTORS set)")
            if reason is not None:
                result[str(length)] = None
                continue
            slices = block_slices(masked_lm_task(cfg, d, length))
            if slices[:, 1].max() != len(val.inputs):
                raise ValueError(f"the valid split has {slices[:, 1].max()} tokens at {length}, {len(val.inputs)} at "
                                 f"T (--shorten-method {cfg.task.shorten_method}?)")
            pairs = longer_blocks(val, slices, d.bos(), d.pad())
            blocks[str(length)] = len(pairs)
            if rope_scaling is not None:
                rescale_rope(model, rope_scaling, length, T)
            # a masked <s> of T has no counterpart here: its loss at T stands in, so every length has the same targets
            result[str(length)] = (loss_of_blocks(model, pairs, length, d.pad(), device, tokens_per_batch) + bos_at_t) * bits
    logged = logged_valid_loss(checkpoint, cfg)
    record = {"variant": variant.name, "positions": positions, "lengths": result, "not_beyond": reason,
              "tokens": val.text_tokens, "masked": masked, "masked_bos": val.bos_targets, "blocks": blocks,
              "valid_batches": len(val.batches), "task": {k: _plain(cfg.task.get(k)) for k in TASK_FIELDS},
              "logged_valid_loss": logged, "rope_scaling": rope_scaling,
              "difference_from_logged": None if logged is None else result[str(T)] - logged}
    bits_per_block = per_block.nats / math.log(2)
    assert int(per_block.masked.sum()) == masked, "a target missing in the per-block sums"
    record["per_block_total_bits"] = float(bits_per_block.sum()) / max(masked, 1)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if write_blocks:
        write_json(blocks_path(out), {"block": per_block.block.tolist(), "bits": [round(float(x), 6) for x in bits_per_block],
                                      "masked": per_block.masked.tolist()})
    write_json(out, record)
    return record


def _plain(value):
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def logged_valid_loss(checkpoint: str, cfg) -> Optional[float]:
    """The validation loss fairseq logged when it saved ``checkpoint`` (bits, 3 decimals; its
    ``extra_state["val_loss"]``), or None (no validation then, or another --best-checkpoint-metric)."""
    import torch

    if cfg.checkpoint.best_checkpoint_metric != "loss":
        return None
    try:  # only the small extra_state is read: the tensors stay on disk
        state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=False)
    except RuntimeError:  # a checkpoint in torch's legacy (not zip) format cannot be mapped
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    loss = (state.get("extra_state") or {}).get("val_loss")
    return None if loss is None else float(loss)
