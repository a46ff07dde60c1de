"""Per-task facts, ``result.json`` and result checks of a fine-tuning run (``tupe_glue/finetune.py`` calls them).

    facts = facts_of(task, checkpoint, glue_bin)    # FinetuneFacts: the task's facts, the checkpoint's flags, GPUs
    best = write_result(task, lr, seed, facts.task.metric, facts.task.valid_subsets, log, ...)  # -> result.json
    why = check_result(task, result_json)           # None when readable and complete, else why not

Task facts come from the registry ``tupe_glue.tasks`` (the paper's protocol, ``docs/glue_protocol.md`` §3):
3 classes for MNLI, regression with one output for STS-B, 5 epochs for MNLI/QNLI/QQP and 10 otherwise,
the metric per task (``mcc`` CoLA, ``pearson`` STS-B, ``accuracy`` otherwise, custom tasks too). A custom
task (binaries marked custom by ``tupe_preprocess.glue_binarize``) takes its classes from its label dictionary.
A run's score is its best validation on the task's first valid subset, the other subsets read at that
same validation (MNLI-mm at MNLI-m's best step; ``docs/glue_protocol.md`` §5), unrounded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from tupe_glue.collect import parse_validations, read_result_json, select_best
from tupe_glue.tasks import get_task, is_custom_bin
from tupe_common.io import write_json


@dataclass(frozen=True)
class TaskFacts:
    """What fine-tuning one task needs to know of it (``tupe_glue.tasks``; a custom task's classes from its labels)."""

    num_classes: int  # outputs of the head: 1 for a regression task
    regression: bool
    metric: str  # the best checkpoint's metric, as tupe_glue.collect reads it from the log
    valid_subsets: Tuple[str, ...]  # the first one selects the best validation
    epochs: int  # EPOCHS=auto


@dataclass(frozen=True)
class FinetuneFacts:
    """What a fine-tuning of a task from a checkpoint needs to know (:func:`facts_of`)."""

    task: TaskFacts
    model_args: Tuple[str, ...]  # the checkpoint's model flags (tupe-checkpoint-info --fairseq-args)
    checkpoint_variant: str
    cuda_devices: int  # 0: fine-tune on the CPU


def task_settings(task: str, num_classes: Optional[int] = None, custom: bool = False) -> TaskFacts:
    """The facts of ``task``; ``num_classes`` (from the label dictionary) is needed for custom tasks."""
    spec = get_task(task, custom=custom)
    n = spec.num_classes if spec.num_classes is not None else num_classes
    if n is None:
        raise ValueError(f"{task}: a custom task takes its classes from its label/dict.txt, which was not found")
    return TaskFacts(num_classes=n, regression=spec.regression, metric=spec.metric,
                     valid_subsets=tuple(spec.valid_subsets), epochs=spec.epochs)


def label_count(bin_dir: str) -> Optional[int]:
    """The labels of a classification task's binaries (fairseq's ``madeupwordNNNN`` padding not counted); None for a
    regression task, which has no label dictionary. A ValueError names a label/dict.txt that is not a dictionary."""
    from tupe_common.vocab import dict_symbols, real_symbols

    path = os.path.join(bin_dir, "label", "dict.txt")
    return len(real_symbols(dict_symbols(path))) if os.path.isfile(path) else None


def facts_of(task: str, checkpoint: str, glue_bin: str) -> FinetuneFacts:
    """What a fine-tuning of ``task`` from ``checkpoint`` needs to know: the task's facts, the checkpoint's
    model flags and variant, and the CUDA devices. ValueError names a wrong file, and binaries whose
    dictionary is not the one the checkpoint was trained with (by the identity the checkpoint recorded, else by
    the pre-training data's dict.txt where this machine has it); an unknown task is a UsageError (a ValueError)."""
    from tupe_common.vocab import check_identity, check_same_dict
    from tupe_tools.checkpoint_record import checkpoint_info, fairseq_args
    from tupe_tools.checkpoint_info import trained_dict

    bin_dir = os.path.join(glue_bin, f"{task}-bin")
    if not os.path.isfile(os.path.join(bin_dir, "input0", "dict.txt")):
        raise ValueError(f"{bin_dir}: no input0/dict.txt; binarize with python -m tupe_preprocess.glue_binarize")
    n = label_count(bin_dir)
    facts = task_settings(task, num_classes=n, custom=is_custom_bin(bin_dir))
    if not facts.regression and n is not None and n != facts.num_classes:
        raise ValueError(f"{bin_dir}/label/dict.txt has {n} labels, but {task} has {facts.num_classes} classes")
    info = checkpoint_info(checkpoint)
    given = os.path.join(bin_dir, "input0", "dict.txt")
    if info.get("vocab_identity"):
        check_identity(info["vocab_identity"], given, checkpoint)
    else:  # a checkpoint from before identities: the pre-training data's dict.txt, where this machine has it
        trained = trained_dict(checkpoint)
        if trained:
            check_same_dict(trained, given, checkpoint)
    import torch

    return FinetuneFacts(task=facts, model_args=tuple(fairseq_args(info).split()),
                         checkpoint_variant=info["variant"], cuda_devices=torch.cuda.device_count())


def write_result(task: str, lr: float, seed: int, metric: str, subsets: Sequence[str], log: str, variant: str,
                 checkpoint: str, out: str, inputs: Optional[Mapping[str, str]] = None) -> str:
    """result.json of a run from its train.log: the best validation of the first subset, the others at that step,
    and what made the run (``inputs``: ``tupe_glue.finetune.run_inputs``); returns the line that says it."""
    names = list(subsets)
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


def check_result(task: str, result: str) -> Optional[str]:
    """None when ``result.json`` holds a score for every valid subset of the task, else why not."""
    spec = get_task(task, custom=True)
    try:
        scores = read_result_json(result, spec.name, spec.metric)
    except (OSError, ValueError) as e:
        return f"{result}: {e}"
    lacking = [s for s in spec.valid_subsets if s not in scores]
    return f"{result}: no score for subset(s) {', '.join(lacking)}" if lacking else None
