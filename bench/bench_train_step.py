"""Train-step time and peak memory: TUPE-R vs fairseq's own ``roberta`` of the same size.

Both models are built in this process and timed side by side (alternating steps, same batch),
printing the ratio TUPE-R / RoBERTa. Peak memory is the peak RSS of a fresh child process that
builds one model and runs the same steps (CPU; includes the ~same interpreter + fairseq baseline),
or ``torch.cuda.max_memory_allocated`` on GPU.

    python bench/bench_train_step.py [--sizes tiny base] [--lengths 128 512] [--steps 5] [--device cpu]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time

import torch


def build(arch: str, size: str, max_positions: int, device: str):
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    import tupe_plugin  # noqa: F401

    d = Dictionary()
    for i in range(32000):
        d.add_symbol(f"w{i}")

    class Task:
        source_dictionary = d

        def max_positions(self):
            return max_positions

    name = {("roberta", "tiny"): "roberta_base", ("roberta", "base"): "roberta_base",
            ("tupe_r", "tiny"): "tupe_r_tiny", ("tupe_r", "base"): "tupe_r_base"}[(arch, size)]
    args = argparse.Namespace(arch=name, max_positions=max_positions, tokens_per_sample=max_positions)
    if size == "tiny":
        args.encoder_layers, args.encoder_embed_dim = 2, 64
        args.encoder_ffn_embed_dim, args.encoder_attention_heads = 128, 4
    ARCH_CONFIG_REGISTRY[name](args)
    torch.manual_seed(0)
    return ARCH_MODEL_REGISTRY[name].build_model(args, Task()).to(device).train()


def batch(size: str, length: int, device: str):
    bsz = {"tiny": 32, "base": 8 if length == 128 else 2}[size]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, 32000, (bsz, length), generator=g)
    x[:, 0] = 0
    masked = torch.rand(bsz, length, generator=g) < 0.15
    return x.to(device), masked.to(device)


def step(model, opt, x, masked):
    logits, _ = model(x, masked_tokens=masked)
    loss = torch.nn.functional.cross_entropy(logits, x[masked])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if x.is_cuda:
        torch.cuda.synchronize()


def peak_memory_child(arch, size, length, steps, device, queue):
    model = build(arch, size, length, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, m = batch(size, length, device)
    for _ in range(steps):
        step(model, opt, x, m)
    if device == "cuda":
        queue.put(torch.cuda.max_memory_allocated() / 2**20)
    else:
        queue.put(peak_rss_mib())


def peak_rss_mib() -> float:
    """This process's own high-water RSS. Not ru_maxrss: Linux carries that over from the
    parent across fork + exec, so every child would report the (large) parent's RSS."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def peak_memory(arch, size, length, steps, device) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=peak_memory_child, args=(arch, size, length, steps, device, q))
    p.start()
    value = q.get()
    p.join()
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "base"], choices=["tiny", "base"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    print(f"device={args.device} threads={torch.get_num_threads()} torch={torch.__version__}")
    print("| size | T | batch | RoBERTa s/step | TUPE-R s/step | time ratio | RoBERTa MiB | TUPE-R MiB | mem ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        for length in args.lengths:
            models = {a: build(a, size, length, args.device) for a in ("roberta", "tupe_r")}
            opts = {a: torch.optim.Adam(m.parameters(), lr=1e-4) for a, m in models.items()}
            x, m = batch(size, length, args.device)
            times = {a: [] for a in models}
            for i in range(args.steps + 2):
                for a in models:  # alternate, so both see the same machine state
                    t0 = time.perf_counter()
                    step(models[a], opts[a], x, m)
                    if i >= 2:
                        times[a].append(time.perf_counter() - t0)
            del models, opts
            rt, tt = statistics.median(times["roberta"]), statistics.median(times["tupe_r"])
            rm = peak_memory("roberta", size, length, 2, args.device)
            tm = peak_memory("tupe_r", size, length, 2, args.device)
            print(f"| {size} | {length} | {x.size(0)} | {rt:.4f} | {tt:.4f} | {tt / rt:.3f} | "
                  f"{rm:.1f} | {tm:.1f} | {tm / max(rm, 1e-9):.3f} |", flush=True)


if __name__ == "__main__":
    main()
