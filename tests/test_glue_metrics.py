"""``--criterion glue_sentence_prediction``: unrounded accuracy, MCC and Pearson, per dev set or per batch.

The criterion runs as fairseq runs it in a validation (forward per batch, ``reduce_metrics`` per batch
inside one ``metrics.aggregate``) on a stand-in model that returns fixed logits, so every value can be
computed by hand: the references below are plain float64 loops over the items (docs/glue_protocol.md §2).
"""
import math
import random
from typing import List, Tuple

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.logging import metrics

from tupe_plugin.criterions.glue_sentence_prediction import (
    GlueSentencePredictionConfig, GlueSentencePredictionCriterion, mcc_from_counts, pearson_from_moments)


class FixedLogits(torch.nn.Module):
    """A model whose sentence head returns the logits stored in the batch (no parameters to learn)."""

    classification_heads = {"sentence_classification_head": None}

    def forward(self, logits, features_only, classification_head_name):
        return logits, None

    def get_targets(self, sample, net_output):
        return sample["target"]


class LabelTask:
    label_dictionary = Dictionary()


def criterion(averaging: str, regression: bool) -> GlueSentencePredictionCriterion:
    cfg = GlueSentencePredictionConfig(regression_target=regression, metric_averaging=averaging)
    return GlueSentencePredictionCriterion(cfg, LabelTask())


def validate(crit, batches) -> dict:
    """One validation as fairseq's trainer does it: eval mode, reduce_metrics once per batch."""
    model = FixedLogits().eval()
    with metrics.aggregate(new_root=True) as agg:
        for logits, target in batches:
            sample = {"net_input": {"logits": logits}, "target": target, "ntokens": 10 * len(target)}
            _, _, log = crit(model, sample)
            crit.reduce_metrics([log])
        return agg.get_smoothed_values()


def hand_mcc(pairs: List[Tuple[int, int]]) -> float:
    tp = sum(1 for p, t in pairs if p == 1 and t == 1)
    tn = sum(1 for p, t in pairs if p == 0 and t == 0)
    fp = sum(1 for p, t in pairs if p == 1 and t == 0)
    fn = sum(1 for p, t in pairs if p == 0 and t == 1)
    d = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if d == 0 else (tp * tn - fp * fn) / d


def hand_pearson(xs: List[float], ys: List[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return cov / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))


def classification_batches(seed: int, sizes=(7, 5, 9, 2)):
    rng = random.Random(seed)
    batches, per_batch = [], []
    for n in sizes:
        preds = [rng.randint(0, 1) for _ in range(n)]
        targets = [p if rng.random() < 0.7 else 1 - p for p in preds]
        logits = torch.tensor([[0.0, 1.0] if p else [1.0, 0.0] for p in preds])
        batches.append((logits, torch.tensor(targets)))
        per_batch.append(list(zip(preds, targets)))
    return batches, per_batch


def test_counts_formulas_by_hand():
    assert mcc_from_counts(6, 2, 1, 3) == pytest.approx((6 * 3 - 2 * 1) / math.sqrt(8 * 7 * 5 * 4), abs=1e-15)
    assert mcc_from_counts(5, 0, 0, 0) == 0.0  # an empty margin: 0, as sklearn and the official code
    xs, ys = [0.1, 0.4, 0.35, 0.8], [0.0, 0.5, 0.3, 0.9]
    moments = (4, sum(xs), sum(ys), sum(x * x for x in xs), sum(y * y for y in ys), sum(x * y for x, y in zip(xs, ys)))
    assert pearson_from_moments(*moments) == pytest.approx(hand_pearson(xs, ys), abs=1e-12)
    assert math.isnan(pearson_from_moments(3, 3.0, 1.0, 3.0, 0.5, 1.0))  # x constant


def test_dev_set_accuracy_and_mcc_are_over_all_items_unrounded():
    batches, per_batch = classification_batches(seed=3)
    pairs = [pt for b in per_batch for pt in b]
    stats = validate(criterion("dev_set", regression=False), batches)
    assert stats["accuracy"] == pytest.approx(100 * sum(p == t for p, t in pairs) / len(pairs), abs=1e-9)
    assert stats["mcc"] == pytest.approx(100 * hand_mcc(pairs), abs=1e-9)
    assert stats["mcc"] != round(stats["mcc"], 1) and stats["accuracy"] != round(stats["accuracy"], 1)
    assert not any(k.startswith("_") for k in stats)  # the counts are not printed


def test_per_batch_option_is_the_plain_mean_of_batch_metrics():
    batches, per_batch = classification_batches(seed=3)
    stats = validate(criterion("per_batch", regression=False), batches)
    want_mcc = sum(hand_mcc(b) for b in per_batch) / len(per_batch)
    want_acc = sum(sum(p == t for p, t in b) / len(b) for b in per_batch) / len(per_batch)
    assert stats["mcc"] == pytest.approx(100 * want_mcc, abs=1e-9)
    assert stats["accuracy"] == pytest.approx(100 * want_acc, abs=1e-9)
    dev_set = validate(criterion("dev_set", regression=False), batches)
    assert abs(stats["mcc"] - dev_set["mcc"]) > 0.5  # the two definitions differ on these batches


def test_pearson_dev_set_and_per_batch():
    rng = random.Random(5)
    batches, xs, ys = [], [], []
    for n in (6, 4, 8):
        y = [rng.uniform(0, 1) for _ in range(n)]
        x = [v + rng.gauss(0, 0.3) for v in y]
        batches.append((torch.tensor(x).view(-1, 1), torch.tensor(y)))
        xs.append([float(torch.tensor(v)) for v in x])  # the float32 values the model returns
        ys.append([float(torch.tensor(v)) for v in y])
    flat_x, flat_y = [v for b in xs for v in b], [v for b in ys for v in b]
    stats = validate(criterion("dev_set", regression=True), batches)
    assert stats["pearson"] == pytest.approx(100 * hand_pearson(flat_x, flat_y), abs=1e-9)
    assert "accuracy" not in stats and "mcc" not in stats
    per_batch = validate(criterion("per_batch", regression=True), batches)
    want = sum(hand_pearson(x, y) for x, y in zip(xs, ys)) / len(xs)
    assert per_batch["pearson"] == pytest.approx(100 * want, abs=1e-9)


def test_three_classes_log_accuracy_only_and_training_logs_no_mcc():
    logits = torch.tensor([[2.0, 0.0, 1.0], [0.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
    stats = validate(criterion("dev_set", regression=False), [(logits, torch.tensor([0, 2, 2]))])
    assert stats["accuracy"] == pytest.approx(200 / 3, abs=1e-9) and "mcc" not in stats
    crit, model = criterion("dev_set", regression=False), FixedLogits().train()
    batches, _ = classification_batches(seed=1, sizes=(4,))
    _, _, log = crit(model, {"net_input": {"logits": batches[0][0]}, "target": batches[0][1], "ntokens": 40})
    assert "_tp" not in log and "ncorrect" in log
