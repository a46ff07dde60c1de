"""``--criterion masked_lm_4dp``: fairseq's ``masked_lm`` criterion, its loss logged with 4 decimals, not 3.

The study compares validation losses of models whose per-seed differences can be a few thousandths of a bit;
fairseq's criterion rounds its logged ``loss`` to 3 decimals (``round=3`` in
``fairseq/criterions/masked_lm.py``), so such differences would sit at the logging step. The loss, its
gradient and everything else are fairseq's own: only the logged value's rounding changes.
"""
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss

LOG_DECIMALS = 4


@register_criterion("masked_lm_4dp", dataclass=MaskedLmConfig)
class MaskedLm4dpLoss(MaskedLmLoss):
    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        MaskedLmLoss.reduce_metrics(logging_outputs)
        # fairseq fixes a meter's rounding when the meter is made (log_scalar's round=3 above); every logging
        # context that now holds the loss meter gets 4 decimals instead
        for aggregator in metrics.get_active_aggregators():
            if "loss" in aggregator:
                aggregator["loss"].round = LOG_DECIMALS
