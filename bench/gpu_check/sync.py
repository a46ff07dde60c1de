"""The sync section: the device-to-host synchronisations of one MLM step (RoBERTa, BERT-A, TUPE-R) and one ELECTRA
step (BERT-A, TUPE-R), counted by ``bench/sync_count.py`` (CUDA's sync debug mode), with their sites."""
from __future__ import annotations

import collections
import functools
import time

import torch

from .probes import attention_paths_taken
from .report import Result
from .settings import Settings

# The steps whose syncs are counted: (arch family, objective); RoBERTa is fairseq's own.
SYNC_STEPS = (("roberta", "mlm"), ("bert_a", "mlm"), ("tupe_r", "mlm"), ("bert_a", "electra"), ("tupe_r", "electra"))


def step_model(family: str, objective: str, size: str, length: int, device: str):
    """(model, Adam) for one train step of bench_train_step: fairseq's ``roberta`` or ``<family>_<size>``, wrapped
    as ELECTRA's generator + discriminator for ``objective`` electra; bf16 weights as fairseq's --bf16."""
    from bench_train_step import build, with_objective

    arch = "roberta_base" if family == "roberta" else f"{family}_{size}"
    model = with_objective(build(arch, size, length, device), objective).to(torch.bfloat16)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def run(r: Result, s: Settings, args) -> None:
    from bench_train_step import make_batch, train_step
    from sync_count import sync_count

    x, masked = make_batch(s.sync_tokens, s.sync_length, s.device)
    r.say(f"Device-to-host synchronisations of one train step (bench/bench_train_step.py's: forward, loss, backward, "
          f"Adam; MLM or ELECTRA's generator + sampling + discriminator with --criterion electra's loss), "
          f"{s.timing_size} size, bf16 weights, {x.size(0)} x {s.sync_length} tokens, the attention path `auto` "
          "takes (on a GPU after one step that is not counted: first calls set up kernels). Counted by "
          "bench/sync_count.py: "
          "CUDA's sync debug mode on a GPU (each sync one warning), the sync-forcing ops without one (dry run). "
          "Each sync stalls the host until the GPU has run every queued kernel. Sites: where they come from, most "
          "frequent first. Without CUDA the count is of ops that would sync if their tensors were on a GPU: Adam's "
          "reads of its step counter count there, though on a GPU that counter stays a CPU tensor (no sync).\n")
    r.say("| arch | objective | syncs | counted by | attention path | sites |\n|---|---|---:|---|---|---|")
    for family, objective in SYNC_STEPS:
        if time.time() > args.deadline:
            r.fail(f"time budget reached before {family} {objective}")
            continue
        model, opt = step_model(family, objective, s.timing_size, s.sync_length, s.device)
        if s.device == "cuda":  # first calls sync while they set up (cuBLAS, cuDNN, Triton): not the step's own
            train_step(model, opt, x, masked)
        with attention_paths_taken() as paths:
            found = sync_count(functools.partial(train_step, model, opt, x, masked))
        sites = collections.Counter(found.sites).most_common()
        shown = "; ".join(f"{site} x{n}" if n > 1 else site for site, n in sites[:6]) + (" ..." if len(sites) > 6 else "")
        taken = ", ".join(sorted(set(paths))) or "fairseq's"
        r.say(f"| {family} | {objective} | {found.count} | {found.how} | {taken} | {shown} |")
        r.record(family, f"{objective} T={s.sync_length}", syncs=found.count, counted_by=found.how,
                 attention_path=taken, sites=" | ".join(f"{site} x{n}" for site, n in sites))
        del model, opt
        if s.device == "cuda":
            torch.cuda.empty_cache()
