"""``--criterion electra``: ELECTRA's loss, mean MLM loss + ``disc_weight`` x mean BCE (Clark et al. 2020).

Per batch: the generator's cross-entropy summed over the M masked tokens and the discriminator's binary
cross-entropy summed over the N non-pad tokens; the loss is ``mlm_sum + w * bce_sum * M / N`` with sample
size M, so fairseq's division by the sample size gives ``mean MLM + w * mean BCE`` (the official
``run_pretraining.py``: ``mlm_weight 1 * mlm_loss + disc_weight 50 * disc_loss``; MC-BERT writes it the same
way). Logged per interval and per validation (losses in base 2, as fairseq's criteria):
``loss`` (= gen_loss + w x disc_loss), ``gen_loss``/``gen_ppl``, ``gen_acc`` (argmax of the generator at the
masked tokens), ``disc_loss``, ``disc_acc`` (all non-pad tokens), ``disc_precision``/``disc_recall`` (of
"replaced"), ``replace_rate`` (replaced / non-pad tokens), all in % except losses and perplexity.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

COUNTS = ("_masked", "_tokens", "_gen_correct", "_disc_correct", "_tp", "_predicted", "_replaced")


@dataclass
class ElectraCriterionConfig(FairseqDataclass):
    disc_weight: float = field(default=50.0, metadata={"help": "weight of the discriminator's mean BCE (ELECTRA: 50)"})


def _ratio(meters, num: str, den: str) -> float:
    d = meters[den].sum
    return 100.0 * meters[num].sum / d if d else math.nan


@register_criterion("electra", dataclass=ElectraCriterionConfig)
class ElectraCriterion(FairseqCriterion):
    def __init__(self, task, disc_weight: float = 50.0):
        super().__init__(task)
        self.disc_weight = disc_weight

    def forward(self, model, sample, reduce=True):
        out = model(**sample["net_input"], targets=sample["target"])
        tokens = sample["net_input"]["src_tokens"].ne(self.padding_idx)  # (B, T) non-pad
        original = sample["target"][out.masked]  # (M,)
        gen_loss = F.cross_entropy(out.gen_logits.float(), original, reduction="sum")
        labels = out.replaced[tokens].float()
        disc_logits = out.disc_logits[tokens].float()
        disc_loss = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction="sum")
        with torch.no_grad():
            predicted = disc_logits > 0
            replaced = labels > 0.5
            # every count in one device-to-host copy (one sync per step on a GPU, not seven)
            counts = torch.stack([
                out.masked.sum(), tokens.sum(), (out.gen_logits.argmax(-1) == original).sum(),
                (predicted == replaced).sum(), (predicted & replaced).sum(), predicted.sum(), replaced.sum(),
            ]).tolist()
        n_masked, n_tokens = counts[0], counts[1]
        loss = gen_loss + self.disc_weight * disc_loss * (n_masked / n_tokens)
        logging_output = {
            "loss": loss.data, "gen_loss": gen_loss.data, "disc_loss": disc_loss.data,
            "ntokens": sample["ntokens"], "nsentences": sample["target"].size(0), "sample_size": n_masked,
            **dict(zip(COUNTS, counts)),
        }
        return loss, n_masked, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(float(log.get(key, 0)) for log in logging_outputs)

        masked, tokens, ln2 = total("_masked"), total("_tokens"), math.log(2)
        metrics.log_scalar("loss", total("loss") / (masked or 1) / ln2, masked, round=3)
        metrics.log_scalar("gen_loss", total("gen_loss") / (masked or 1) / ln2, masked, round=3)
        metrics.log_derived("gen_ppl", lambda m: utils.get_perplexity(m["gen_loss"].avg))
        metrics.log_scalar("disc_loss", total("disc_loss") / (tokens or 1) / ln2, tokens, round=4)
        for key in COUNTS:
            metrics.log_scalar_sum(key, total(key))
        metrics.log_derived("gen_acc", lambda m: round(_ratio(m, "_gen_correct", "_masked"), 2))
        metrics.log_derived("disc_acc", lambda m: round(_ratio(m, "_disc_correct", "_tokens"), 2))
        metrics.log_derived("disc_precision", lambda m: round(_ratio(m, "_tp", "_predicted"), 2))
        metrics.log_derived("disc_recall", lambda m: round(_ratio(m, "_tp", "_replaced"), 2))
        metrics.log_derived("replace_rate", lambda m: round(_ratio(m, "_replaced", "_tokens"), 3))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

