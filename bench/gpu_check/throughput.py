"""The throughput section: ``train_scripts/pretrain.sh`` itself on one device (its command line, the recipe's per-GPU
batch of 16 x 512 tokens and update-freq 16) for fairseq's ``roberta_base``, ``bert_a_base`` and ``tupe_r_base``, a
few updates in bf16 on generated data: fairseq's own ``wps`` from its log, and MFU = matrix FLOPs per token x wps /
peak. bf16: pretrain.sh's ``BF16=1``, fairseq-train's own parser without the ``--tpu`` that fairseq 0.12 adds for
``--bf16`` (``tupe_pretrain/fairseq_train.py``)."""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from .environment import card_name, peak_tflops
from .probes import forced_path
from .report import Result
from .settings import ROOT, Settings


def write_token_data(folder: Path, vocab: int, tokens: int, min_len: int, max_len: int, seed: int = 0) -> None:
    """A fairseq data folder (dict.txt, train/valid .bin/.idx, as fairseq-preprocess writes them) of about
    ``tokens`` tokens: lines of ``min_len`` to ``max_len`` words drawn from ``vocab`` words with Zipf frequencies,
    each ending with </s>. Written by fairseq's own dataset builder, without a text round trip."""
    import numpy as np
    from fairseq.data import Dictionary, indexed_dataset

    rng = np.random.default_rng(seed)
    d = Dictionary()
    for k in range(vocab):
        d.add_symbol(f"w{k}", n=vocab - k)
    d.save(str(folder / "dict.txt"))
    zipf = 1.0 / np.arange(1, vocab + 1)
    for split, n_tokens in (("train", tokens), ("valid", max(min_len, tokens // 100))):
        builder = indexed_dataset.make_builder(str(folder / f"{split}.bin"), "mmap", vocab_size=len(d))
        lengths = rng.integers(min_len, max_len + 1, size=max(1, 2 * n_tokens // (min_len + max_len)))
        ids = rng.choice(vocab, size=int(lengths.sum()), p=zipf / zipf.sum()) + d.nspecial
        for line in np.split(ids, np.cumsum(lengths)[:-1]):
            builder.add_item(torch.from_numpy(np.append(line, d.eos())))
        builder.finalize(str(folder / f"{split}.idx"))


def pretrain_command(s: Settings, arch: str, data: Path, save_dir: Path) -> Tuple[List[str], Dict[str, str]]:
    """train_scripts/pretrain.sh for a short run of ``arch`` on one device: its environment and its arguments
    (appended to its fairseq-train command line). Everything else is the recipe's: Adam, lr, dropouts, clipping,
    the per-GPU batch and the update frequency of one GPU."""
    gpu = s.device == "cuda"
    env = {"DATA": str(data), "ARCH": arch, "GPUS": "1" if gpu else "0", "FP16": "0", "BF16": "1" if gpu else "0",
           "PYTHON": sys.executable,
           "TOKENS_PER_SAMPLE": str(s.throughput_length), "MAX_SENTENCES": str(s.throughput_batch),
           "SENTENCES_PER_UPDATE": str(s.throughput_sentences), "TOTAL_UPDATES": str(s.throughput_updates),
           "LOG_INTERVAL": str(s.throughput_log_interval), "SAVE_DIR": str(save_dir), "TENSORBOARD_DIR": "none"}
    extra = ["--no-save", "--disable-validation"]
    if arch.startswith("roberta_") and s.throughput_size != "base":  # fairseq's roberta has no tiny arch
        from tupe_core.facts import SIZES, size_flag

        extra += [f"{size_flag(k)}={v}" for k, v in SIZES[s.throughput_size].args().items()]
    return ["bash", str(ROOT / "train_scripts/pretrain.sh"), *extra], env


def throughput_log_facts(log: str) -> Dict[str, object]:
    """fairseq's ``train_inner`` words per second (one per logged interval), and the precision the run trained in
    (its logged config: ``'bf16': True`` and ``'tpu': False`` on a GPU in bf16)."""
    wps = [float(v) for v in re.findall(r"train_inner\W.*?\bwps=([0-9.]+)", log)]
    flags = {k: v == "True" for k, v in re.findall(r"'(bf16|fp16|tpu|cpu)': (True|False)", log)}
    return {"wps": wps, **{k: flags.get(k) for k in ("bf16", "fp16", "tpu", "cpu")}}


def run(r: Result, s: Settings, args) -> None:
    from bench_train_step import build, make_batch, step_flops
    from fairseq.data import Dictionary

    peak = peak_tflops(card_name(s.device), args.peak_tflops)
    gpu = s.device == "cuda"
    update_freq = s.throughput_sentences // s.throughput_batch
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        data.mkdir()
        tokens = int(1.3 * s.throughput_updates * s.throughput_sentences * s.throughput_length)
        # The trained models' vocabulary is the data's words, fairseq's special symbols and the <mask> masked_lm
        # adds: as many words as make it the step models' (s.step_vocab), so that the FLOP count below, made on
        # bench_train_step's models, is of the models that trained.
        words = s.step_vocab - Dictionary().nspecial - 1
        write_token_data(data, words, tokens, *((20, 60) if gpu else (10, 30)))
        precision = "bf16 (BF16=1)" if gpu else "fp32 (dry run: fairseq's bf16 needs CUDA)"
        r.say(f"`train_scripts/pretrain.sh` as it runs on one GPU (GPUS=1: MAX_SENTENCES={s.throughput_batch} per "
              f"forward, update-freq {update_freq} for SENTENCES_PER_UPDATE={s.throughput_sentences}; "
              f"TOKENS_PER_SAMPLE={s.throughput_length}, the recipe's Adam, dropouts and clipping), {precision}, "
              f"{s.throughput_updates} updates on generated data ({words} words with Zipf frequencies, "
              f"lines of {'20-60' if gpu else '10-30'} words packed by --sample-break-mode complete), logged every "
              f"{s.throughput_log_interval}. wps: fairseq's own words (tokens) per second of its train_inner lines; "
              "the first interval (start-up, kernel compilation) is left out, the median of the others is the "
              "row's. bf16: pretrain.sh's BF16=1 (fairseq-train's own parser, without the `--tpu` fairseq 0.12 "
              "sets for `--bf16`: tupe_pretrain/fairseq_train.py). MFU = matrix "
              "FLOPs per token (one step of "
              f"{s.throughput_batch} x {s.throughput_length} tokens counted as in the timing section) x wps / peak"
              + (f" {peak:g} TFLOP/s." if peak else ": no peak rate known (give --peak-tflops).") + "\n")
        r.say("| arch | wps (median) | wps per interval | MFU | FLOPs/token | trained in | seconds |\n"
              "|---|---:|---|---:|---:|---|---:|")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        x, masked = make_batch(s.throughput_batch * s.throughput_length, s.throughput_length, s.device)
        for arch in s.throughput_archs:
            if time.time() > args.deadline:
                r.fail(f"time budget reached before {arch}")
                continue
            cmd, extra_env = pretrain_command(s, arch, data, tmp / f"save-{arch}")
            t0 = time.monotonic()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env={**env, **extra_env}, cwd=tmp,
                                   timeout=max(10.0, args.deadline - time.time()))
                log, rc = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                log, rc = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace"), "timeout"
            seconds = time.monotonic() - t0
            facts = throughput_log_facts(log)
            measured = facts["wps"][1:]
            wps = statistics.median(measured) if measured else None
            model = build(arch if not arch.startswith("roberta_") else "roberta_base", s.throughput_size,
                          s.throughput_length, s.device).to(torch.bfloat16 if gpu else torch.float32)
            with forced_path(model, "sdpa"):  # FlopCounterMode counts SDPA, not a Triton kernel: same math
                flops_per_token = step_flops(model, torch.optim.Adam(model.parameters(), lr=1e-4), x, masked) / x.numel()
            del model
            mfu = flops_per_token * wps / (peak * 1e12) if wps and peak else None
            trained = ", ".join(k for k in ("bf16", "fp16", "tpu", "cpu") if facts[k]) or "fp32"
            r.say(f"| {arch} | {f'{wps:,.0f}' if wps else 'none'} | {', '.join(f'{w:,.0f}' for w in facts['wps'])} | "
                  f"{f'{mfu:.1%}' if mfu else 'n/a'} | {flops_per_token:.3g} | {trained} | {seconds:.0f} |")
            r.record(arch, f"T={s.throughput_length} batch={s.throughput_batch}", wps=wps,
                     wps_intervals=" ".join(f"{w:g}" for w in facts["wps"]), flops_per_token=flops_per_token, mfu=mfu,
                     bf16=facts["bf16"], tpu=facts["tpu"], update_freq=update_freq, seconds=round(seconds, 1))
            if rc != 0:
                r.fail(f"{arch}: pretrain.sh exit status {rc}\n\n```\n{log[-2500:]}\n```")
            elif wps is None:
                r.fail(f"{arch}: fewer than two train_inner intervals logged\n\n```\n{log[-1500:]}\n```")
            elif gpu and not (facts["bf16"] and facts["tpu"] is False):
                r.fail(f"{arch}: did not train in bf16 on the GPU (bf16 {facts['bf16']}, tpu {facts['tpu']})")
            if s.device == "cuda":
                torch.cuda.empty_cache()
