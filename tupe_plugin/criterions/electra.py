"""``--criterion electra``: ELECTRA's loss, mean MLM loss + ``disc_weight`` x mean BCE (Clark et al. 2020).

Per batch: the generator's cross-entropy summed over the M masked tokens and the discriminator's binary
cross-entropy summed over the N non-pad tokens; the loss is ``mlm_sum + w * bce_sum * M / N`` with sample
size M, so fairseq's division by the sample size gives ``mean MLM + w * mean BCE`` (the official
``run_pretraining.py``: ``mlm_weight 1 * mlm_loss + disc_weight 50 * disc_loss``; MC-BERT writes it the same
way). Logged per interval and per validation (losses in base 2, as fairseq's criteria):
``loss`` (= gen_loss + w x disc_loss), ``gen_loss``/``gen_ppl``, ``gen_acc`` (argmax of the generator at the
masked tokens), ``disc_loss``, ``disc_acc`` (all non-pad tokens), ``disc_precision``/``disc_recall`` (of
"replaced"), ``replace_rate`` (replaced / non-pad tokens), all in % except losses and perplexity.

The forward asks the device for nothing (no boolean-mask indexing, no ``.item()``): M is the length of the
batch's ``masked_positions`` (tasks/electra.py), the non-pad tokens are a weight, and the counts stay device
tensors in the logging output until :meth:`ElectraCriterion.reduce_metrics` reads them (in one copy) after
the update.
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
        target = sample["target"]  # (B, T) the original at the masked positions, pad elsewhere
        out = model(**sample["net_input"], targets=target, masked_positions=sample.get("masked_positions"))
        tokens = sample["net_input"]["src_tokens"].ne(self.padding_idx)  # (B, T) non-pad
        original = target.flatten().index_select(0, out.masked_positions)  # (M,) the rows of gen_logits
        # float32 log-softmax straight from the logits' dtype (no float32 copy of the (M, V) logits)
        gen_loss = F.nll_loss(F.log_softmax(out.gen_logits, dim=-1, dtype=torch.float32), original, reduction="sum")
        # summed over the non-pad tokens as a 0/1 weight over all (B, T) positions: the same sum as over
        # the selected tokens, without a selection whose size the host would wait for
        disc_loss = F.binary_cross_entropy_with_logits(out.disc_logits.float(), out.replaced.float(),
                                                       weight=tokens.float(), reduction="sum")
        n_masked, n_tokens = out.masked_positions.numel(), tokens.sum()  # M known on the host, N on the device
        loss = gen_loss + self.disc_weight * disc_loss * (n_masked / n_tokens)
        with torch.no_grad():
            predicted, replaced = out.disc_logits > 0, out.replaced  # (B, T)
            counts = (  # device tensors, read by reduce_metrics after the update (M: a host int)
                n_masked, n_tokens, (out.gen_logits.argmax(-1) == original).sum(),
                ((predicted == replaced) & tokens).sum(), (predicted & replaced & tokens).sum(),
                (predicted & tokens).sum(), (replaced & tokens).sum(),
            )
        logging_output = {
            "loss": loss.data, "gen_loss": gen_loss.data, "disc_loss": disc_loss.data,
            "ntokens": sample["ntokens"], "nsentences": target.size(0), "sample_size": n_masked,
            **dict(zip(COUNTS, counts)),
        }
        return loss, n_masked, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        # the sums, read from the device in one copy (fairseq calls this after the update is queued)
        sums = {key: sum(log.get(key, 0) for log in logging_outputs) for key in ("loss", "gen_loss", "disc_loss",
                                                                                  *COUNTS)}
        tensors = {key: v for key, v in sums.items() if torch.is_tensor(v)}
        if tensors:
            sums.update(zip(tensors, torch.stack([v.double().reshape(()) for v in tensors.values()]).tolist()))
        total = {key: float(v) for key, v in sums.items()}

        masked, tokens, ln2 = total["_masked"], total["_tokens"], math.log(2)
        metrics.log_scalar("loss", total["loss"] / (masked or 1) / ln2, masked, round=4)
        metrics.log_scalar("gen_loss", total["gen_loss"] / (masked or 1) / ln2, masked, round=4)
        metrics.log_derived("gen_ppl", lambda m: utils.get_perplexity(m["gen_loss"].avg))
        metrics.log_scalar("disc_loss", total["disc_loss"] / (tokens or 1) / ln2, tokens, round=4)
        for key in COUNTS:
            metrics.log_scalar_sum(key, total[key])
        metrics.log_derived("gen_acc", lambda m: round(_ratio(m, "_gen_correct", "_masked"), 2))
        metrics.log_derived("disc_acc", lambda m: round(_ratio(m, "_disc_correct", "_tokens"), 2))
        metrics.log_derived("disc_precision", lambda m: round(_ratio(m, "_tp", "_predicted"), 2))
        metrics.log_derived("disc_recall", lambda m: round(_ratio(m, "_tp", "_replaced"), 2))
        metrics.log_derived("replace_rate", lambda m: round(_ratio(m, "_replaced", "_tokens"), 3))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

