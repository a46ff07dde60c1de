"""The logic behind ``glue/finetune.sh``: per-task settings, validations per epoch, ``result.json``.

    python -m glue.finetune_helper settings TASK CHECKPOINT GLUE_BIN   # shell assignments to eval
    python -m glue.finetune_helper valid-interval N -- FAIRSEQ_TRAIN_ARGS...
    python -m glue.finetune_helper result --task T --lr LR --seed S --metric M --subsets valid,valid1 \\
        --log train.log --variant tupe_r --checkpoint CKPT --out result.json

Task settings follow the TUPE paper (PAPERS.md §1.4): 3 classes for MNLI, regression with one output for
STS-B, 5 epochs for MNLI/QNLI/QQP and 10 otherwise; the metric per task is ``glue.collect.METRIC``
(``mcc`` CoLA, ``pearson`` STS-B, ``accuracy`` otherwise), the one the results table reads.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import sys
from typing import Dict, List, Optional

from glue.collect import METRIC, parse_fairseq_log


# task -> (num_classes, epochs); 1 class = regression (STS-B)
TASKS: Dict[str, tuple] = {
    "CoLA": (2, 10), "SST-2": (2, 10), "MRPC": (2, 10), "STS-B": (1, 10), "QQP": (2, 5),
    "MNLI": (3, 5), "QNLI": (2, 5), "RTE": (2, 10), "WNLI": (2, 10),
}
PAPER_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE")  # WNLI is excluded
REPORT_FLAG = {"mcc": "--report-mcc", "pearson": "--report-pearson-and-spearman", "accuracy": ""}


def task_settings(task: str) -> Dict[str, str]:
    if task not in TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose from {', '.join(TASKS)}")
    num_classes, epochs = TASKS[task]
    metric = METRIC.get(task, "accuracy")
    return {
        "NUM_CLASSES": str(num_classes),
        "REGRESSION": "1" if num_classes == 1 else "0",
        "METRIC": metric,
        "REPORT_FLAG": REPORT_FLAG[metric],
        "VALID_SUBSETS": "valid,valid1" if task == "MNLI" else "valid",
        "TASK_EPOCHS": str(epochs),
    }


def label_count(bin_dir: str) -> Optional[int]:
    path = os.path.join(bin_dir, "label", "dict.txt")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip() and not line.startswith("madeupword"))


def cmd_settings(args) -> int:
    from tupe_plugin.checkpoint_info import checkpoint_info, fairseq_args

    out = task_settings(args.task)
    bin_dir = os.path.join(args.glue_bin, f"{args.task}-bin")
    if not os.path.isfile(os.path.join(bin_dir, "input0", "dict.txt")):
        raise ValueError(f"{bin_dir}: no input0/dict.txt; binarize with python -m preprocess.glue_binarize")
    n = label_count(bin_dir)
    if out["REGRESSION"] == "0" and n is not None and n != int(out["NUM_CLASSES"]):
        raise ValueError(f"{bin_dir}/label/dict.txt has {n} labels, but {args.task} has {out['NUM_CLASSES']} classes")
    info = checkpoint_info(args.checkpoint)
    out["MODEL_ARGS"] = fairseq_args(info)
    out["CHECKPOINT_VARIANT"] = info["variant"]
    import torch

    out["CUDA_DEVICES"] = str(torch.cuda.device_count())
    for k, v in out.items():
        print(f"{k}={shlex.quote(v)}")
    return 0


def updates_per_epoch(fairseq_argv: List[str]) -> int:
    """Updates of epoch 1 as fairseq-train will run them (the count the warmup_ratio scheduler makes)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from tupe_plugin.optim.warmup_ratio_schedule import count_updates_per_epoch

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, input_args=fairseq_argv))
    return count_updates_per_epoch(cfg)


def cmd_valid_interval(args) -> int:
    logging.disable(logging.INFO)  # fairseq logs every dataset it loads
    per_epoch = updates_per_epoch(args.fairseq_args)
    print(max(1, math.ceil(per_epoch / args.per_epoch)))
    return 0


def cmd_result(args) -> int:
    subsets = [s for s in args.subsets.split(",") if s]
    scores = parse_fairseq_log(args.log, args.metric)
    missing = [s for s in subsets if s not in scores]
    if missing:
        raise ValueError(f"{args.log}: no finite {args.metric!r} for valid subset(s) {', '.join(missing)} "
                         f"(found: {scores or 'none'})")
    result = {
        "task": args.task, "lr": float(args.lr), "seed": int(args.seed), "metric": args.metric,
        "best_valid": {s: scores[s] for s in subsets}, "checkpoint_variant": args.variant,
        "checkpoint": os.path.abspath(args.checkpoint),
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(" ".join(f"{s} {args.metric} {v}" for s, v in result["best_valid"].items()))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m glue.finetune_helper", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("settings", help="per-task settings and the checkpoint's model flags, as NAME=value")
    s.add_argument("task")
    s.add_argument("checkpoint")
    s.add_argument("glue_bin")
    v = sub.add_parser("valid-interval", help="--validate-interval-updates for N validations per epoch")
    v.add_argument("per_epoch", type=int)
    v.add_argument("fairseq_args", nargs=argparse.REMAINDER)
    r = sub.add_parser("result", help="best valid score per subset from train.log -> result.json")
    for name in ("task", "lr", "seed", "metric", "subsets", "log", "variant", "checkpoint", "out"):
        r.add_argument(f"--{name}", required=True)
    args = p.parse_args(argv)
    if args.cmd == "valid-interval":
        args.fairseq_args = args.fairseq_args[1:] if args.fairseq_args[:1] == ["--"] else args.fairseq_args
    try:
        return {"settings": cmd_settings, "valid-interval": cmd_valid_interval, "result": cmd_result}[args.cmd](args)
    except (OSError, ValueError) as e:
        print(f"glue.finetune_helper {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
