"""Per-task settings, ``result.json`` and result checks of a fine-tuning run (``glue/finetune.py`` calls them).

    python -m glue.finetune_helper settings TASK CHECKPOINT GLUE_BIN   # shell assignments to eval
    python -m glue.finetune_helper result --task T --lr LR --seed S --metric M --subsets valid,valid1 \\
        --log train.log --variant tupe_r --checkpoint CKPT --out result.json
    python -m glue.finetune_helper check-result TASK RESULT_JSON       # exit 0 when readable, else 1

Task settings come from the registry ``glue.tasks`` (the paper's protocol, ``docs/glue_protocol.md`` §3):
3 classes for MNLI, regression with one output for STS-B, 5 epochs for MNLI/QNLI/QQP and 10 otherwise,
the metric per task (``mcc`` CoLA, ``pearson`` STS-B, ``accuracy`` otherwise, custom tasks too). A custom
task (binaries marked custom by ``preprocess.glue_binarize``) takes its classes from its label dictionary.
A run's score is its best validation on the task's first valid subset, the other subsets read at that
same validation (MNLI-mm at MNLI-m's best step; ``docs/glue_protocol.md`` §5), unrounded.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Dict, List, Mapping, Optional

from glue.collect import parse_validations, read_result_json, select_best
from glue.tasks import get_task, is_custom_bin
from tupe_common.io import write_json
from tupe_common.errors import UsageError, exit_main


def task_settings(task: str, num_classes: Optional[int] = None, custom: bool = False) -> Dict[str, str]:
    """Shell settings of ``task``; ``num_classes`` (from the label dictionary) is needed for custom tasks."""
    spec = get_task(task, custom=custom)
    n = spec.num_classes if spec.num_classes is not None else num_classes
    if n is None:
        raise ValueError(f"{task}: a custom task takes its classes from its label/dict.txt, which was not found")
    return {
        "NUM_CLASSES": str(n),
        "REGRESSION": "1" if spec.regression else "0",
        "METRIC": spec.metric,
        "VALID_SUBSETS": ",".join(spec.valid_subsets),
        "TASK_EPOCHS": str(spec.epochs),
    }


def label_count(bin_dir: str) -> Optional[int]:
    """The labels of a classification task's binaries (fairseq's ``madeupwordNNNN`` padding not counted); None for a
    regression task, which has no label dictionary. A ValueError names a label/dict.txt that is not a dictionary."""
    from tupe_common.vocab import dict_symbols, real_symbols

    path = os.path.join(bin_dir, "label", "dict.txt")
    return len(real_symbols(dict_symbols(path))) if os.path.isfile(path) else None


def facts_of(task: str, checkpoint: str, glue_bin: str) -> Dict[str, str]:
    """What a fine-tuning of ``task`` from ``checkpoint`` needs to know: the task's settings, the checkpoint's
    model flags (MODEL_ARGS) and variant, and the CUDA devices. ValueError names a wrong file, and binaries whose
    dictionary is not the one the checkpoint was trained with (by the identity the checkpoint recorded, else by
    the pre-training data's dict.txt where this machine has it)."""
    from tupe_common.vocab import check_identity, check_same_dict
    from tupe_plugin_cli.checkpoint_record import checkpoint_info, fairseq_args, trained_dict

    bin_dir = os.path.join(glue_bin, f"{task}-bin")
    if not os.path.isfile(os.path.join(bin_dir, "input0", "dict.txt")):
        raise ValueError(f"{bin_dir}: no input0/dict.txt; binarize with python -m preprocess.glue_binarize")
    n = label_count(bin_dir)
    out = task_settings(task, num_classes=n, custom=is_custom_bin(bin_dir))
    if out["REGRESSION"] == "0" and n is not None and n != int(out["NUM_CLASSES"]):
        raise ValueError(f"{bin_dir}/label/dict.txt has {n} labels, but {task} has {out['NUM_CLASSES']} classes")
    info = checkpoint_info(checkpoint)
    given = os.path.join(bin_dir, "input0", "dict.txt")
    if info.get("vocab_identity"):
        check_identity(info["vocab_identity"], given, checkpoint)
    else:  # a checkpoint from before identities: the pre-training data's dict.txt, where this machine has it
        trained = trained_dict(checkpoint)
        if trained:
            check_same_dict(trained, given, checkpoint)
    out["MODEL_ARGS"] = fairseq_args(info)
    out["CHECKPOINT_VARIANT"] = info["variant"]
    import torch

    out["CUDA_DEVICES"] = str(torch.cuda.device_count())
    return out


def cmd_settings(args) -> int:
    for k, v in facts_of(args.task, args.checkpoint, args.glue_bin).items():
        print(f"{k}={shlex.quote(v)}")
    return 0


def write_result(task: str, lr: str, seed: str, metric: str, subsets: str, log: str, variant: str, checkpoint: str,
                 out: str, inputs: Optional[Mapping[str, str]] = None) -> str:
    """result.json of a run from its train.log: the best validation of the first subset, the others at that step,
    and what made the run (``inputs``: ``glue.finetune.run_inputs``); returns the line that says it."""
    names = [s for s in subsets.split(",") if s]
    scores, step = select_best(parse_validations(log, metric), names)
    missing = [s for s in names if s not in scores]
    if missing:
        raise ValueError(f"{log}: no finite {metric!r} for valid subset(s) {', '.join(missing)} "
                         f"at the best validation of {names[0]!r} (found: {scores or 'none'})")
    result = {
        "task": task, "lr": float(lr), "seed": int(seed), "metric": metric,
        "best_valid": {s: scores[s] for s in names}, "selected_on": names[0], "best_step": step,
        "checkpoint_variant": variant, "checkpoint": os.path.abspath(checkpoint),
    }
    if inputs is not None:
        result["inputs"] = dict(inputs)
    write_json(out, result, indent=2)
    return " ".join(f"{s} {metric} {v}" for s, v in result["best_valid"].items()) + f" (update {step})"


def cmd_result(args) -> int:
    print(write_result(args.task, args.lr, args.seed, args.metric, args.subsets, args.log, args.variant,
                       args.checkpoint, args.out))
    return 0


def check_result(task: str, result: str) -> Optional[str]:
    """None when ``result.json`` holds a score for every valid subset of the task, else why not."""
    spec = get_task(task, custom=True)
    try:
        scores = read_result_json(result, spec.name, spec.metric)
    except (OSError, ValueError) as e:
        return f"{result}: {e}"
    lacking = [s for s in spec.valid_subsets if s not in scores]
    return f"{result}: no score for subset(s) {', '.join(lacking)}" if lacking else None


def cmd_check_result(args) -> int:
    """Exit 0 when ``result.json`` is readable and complete, else say why, exit 1."""
    why = check_result(args.task, args.result)
    if why:
        print(why, file=sys.stderr)
    return 1 if why else 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m glue.finetune_helper", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("settings", help="per-task settings and the checkpoint's model flags, as NAME=value")
    s.add_argument("task")
    s.add_argument("checkpoint")
    s.add_argument("glue_bin")
    r = sub.add_parser("result", help="best valid score per subset from train.log -> result.json")
    for name in ("task", "lr", "seed", "metric", "subsets", "log", "variant", "checkpoint", "out"):
        r.add_argument(f"--{name}", required=True)
    c = sub.add_parser("check-result", help="exit 0 when a run's result.json is readable and complete")
    c.add_argument("task")
    c.add_argument("result")
    args = p.parse_args(argv)
    try:
        commands = {"settings": cmd_settings, "result": cmd_result, "check-result": cmd_check_result}
        return commands[args.cmd](args)
    except (OSError, ValueError) as e:  # a wrong setting (an unknown task): 2; a bad checkpoint, data or log: 1
        print(f"glue.finetune_helper {args.cmd}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1


if __name__ == "__main__":
    exit_main(main, "python -m glue.finetune_helper")
