"""The timing section: one train step of a variant against fairseq's ``roberta`` of the same size (base, bf16
weights, 16,384 tokens per step), in ``bench/bench_train_step.py``'s alternation: every variant at T=512, a variant
of each kind at T=1024, a few at T=128, ELECTRA's step of BERT-A and TUPE-R at T=512 (``Settings.timing``); the
ratio to RoBERTa and to ``bert_a`` on the same ``--tupe-attention``, ELECTRA / MLM, the per-pair ratios, tokens/s,
model FLOPs utilisation (matrix FLOPs per second over the card's peak dense bf16 rate) and peak memory. It stops at
the time budget and reports the rows it did not reach."""
from __future__ import annotations

import statistics
import time
from typing import Dict, List, Tuple

import torch

from .environment import card_name, peak_tflops
from .probes import attention_paths_taken, forced_path
from .report import Result
from .settings import Settings, TimingGroup
from .sync import step_model


def timing_variants(group: TimingGroup, requested: List[str]) -> List[str]:
    """The variants of one timing group: bert_a first (the plugin's reference on the same path), then those of the
    group (all: None) that were requested (default: the whole registry)."""
    from tupe_core.registry import VARIANTS

    wanted = [v for v in (group.variants or VARIANTS) if v in requested and v != "bert_a"]
    return ["bert_a"] + wanted


def run(r: Result, s: Settings, args) -> None:
    from bench_train_step import make_batch, pair_ratio_iqr, resident_bytes, step_flops, step_peak_bytes, timed_steps

    name = card_name(s.device)
    peak = peak_tflops(name, args.peak_tflops)
    warmup = s.warmup if args.warmup is None else args.warmup  # --warmup 0: none
    steps = args.steps or s.steps
    r.say(f"{s.timing_size} size, bf16 weights (as fairseq's bf16 training converts the model; Adam here keeps no fp32 master "
          f"copy), {s.tokens} tokens per step, training mode with RoBERTa's dropouts, `--tupe-attention auto` (the "
          f"path column: what it took); {warmup} warm-up and {steps} timed steps per model, alternating RoBERTa / "
          "variant. Every row steps against RoBERTa's MLM step; an ELECTRA row's variant steps ELECTRA's generator + "
          "discriminator (--task electra --criterion electra). / RoBERTa: the variant's median / RoBERTa's; pair "
          "ratios: IQR of step i / step i. / bert_a: the row's / RoBERTa ratio over bert_a's at the same T, objective "
          "and `--tupe-attention` (each against the RoBERTa it alternated with): the variant's own cost, which a "
          "plugin faster than fairseq in its common parts would hide from / RoBERTa. ELECTRA / MLM: an ELECTRA row's "
          "/ RoBERTa ratio over the same variant's MLM row at that T. MFU = matrix FLOPs of a step (torch's "
          "FlopCounterMode, forward + backward, counted with the blocks on SDPA: the same math, and FlopCounterMode "
          "does not see a Triton kernel) / median step time / peak "
          + (f"{peak:g} TFLOP/s dense bf16 ({name})" if peak else f"unknown for {name}: no MFU (give --peak-tflops)")
          + ".\n")
    r.say("| T | objective | batch | variant | path | RoBERTa ms | variant ms | / RoBERTa | pair ratios (IQR) | / bert_a | "
          "ELECTRA / MLM | variant tokens/s | RoBERTa MFU | variant MFU | FLOP ratio | RoBERTa peak MiB | variant peak MiB |")
    r.say("|---:|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def mfu(flops: int, seconds: float) -> float | None:
        return flops / seconds / (peak * 1e12) if peak else None

    def shown(fraction) -> str:
        return "n/a" if fraction is None else f"{fraction:.1%}"

    skipped = []
    ratios: Dict[Tuple[int, str, str], float] = {}  # (T, objective, variant) -> variant / RoBERTa
    for group in s.timing:
        length, objective = group.length, group.objective
        variants = timing_variants(group, args.variants)
        if time.time() > args.deadline:
            skipped += [f"{v} T={length} {objective}" for v in variants]
            continue
        x, masked = make_batch(s.tokens, length, s.device)
        roberta = step_model("roberta", "mlm", s.timing_size, length, s.device)
        roberta_step = step_peak_bytes(*roberta, x, masked, s.device)
        roberta_mib, roberta_flops = (resident_bytes(*roberta) + roberta_step) / 2**20, step_flops(*roberta, x, masked)
        for variant in variants:
            if time.time() > args.deadline:
                skipped.append(f"{variant} T={length} {objective}")
                continue
            setting = f"T={length} {objective}"
            try:
                pair = {"roberta": roberta, "variant": step_model(variant, objective, s.timing_size, length, s.device)}
                times = timed_steps(pair, x, masked, warmup, steps, s.device)
                model, opt = pair.pop("variant")
                with attention_paths_taken() as paths:
                    step = step_peak_bytes(model, opt, x, masked, s.device)
                with forced_path(model, "sdpa"):  # FlopCounterMode counts SDPA, not a Triton kernel: same math
                    variant_flops = step_flops(model, opt, x, masked)
                variant_mib = (resident_bytes(model, opt) + step) / 2**20
                del model, opt
            except Exception as e:  # reported in its row, the others go on
                r.say(f"| {length} | {objective} | {x.size(0)} | {variant} | failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:200]} |")
                r.record(variant, setting, error=f"{type(e).__name__}: {e}"[:300])
                r.status = "failed"
                continue
            finally:
                if s.device == "cuda":
                    torch.cuda.empty_cache()
            rm, vm = statistics.median(times["roberta"]), statistics.median(times["variant"])
            q1, q3 = pair_ratio_iqr(times["roberta"], times["variant"])
            ratio = ratios[(length, objective, variant)] = vm / rm
            bert_a = ratios.get((length, objective, "bert_a"))
            to_bert_a = ratio / bert_a if bert_a else None
            mlm = ratios.get((length, "mlm", variant)) if objective != "mlm" else None
            electra_to_mlm = ratio / mlm if mlm else None
            path = ", ".join(sorted(set(paths)))
            tokens = x.numel()
            r.say(f"| {length} | {objective} | {x.size(0)} | {variant} | {path} | {rm * 1e3:.1f} | {vm * 1e3:.1f} | "
                  f"{ratio:.3f} | {q1:.2f}-{q3:.2f} | {f'{to_bert_a:.3f}' if to_bert_a else 'n/a'} | "
                  f"{f'{electra_to_mlm:.3f}' if electra_to_mlm else ''} | {tokens / vm:,.0f} | "
                  f"{shown(mfu(roberta_flops, rm))} | {shown(mfu(variant_flops, vm))} | "
                  f"{variant_flops / roberta_flops:.3f} | {roberta_mib:,.0f} | {variant_mib:,.0f} |")
            r.record(variant, setting, batch=x.size(0), attention_path=path, roberta_ms=rm * 1e3, variant_ms=vm * 1e3,
                     time_ratio=ratio, pair_ratio_q1=q1, pair_ratio_q3=q3, ratio_to_bert_a=to_bert_a,
                     electra_to_mlm=electra_to_mlm, roberta_tokens_per_s=tokens / rm,
                     variant_tokens_per_s=tokens / vm, roberta_flops=roberta_flops, variant_flops=variant_flops,
                     roberta_mfu=mfu(roberta_flops, rm), variant_mfu=mfu(variant_flops, vm),
                     roberta_peak_mib=roberta_mib, variant_peak_mib=variant_mib)
            r.save()
        del roberta
        if s.device == "cuda":
            torch.cuda.empty_cache()
    if skipped:
        r.fail(f"time budget reached; not run: {', '.join(skipped)}")
