"""Benchmark step 3 against the standard route, on the bundled C4 sample replicated to ``--mb`` MB.

Standard route: sentencepiece pieces as text (the Python API, one thread, like the ``spm_encode
--output_format=piece`` CLI), then the real ``fairseq-preprocess --only-source --srcdict dict.txt
--dataset-impl mmap --workers W`` subprocess. Ours: ``python -m tupe_preprocess.c4_binarize`` with 1 and
``W`` workers. Asserts byte-identical ``.bin``/``.idx``; prints MB/s (input text MB over wall time,
process start included), the speed ratio and the 1 -> W worker scaling.

    python bench/bench_binarize.py --mb 30 --workers 2
"""
from __future__ import annotations

import argparse
import filecmp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import sentencepiece as spm

from tupe_preprocess import c4_extract, c4_spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SAMPLE = os.path.join(ROOT, "preprocess", "samples", "c4")


CPU: dict = {}  # command -> CPU seconds (user + sys) of it and its children


def timed(cmd: list, env: dict | None = None) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[tuple(cmd)] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=30.0, help="size of the replicated input text")
    ap.add_argument("--workers", type=int, default=2, help="W: our workers and fairseq-preprocess --workers")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--ours-only", action="store_true",
                    help="only time ours with W workers and report its memory (e.g. --mb 300)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench_binarize.")
    texts = []
    for name in sorted(os.listdir(SAMPLE)):
        if name.startswith("c4-train."):
            out = os.path.join(tmp, name.replace(".json.gz", ".txt"))
            c4_extract.extract(os.path.join(SAMPLE, name), out, progress_seconds=0)
            texts.append(out)
    c4_spm.train(texts, os.path.join(tmp, "spm"), vocab_size=args.vocab_size, progress_seconds=0)
    model, dict_path = os.path.join(tmp, "spm", "spm.model"), os.path.join(tmp, "spm", "dict.txt")

    one = b"".join(open(p, "rb").read() for p in texts)
    copies = max(1, int(args.mb * 1e6 / len(one) + 0.5))
    inp = os.path.join(tmp, "input.txt")
    with open(inp, "wb") as f:  # written copy by copy: a forked child must not inherit a big buffer
        for _ in range(copies):
            f.write(one)
    size_mb = len(one) * copies / 1e6
    n_lines = one.count(b"\n") * copies
    print(f"input: {size_mb:.1f} MB, {n_lines} lines, vocab {args.vocab_size}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; folder {tmp}")

    env = dict(os.environ)
    ours, ours_cpu = {}, {}
    for w in [args.workers] if args.ours_only else sorted({1, args.workers}):
        prefix = os.path.join(tmp, f"ours_w{w}")
        cmd = [sys.executable, "-m", "tupe_preprocess.c4_binarize", inp, "--out", prefix, "--spm-model", model,
               "--dict", dict_path, "--workers", str(w), "--progress-seconds", "0",
               "--tokens-per-sample", "0"]  # no line split: fairseq-preprocess splits none
        ours[w] = timed(cmd, env)
        ours_cpu[w] = CPU[tuple(cmd)]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # ours only, so far
    if args.ours_only:
        sec = ours[args.workers]
        print(f"ours: c4_binarize --workers {args.workers}: {sec:.2f} s, {size_mb / sec:.2f} MB/s; "
              f"max RSS of one of our processes: {rss:.0f} MB")
        if not args.keep:
            shutil.rmtree(tmp)
        return 0

    # Standard route, part 1: pieces as text (single thread, like the spm_encode CLI).
    sp = spm.SentencePieceProcessor(model_file=model)
    pieces = os.path.join(tmp, "input.pieces")
    t = time.perf_counter()
    with open(inp, encoding="utf-8", newline="\n") as f, open(pieces, "w", encoding="utf-8") as w:
        while True:
            lines = f.readlines(1 << 20)
            if not lines:
                break
            enc = sp.encode([ln.rstrip("\n") for ln in lines], out_type=str, num_threads=1)
            w.write("".join(" ".join(p) + "\n" for p in enc))
    t_spm = time.perf_counter() - t
    # Standard route, part 2: the real fairseq-preprocess.
    ref = os.path.join(tmp, "ref")
    t_fp = timed(["fairseq-preprocess", "--only-source", "--srcdict", dict_path, "--trainpref", pieces,
                  "--destdir", ref, "--dataset-impl", "mmap", "--workers", str(args.workers)])
    t_std = t_spm + t_fp

    for w in ours:
        for ext in ("bin", "idx"):
            if not filecmp.cmp(f"{ref}/train.{ext}", os.path.join(tmp, f"ours_w{w}.{ext}"), shallow=False):
                print(f"FAIL: ours_w{w}.{ext} differs from fairseq-preprocess")
                return 1

    W = args.workers
    print("byte-identical .bin/.idx: yes")
    print(f"{'route':52s} {'seconds':>8s} {'MB/s':>7s}")
    rows = [
        ("standard: spm pieces (1 thread)", t_spm),
        (f"standard: fairseq-preprocess --workers {W}", t_fp),
        (f"standard total (W={W})", t_std),
        ("ours: c4_binarize --workers 1", ours[1]),
        (f"ours: c4_binarize --workers {W}", ours[W]),
    ]
    for name, sec in rows:
        print(f"{name:52s} {sec:8.2f} {size_mb / sec:7.2f}")
    print(f"speed-up vs standard route (W={W}): {t_std / ours[W]:.2f}x "
          f"(1 worker vs standard: {t_std / ours[1]:.2f}x)")
    print(f"scaling 1 -> {W} workers: {ours[1] / ours[W]:.2f}x wall; CPU seconds {ours_cpu[1]:.2f} vs "
          f"{ours_cpu[W]:.2f} (all processes), so on {W} idle cores at most {W * ours_cpu[1] / ours_cpu[W]:.2f}x; "
          f"load average now {os.getloadavg()[0]:.2f}")
    print(f"max RSS of one of our processes (main or worker): {rss:.0f} MB")
    if not args.keep:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
