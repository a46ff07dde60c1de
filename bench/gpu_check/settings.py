"""What the sections run on: ``Settings``, whose defaults are the GPU's, and ``DRY_RUN``'s tiny values for the CPU
rehearsal; ``settings`` picks one and narrows it for ``--quick``."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Tuple

import torch
from bench_attention import PATHS

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TimingGroup:
    """Rows of the timing section: every variant of ``variants`` (None: the whole registry) at length T with one
    objective, each against RoBERTa's MLM step; ``bert_a`` always comes first (the other reference)."""

    length: int
    objective: str  # "mlm" or "electra" (generator + discriminator, --task electra --criterion electra)
    variants: Optional[Tuple[str, ...]] = None


# A variant of each kind (no bias, learned bias, fixed bias, rotation, own block, PAM): the rows at T=1024.
SOME_VARIANTS = ("bert_a", "tupe_r", "t5_rel", "alibi", "rope", "deberta_rel", "pam_window")
# At T=128 attention is a small part of a step and the variants' costs differ little: a few show it.
T128_VARIANTS = ("bert_a", "tupe_r", "rope", "deberta_rel")
ELECTRA_VARIANTS = ("bert_a", "tupe_r")
# --quick (make gpu-check QUICK=1) measures what a short GPU loan needs first, so that the loan keeps time for the
# GPU study: the Triton kernel's errors and the attention table at T=512 with training's padding (no FlexAttention,
# whose compilation takes a minute), pretrain.sh's wps of RoBERTa and TUPE-R, and the step ratios to RoBERTa of
# these variants at T=512 and of TUPE-R at 1024.
QUICK_VARIANTS = ("bert_a", "tupe_r", "t5_rel", "rope", "deberta_rel")
QUICK_ATTENTION_PATHS = ("sdpa", "explicit", "triton")


@dataclass(frozen=True)
class Settings:
    """What the sections run on. The defaults are the GPU's (base size, bf16, the recipe's batches)."""

    device: str = "cuda"
    # sdpa: every variant at this size's width and heads (what picks the kernels), with fewer layers
    sdpa_size: str = "base"
    sdpa_length: int = 100  # not a multiple of 8: the masks need the alignment
    sdpa_layers: int = 2
    # train: a short masked-LM pre-training per (precision, launcher: "cli" fairseq-train, "hydra" fairseq-hydra-train)
    train_arch: str = "tupe_r_base"
    train_runs: Tuple[Tuple[str, str], ...] = (("fp16", "cli"), ("bf16", "hydra"))
    train_batch: int = 32
    train_length: int = 128
    train_updates: int = 60
    train_lr: str = "3e-4"
    train_warmup: int = 10
    # the words of the models that the sdpa, throughput, sync and timing sections build (bench_train_step.VOCAB):
    # the project's sentencepiece vocabulary
    step_vocab: int = 32000
    # timing: one train step of each variant against RoBERTa's, tokens per step, steps before and while timing
    timing_size: str = "base"
    timing: Tuple[TimingGroup, ...] = (TimingGroup(512, "mlm"), TimingGroup(512, "electra", ELECTRA_VARIANTS),
                                       TimingGroup(1024, "mlm", SOME_VARIANTS), TimingGroup(128, "mlm", T128_VARIANTS))
    tokens: int = 16384
    warmup: int = 2
    steps: int = 8
    # attention: one layer's core, (B, H, T, D) with B = tokens // T
    attention_dtype: torch.dtype = torch.bfloat16
    attention_lengths: Tuple[int, ...] = (512, 1024)
    attention_tokens: int = 16384
    attention_heads: int = 12
    attention_head_dim: int = 64
    attention_warmup: int = 3
    attention_iters: int = 10
    attention_paddings: Tuple[bool, ...] = (False, True)  # without and with training's padding (a quarter padded)
    attention_paths: Tuple[str, ...] = PATHS
    # throughput: train_scripts/pretrain.sh on one device
    throughput_archs: Tuple[str, ...] = ("roberta_base", "bert_a_base", "tupe_r_base")
    throughput_size: str = "base"
    throughput_length: int = 512  # TOKENS_PER_SAMPLE
    throughput_batch: int = 16  # MAX_SENTENCES, the recipe's per-GPU batch
    throughput_sentences: int = 256  # SENTENCES_PER_UPDATE: update-freq = this / batch on one device
    throughput_updates: int = 12
    throughput_log_interval: int = 4
    # sync: the steps of sync.SYNC_STEPS at this length and tokens per step
    sync_length: int = 512
    sync_tokens: int = 4096


GPU = Settings()
# The CPU rehearsal (--dry-run): every section at tiny size, fp32 training (fairseq's fp16 and bf16 optimizers need
# CUDA), a 1,000-word vocabulary (the output layer dominates a tiny model's step at 32,000).
DRY_RUN = Settings(
    device="cpu",
    sdpa_size="tiny", sdpa_length=21, sdpa_layers=2,
    train_arch="tupe_r_tiny", train_runs=(("fp32", "cli"), ("fp32", "hydra")), train_batch=16, train_length=64,
    train_updates=10, train_lr="3e-3", train_warmup=2,
    step_vocab=1000,
    timing_size="tiny",
    timing=(TimingGroup(32, "mlm"), TimingGroup(32, "electra", ELECTRA_VARIANTS), TimingGroup(64, "mlm", SOME_VARIANTS)),
    tokens=256, warmup=1, steps=2,
    attention_dtype=torch.float32, attention_lengths=(16,), attention_tokens=16, attention_heads=1,
    attention_head_dim=8, attention_warmup=0, attention_iters=1,
    throughput_archs=("roberta_base", "bert_a_tiny", "tupe_r_tiny"), throughput_size="tiny", throughput_length=64,
    throughput_batch=4, throughput_sentences=8, throughput_updates=4, throughput_log_interval=2,
    sync_length=32, sync_tokens=128,
)


def settings(dry_run: bool, quick: bool = False) -> Settings:
    """The GPU's settings or the dry run's; ``quick`` keeps one attention length with training's padding and no
    FlexAttention, RoBERTa's and TUPE-R's throughput, and the quick variants' timing at one length (TUPE-R also
    at twice it)."""
    full = DRY_RUN if dry_run else GPU
    if not quick:
        return full
    length = full.timing[0].length  # 512 (the dry run's 32)
    return replace(full, attention_lengths=full.attention_lengths[:1], attention_paddings=(True,),
                   attention_paths=QUICK_ATTENTION_PATHS,
                   throughput_archs=(full.throughput_archs[0], full.throughput_archs[-1]),
                   timing=(TimingGroup(length, "mlm", QUICK_VARIANTS), TimingGroup(2 * length, "mlm", ("tupe_r",))))
