"""A fine-tuned model's predictions on its task's dev set: as written, and with the word order perturbed.

The dev text (``TASKS_DIR/TASK/<dev file>``) is encoded exactly as ``tupe_preprocess.glue_binarize`` encoded
the binaries the model was validated on (same tokenizer, same ``dict.txt``), as fairseq's
``sentence_prediction`` task builds its inputs (``<s> A </s>`` or ``<s> A </s> </s> B </s>``), and cut
after the model's positions (``--shorten-method truncate``). So the unperturbed predictions score what the
run's best validation scored.

Word order (the L&S paper's probing, contribution 3), with the shuffles of ``tupe_preprocess.probing_sets``
applied to every sentence of every dev example: ``shuffle_<n>`` permutes the words within consecutive
windows of n words, ``random`` permutes all of them, each re-drawn until it differs, each example with its
own ``random.Random(f"{seed}/{set}/{line}")``. A task whose labels include ``entailment`` and that has two
inputs (NLI format: MNLI, RTE, QNLI, ...) also gets ``role_swap``: the entailed hypotheses of the form
``DET NP VERB DET NP`` with subject and object swapped (gold: non-entailment), beside ``role_swap_original``,
the same items unswapped. A model that ignores word order (``nope``) predicts the same on every shuffle.
"""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence, Tuple

from tupe_common.io import write_json

ORDER_SEED = 1  # the perturbations are the same for every model: differences are the models'


def _dev_splits(task_name: str, tasks_dir: str):
    """[(subset, SplitData)] for every validation subset of the task (MNLI: valid and valid1)."""
    import os

    from tupe_glue.tasks import get_task
    from tupe_preprocess.glue_binarize import read_split

    task = get_task(task_name, tasks_dir)
    by_out = {spec.out: spec for spec in task.splits}
    return task, [(subset, read_split(task, by_out[subset], os.path.join(tasks_dir, task.name, by_out[subset].file)))
                  for subset in task.valid_subsets]


class Predictor:
    """A fine-tuned checkpoint on CPU or the first GPU; ``predict`` maps examples (tuples of sentences) to
    labels (classification) or scores (regression)."""

    def __init__(self, checkpoint: str, data_dir: str, spm_model: str):
        import torch

        from tupe_preprocess.glue_binarize import TextEncoder, spm_tokenizer
        from tupe_tools.analysis.attention_maps import load_hub

        self.torch = torch
        self.hub = load_hub(checkpoint, data_dir, head=True)
        if torch.cuda.is_available():
            self.hub.cuda()
        d = self.hub.task.source_dictionary
        self.encode = TextEncoder(spm_tokenizer({"spm_model": spm_model}), d.indices, d.unk(), d.eos())
        self.bos, self.eos, self.pad = d.bos(), d.eos(), d.pad()
        self.max_positions = self.hub.model.max_positions()
        self.regression = getattr(self.hub.task.cfg, "regression_target", False)

    def ids(self, sentences: Sequence[str]) -> List[int]:
        out = [self.bos, *self.encode(sentences[0]).tolist()]
        for s in sentences[1:]:
            out += [self.eos, *self.encode(s).tolist()]  # sentence_prediction's separator, then B </s>
        return out[: self.max_positions]

    def predict(self, examples: Sequence[Sequence[str]], batch_size: int = 64) -> Tuple[List, List[float]]:
        """(predictions, the log-probability of each predicted label; for regression the scores twice)."""
        from fairseq.data.data_utils import collate_tokens

        torch, labels, out, logp = self.torch, self.hub.task.label_dictionary, [], []
        with torch.no_grad():
            for start in range(0, len(examples), batch_size):
                batch = [torch.tensor(self.ids(e)) for e in examples[start:start + batch_size]]
                tokens = collate_tokens(batch, pad_idx=self.pad).to(next(self.hub.model.parameters()).device)
                scores = self.hub.predict("sentence_classification_head", tokens, return_logits=self.regression)
                if self.regression:
                    out += [float(x) for x in scores[:, 0]]
                    logp += [float(x) for x in scores[:, 0]]
                else:
                    best = scores.max(dim=-1)
                    out += [labels[int(p) + labels.nspecial] for p in best.indices]
                    logp += [float(x) for x in best.values]
        return out, logp


def write_predictions(model: Predictor, task_name: str, tasks_dir: str, out: str) -> None:
    """``predictions.json``: {"task", "metric", "subsets": {subset: {"gold", "pred", "logp"}}} (lists, one
    entry per dev example; ``logp``: the log-probability of the predicted label)."""
    task, splits = _dev_splits(task_name, tasks_dir)
    subsets = {}
    for subset, split in splits:
        examples = list(zip(*split.texts))
        pred, logp = model.predict(examples)
        subsets[subset] = {"gold": split.labels, "pred": pred, "logp": logp}
    write_json(out, {"task": task.name, "metric": task.metric, "subsets": subsets})


def perturbed_sets(examples: Sequence[Tuple[str, ...]], labels: Sequence[str], windows: Sequence[int],
                   nli: bool, seed: int = ORDER_SEED) -> Dict[str, Tuple[List[Tuple[str, ...]], List[str]]]:
    """{set name: (examples, gold labels)}: ``original``, ``shuffle_<n>``, ``random`` (every sentence of
    every example perturbed) and, for an NLI-format task, ``role_swap`` and ``role_swap_original``."""
    from tupe_preprocess.probing_sets import SWAP_LABEL, role_swap, shuffle_all, shuffle_windows

    def shuffled(name: str, fn) -> List[Tuple[str, ...]]:
        out = []
        for line, ex in enumerate(examples, 1):
            rng = random.Random(f"{seed}/{name}/{line}")
            out.append(tuple(fn(s, rng) for s in ex))
        return out

    sets = {"original": (list(examples), list(labels))}
    for n in windows:
        sets[f"shuffle_{n}"] = (shuffled(f"shuffle_{n}", lambda s, r, n=n: shuffle_windows(s, n, r)), list(labels))
    sets["random"] = (shuffled("random", shuffle_all), list(labels))
    if nli:
        swapped = [(ex, (ex[0], sw)) for ex, lab in zip(examples, labels)
                   if lab == "entailment" and (sw := role_swap(ex[1])) is not None]
        if swapped:
            sets["role_swap"] = ([s for _, s in swapped], [SWAP_LABEL] * len(swapped))
            sets["role_swap_original"] = ([o for o, _ in swapped], ["entailment"] * len(swapped))
    return sets


def write_order(model: Predictor, task_name: str, tasks_dir: str, windows: Sequence[int], out: str) -> None:
    """``order.json``: {"task", "metric", "subset", "sets": {name: {"changed", "gold", "pred", "logp"}}} on the task's
    first validation subset (the one that picks the best validation); ``changed``: examples whose text the
    perturbation altered."""
    task, splits = _dev_splits(task_name, tasks_dir)
    subset, split = splits[0]
    examples = list(zip(*split.texts))
    nli = task.n_inputs == 2 and task.classes is not None and "entailment" in task.classes
    result = {}
    sets = perturbed_sets(examples, split.labels, windows, nli)
    for name, (items, gold) in sets.items():
        base = sets["role_swap_original"][0] if name == "role_swap" else examples
        changed = sum(a != b for a, b in zip(items, base))
        pred, logp = model.predict(items)
        result[name] = {"changed": changed, "gold": gold, "pred": pred, "logp": logp}
    write_json(out, {"task": task.name, "metric": task.metric, "subset": subset, "sets": result})


def correct(gold: str, pred: str) -> bool:
    """A right prediction; for the role swap's ``non-entailment`` anything but ``entailment`` is right (HANS)."""
    from tupe_preprocess.probing_sets import SWAP_LABEL

    return pred != "entailment" if gold == SWAP_LABEL else pred == gold


def score(metric: str, gold: Sequence, pred: Sequence) -> Optional[float]:
    """The task's metric on the 0-100 scale (accuracy, MCC, Pearson), as fairseq logs it; None when undefined."""
    import numpy as np

    from tupe_study.stats import pearson

    if not len(gold):
        return None
    if metric == "accuracy":
        return 100.0 * sum(correct(g, p) for g, p in zip(gold, pred)) / len(gold)
    if metric == "mcc":  # binary: the Pearson correlation of the two 0/1 indicators ("1" is the positive class)
        r = pearson(np.array([g == "1" for g in gold], dtype=float), np.array([p == "1" for p in pred], dtype=float))
        return 0.0 if r != r else 100.0 * r  # constant predictions: 0, as fairseq logs it
    r = pearson(np.array(gold, dtype=float), np.array(pred, dtype=float))
    return None if r != r else 100.0 * r
