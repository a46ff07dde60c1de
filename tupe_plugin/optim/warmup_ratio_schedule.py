"""Linear warmup over a *ratio* of training, then linear decay, for an *epoch* budget.

The TUPE paper fine-tunes GLUE for 10 (or 5) epochs with warmup ratio 0.06. fairseq's
``polynomial_decay`` wants update counts; this scheduler derives them: it builds the training
batch iterator exactly as the trainer will (same task, batch size, max tokens, seed, shards) to
count the updates of one epoch, so ``--lr-scheduler warmup_ratio --warmup-ratio 0.06
--max-epoch 10`` is all a user passes.
"""

import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq import tasks, utils
from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

logger = logging.getLogger(__name__)


@dataclass
class WarmupRatioConfig(FairseqDataclass):
    warmup_ratio: float = field(default=0.06, metadata={"help": "fraction of all updates spent warming up"})
    end_learning_rate: float = field(default=0.0, metadata={"help": "learning rate at the last update"})
    updates_per_epoch: Optional[int] = field(
        default=None, metadata={"help": "override the counted updates per epoch"}
    )
    max_epoch: int = II("optimization.max_epoch")
    max_update: int = II("optimization.max_update")
    update_freq: List[int] = II("optimization.update_freq")
    lr: List[float] = II("optimization.lr")


def count_updates_per_epoch(root_cfg) -> int:
    """Updates in epoch 1, from the same batch iterator the trainer builds."""
    task = tasks.setup_task(root_cfg.task)
    ds = root_cfg.dataset
    task.load_dataset(ds.train_subset, epoch=1, combine=True)
    model_max = getattr(root_cfg.model, "max_positions", None)
    itr = task.get_batch_iterator(
        dataset=task.dataset(ds.train_subset),
        max_tokens=ds.max_tokens,
        max_sentences=ds.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model_max, ds.max_tokens),
        ignore_invalid_inputs=True,
        required_batch_size_multiple=ds.required_batch_size_multiple,
        seed=root_cfg.common.seed + 1 if ds.update_ordered_indices_seed else root_cfg.common.seed,
        num_shards=max(1, root_cfg.distributed_training.distributed_world_size),
        shard_id=0,
        epoch=1,
        skip_remainder_batch=root_cfg.optimization.skip_remainder_batch,
        disable_iterator_cache=True,
    )
    return math.ceil(len(itr) / root_cfg.optimization.update_freq[0])


@register_lr_scheduler("warmup_ratio", dataclass=WarmupRatioConfig)
class WarmupRatioSchedule(FairseqLRScheduler):
    def __init__(self, cfg: WarmupRatioConfig, optimizer):
        super().__init__(cfg, optimizer)
        if not cfg.max_epoch and not cfg.max_update:
            raise ValueError("--lr-scheduler warmup_ratio needs a budget: --max-epoch N (or --max-update)")
        per_epoch = cfg.updates_per_epoch
        if per_epoch is None and cfg.max_epoch:
            per_epoch = count_updates_per_epoch(cfg._get_root())
        total = per_epoch * cfg.max_epoch if cfg.max_epoch else cfg.max_update
        if cfg.max_update and cfg.max_update < total:
            total = cfg.max_update
        self.total_num_update = max(1, total)
        self.warmup_updates = int(cfg.warmup_ratio * self.total_num_update)
        self.lr = cfg.lr[0]
        logger.info(
            f"warmup_ratio schedule: {per_epoch} updates/epoch x {cfg.max_epoch} epochs -> "
            f"{self.total_num_update} updates, {self.warmup_updates} warmup"
        )
        self.optimizer.set_lr(self._lr_at(0))

    def _lr_at(self, num_updates: int) -> float:
        if num_updates < self.warmup_updates:
            return self.lr * num_updates / self.warmup_updates
        if num_updates >= self.total_num_update:
            return self.cfg.end_learning_rate
        remaining = (self.total_num_update - num_updates) / (self.total_num_update - self.warmup_updates)
        return self.cfg.end_learning_rate + (self.lr - self.cfg.end_learning_rate) * remaining

    def step_begin_epoch(self, epoch):
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        self.optimizer.set_lr(self._lr_at(num_updates))
        return self.optimizer.get_lr()
