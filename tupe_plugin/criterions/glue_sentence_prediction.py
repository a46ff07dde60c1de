"""``--criterion glue_sentence_prediction``: fairseq's ``sentence_prediction`` with the GLUE metrics unrounded.

fairseq's criterion rounds accuracy, MCC and Pearson to 0.1 in its logs; the TUPE paper prints two
decimals and some of its gaps are 0.02. This one logs, on the 0-100 scale fairseq uses and unrounded:

- ``accuracy`` (every classification task, training and validation),
- ``mcc`` (two classes, validation): Matthews correlation, 0 when a margin of the confusion matrix is empty,
- ``pearson`` (regression, validation): Pearson correlation of predictions and targets, NaN when one is constant.

``--metric-averaging dev_set`` (default) computes each over the whole dev set (GLUE's definition;
summed counts, so several processes give the same value as one); ``per_batch`` reproduces the official
TUPE release: the metric of each validation batch, then the plain mean over batches (accuracy included).
Definitions and the release's code: ``docs/glue_protocol.md`` §2.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.criterions.sentence_prediction import SentencePredictionConfig, SentencePredictionCriterion
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics

AVERAGING = ChoiceEnum(["dev_set", "per_batch"])
CONFUSION = ("_tp", "_fp", "_fn", "_tn")  # "_" keys are summed but not printed by fairseq
MOMENTS = ("_n", "_sx", "_sy", "_sxx", "_syy", "_sxy")  # sufficient statistics of Pearson's r


@dataclass
class GlueSentencePredictionConfig(SentencePredictionConfig):
    metric_averaging: AVERAGING = field(
        default="dev_set",
        metadata={"help": "dev_set: accuracy, MCC and Pearson over the whole dev set (GLUE's definition); "
                          "per_batch: per validation batch, then the plain mean over batches (official TUPE code)"},
    )


def mcc_from_counts(tp: float, fp: float, fn: float, tn: float) -> float:
    """Matthews correlation of a 2x2 confusion matrix; 0 when the denominator is 0 (sklearn, official code)."""
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return (tp * tn - fp * fn) / math.sqrt(denominator) if denominator else 0.0


def pearson_from_moments(n: float, sx: float, sy: float, sxx: float, syy: float, sxy: float) -> float:
    """Pearson's r from sums over the items (float64); NaN when either variable is constant."""
    if n < 2:
        return math.nan
    cov, var_x, var_y = sxy - sx * sy / n, sxx - sx * sx / n, syy - sy * sy / n
    return cov / math.sqrt(var_x * var_y) if var_x > 0 and var_y > 0 else math.nan


def _sum(logs: Sequence[Dict], key: str) -> float:
    return float(sum(log.get(key, 0) for log in logs))


def _log_from_sums(name: str, keys: Sequence[str], formula: Callable[..., float], logging_outputs, per_batch: bool) -> None:
    """Log ``100 * formula(*sums of keys)``: per batch (the release's mean of per-batch values), or from
    the sums over the whole dev set (fairseq sums the logged counts, the formula runs once at the end)."""
    sums = [_sum(logging_outputs, k) for k in keys]
    if per_batch:
        metrics.log_scalar(name, 100.0 * formula(*sums), 1)
        return
    for key, value in zip(keys, sums):
        metrics.log_scalar_sum(key, value)
    metrics.log_derived(name, lambda m: 100.0 * formula(*(m[k].sum for k in keys)))


@register_criterion("glue_sentence_prediction", dataclass=GlueSentencePredictionConfig)
class GlueSentencePredictionCriterion(SentencePredictionCriterion):
    def __init__(self, cfg: GlueSentencePredictionConfig, task):
        super().__init__(cfg, task)
        self.per_batch = cfg.metric_averaging == "per_batch"

    def forward(self, model, sample, reduce=True):
        """Loss as fairseq's criterion; logging outputs carry summable counts instead of rounded metrics."""
        assert self.classification_head_name in getattr(model, "classification_heads", {}), (
            f"the model has no classification head {self.classification_head_name!r}")
        logits, _ = model(**sample["net_input"], features_only=True,
                          classification_head_name=self.classification_head_name)
        targets = model.get_targets(sample, [logits]).view(-1)
        sample_size = targets.numel()
        log: Dict[str, float] = {"ntokens": sample["ntokens"], "nsentences": sample_size, "sample_size": sample_size}
        if self.regression_target:
            preds, targets = logits.view(-1).float(), targets.float()
            loss = F.mse_loss(preds, targets, reduction="sum")
            if not model.training:
                x, y = preds.detach().double(), targets.double()
                log.update(zip(MOMENTS, (float(sample_size), x.sum().item(), y.sum().item(), (x * x).sum().item(),
                                         (y * y).sum().item(), (x * y).sum().item())))
        else:
            loss = F.nll_loss(F.log_softmax(logits, dim=-1, dtype=torch.float32), targets, reduction="sum")
            preds = logits.argmax(dim=1)
            log["ncorrect"] = (preds == targets).sum().item()
            if not model.training and logits.size(-1) == 2:
                p, t = preds == 1, targets == 1
                log.update(zip(CONFUSION, ((p & t).sum().item(), (p & ~t).sum().item(), (~p & t).sum().item(),
                                           (~p & ~t).sum().item())))
        log["loss"] = loss.data
        if self.per_batch and not model.training:
            log["_per_batch"] = 1
        return loss, sample_size, log

    @staticmethod
    def reduce_metrics(logging_outputs: List[Dict]) -> None:
        """Loss as fairseq; accuracy, MCC and Pearson unrounded (per dev set or mean of per-batch values).

        fairseq calls this once per training update and once per validation batch (the outputs of all
        processes together), inside one aggregation per validation: a weighted ``log_scalar`` or summed
        counts give the whole dev set, a ``log_scalar`` of weight 1 the plain mean over batches.
        """
        loss_sum = _sum(logging_outputs, "loss")
        ntokens, nsentences = _sum(logging_outputs, "ntokens"), _sum(logging_outputs, "nsentences")
        sample_size = _sum(logging_outputs, "sample_size")
        metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size, round=3)
        if sample_size != ntokens:
            metrics.log_scalar("nll_loss", loss_sum / ntokens / math.log(2), ntokens, round=3)
        per_batch = _sum(logging_outputs, "_per_batch") > 0
        if any("ncorrect" in log for log in logging_outputs):
            accuracy = 100.0 * _sum(logging_outputs, "ncorrect") / nsentences
            metrics.log_scalar("accuracy", accuracy, 1 if per_batch else nsentences)
        for name, keys, formula in (("mcc", CONFUSION, mcc_from_counts), ("pearson", MOMENTS, pearson_from_moments)):
            if any(keys[0] in log for log in logging_outputs):
                _log_from_sums(name, keys, formula, logging_outputs, per_batch)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True  # every value is a count or a sum
