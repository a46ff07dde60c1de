"""The pre-training recipe, written once: the TUPE paper's masked-LM recipe and ELECTRA-Base's changes to it.

Ke et al., "Rethinking Positional Encoding in Language Pre-training" (ICLR 2021), Sec. 4.1 and Appendix B:
BERT-base, 512 tokens, batch 256, 1M updates, Adam (0.9, 0.999) eps 1e-6, LR 1e-4 with 10k warmup and linear
decay to 0, clip 1.0, weight decay 0.01, dropout 0.1, mask 0.15. ELECTRA-Base (Clark et al., ICLR 2020,
Table 6): LR 2e-4 for 766k updates, discriminator loss weight 50, the rest as above.

Who reads it:

* ``tupe_pretrain/pretrain.py`` (behind ``pretrain.sh``) takes every default below from here;
* the hydra configs ``tupe_pretrain/config/pretrain/{tupe_base,electra_base}.yaml`` and the study's ``base``
  preset (``tupe_study/presets/base.env``, "the paper's setting") cannot import it: each value they
  write is checked against it by ``tests/test_single_sources.py`` through the keys named here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class Setting:
    name: str  # pretrain.sh's variable (tunable)
    value: str  # its default, as pretrain.sh writes it
    yaml: str = ""  # its dotted key in the hydra configs ("" when they do not set it)
    study: bool = False  # a setting of the study too, of the same name (a line of every preset, or its default)


MLM: Tuple[Setting, ...] = (
    Setting("TOKENS_PER_SAMPLE", "512", "task.tokens_per_sample", study=True),
    Setting("SAMPLE_BREAK_MODE", "complete", "task.sample_break_mode"),  # FULL-SENTENCES
    Setting("MASK_PROB", "0.15", "task.mask_prob"),
    Setting("SENTENCES_PER_UPDATE", "256", "model.target_batch_size", study=True),
    Setting("MAX_SENTENCES", "16", "dataset.batch_size", study=True),
    Setting("TOTAL_UPDATES", "1000000", "optimization.max_update", study=True),
    Setting("WARMUP", "10000", "lr_scheduler.warmup_updates", study=True),
    Setting("LR", "1e-4", "optimization.lr", study=True),
    Setting("END_LR", "0", "lr_scheduler.end_learning_rate"),
    Setting("ADAM_BETAS", "(0.9,0.999)", "optimizer.adam_betas"),
    Setting("ADAM_EPS", "1e-6", "optimizer.adam_eps"),
    Setting("WEIGHT_DECAY", "0.01", "optimizer.weight_decay"),
    Setting("CLIP_NORM", "1.0", "optimization.clip_norm"),
    Setting("DROPOUT", "0.1", "model.dropout"),
    Setting("ATTENTION_DROPOUT", "0.1", "model.attention_dropout"),
    Setting("SEED", "1", "common.seed"),
    Setting("SAVE_INTERVAL_UPDATES", "10000", "checkpoint.save_interval_updates"),
    Setting("KEEP_INTERVAL_UPDATES", "3", "checkpoint.keep_interval_updates"),
    Setting("KEEP_PATTERN", "100000", "checkpoint.keep_interval_updates_pattern"),  # keeps 100k, 200k, ...
    Setting("LOG_INTERVAL", "100", "common.log_interval"),
)

# ELECTRA-Base's changes; every other setting is MLM's. GENERATOR_SIZE_DIVISOR 0: the task's own choice for
# the size (3 at base: a generator of a third of the width; 4 otherwise).
ELECTRA_CHANGES: Tuple[Setting, ...] = (
    Setting("TOTAL_UPDATES", "766000", "optimization.max_update"),
    Setting("LR", "2e-4", "optimization.lr"),
    Setting("DISC_WEIGHT", "50", "criterion.disc_weight", study=True),
    Setting("GENERATOR_SIZE_DIVISOR", "0", "task.generator_size_divisor"),
)


def recipe(objective: str = "mlm") -> Dict[str, Setting]:
    """Every setting of ``objective`` (mlm or electra) by its pretrain.sh name."""
    settings = {s.name: s for s in MLM}
    if objective == "electra":
        settings.update({s.name: s for s in ELECTRA_CHANGES})
    elif objective != "mlm":
        raise ValueError(f"objective must be mlm or electra, not {objective!r}")
    return settings
