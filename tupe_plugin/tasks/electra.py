"""``--task electra``: fairseq's masked_lm data with ELECTRA's masking, building the ELECTRA model.

The data, packing and masking are fairseq's ``masked_lm`` (seeded per epoch and sample, so a resumed run
masks as an uninterrupted one) with ELECTRA's defaults: 15% of the tokens selected, 85% of them replaced
by ``<mask>`` and 15% left unchanged, no random tokens (official ``pretrain/pretrain_helpers.py``);
``--leave-unmasked-prob 0`` masks every selected token (MC-BERT). The model is the one ``--arch`` and the
variant flags build (a ``tupe_roberta``) as the discriminator, wrapped with its generator
(models/electra.py); pair it with ``--criterion electra``.

Each batch also carries ``masked_positions``: the flat indices of the selected tokens, computed by the
collater in the data loader, on the CPU. With them the training step needs no size or value from the device
(boolean-mask indexing on a GPU makes the host wait until the device has computed the mask).
"""

from dataclasses import dataclass, field

import torch
from fairseq.data import BaseWrapperDataset
from fairseq.tasks import register_task
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

from ..models.electra import ElectraModel, find_masked_positions
from ..models.tupe_roberta import TupeRobertaModel


@dataclass
class ElectraConfig(MaskedLMConfig):
    leave_unmasked_prob: float = field(
        default=0.15,
        metadata={"help": "fraction of the selected tokens left unchanged, the rest become <mask> "
                          "(ELECTRA 0.15; 0: every selected token is masked, as MC-BERT)"},
    )
    random_token_prob: float = field(
        default=0.0, metadata={"help": "fraction of the selected tokens replaced by a random token (ELECTRA: 0)"}
    )
    generator_size_divisor: int = field(
        default=0,
        metadata={"help": "generator width, FFN and heads = the discriminator's / N, same depth "
                          "(0: ELECTRA's default for the arch's size: 3 at base, 4 at large/tiny)"},
    )


class MaskedPositionsDataset(BaseWrapperDataset):
    """masked_lm's batches with ``masked_positions`` added: (M,) the flat indices into the padded (B, T)
    target of its non-pad entries, row-major (:func:`find_masked_positions`), computed where the batch is
    made, on the CPU."""

    def __init__(self, dataset, padding_idx: int):
        super().__init__(dataset)
        self.padding_idx = padding_idx

    def collater(self, samples):
        batch = super().collater(samples)
        if "target" in batch:  # an empty list of samples collates to {}
            batch["masked_positions"] = find_masked_positions(batch["target"], self.padding_idx)
        return batch


@register_task("electra", dataclass=ElectraConfig)
class ElectraTask(MaskedLMTask):
    """Replaced-token detection pre-training (Clark et al., ICLR 2020) of any ``tupe_roberta`` arch."""

    cfg: ElectraConfig

    def build_model(self, cfg, from_checkpoint=False):
        discriminator = super().build_model(cfg, from_checkpoint)
        if not isinstance(discriminator, TupeRobertaModel):
            raise ValueError(f"--task electra trains the plugin's tupe_roberta archs (--arch tupe_r_base, "
                             f"rope_tiny, ...), not {type(discriminator).__name__}")
        return ElectraModel.from_discriminator(discriminator, self.cfg.generator_size_divisor)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        """masked_lm's dataset (same items, order and masking), its batches with ``masked_positions``."""
        super().load_dataset(split, epoch, combine, **kwargs)
        self.datasets[split] = MaskedPositionsDataset(self.datasets[split], self.source_dictionary.pad())

    def valid_step(self, sample, model, criterion):
        """Validation samples from the generator with a seed of its own (the run's seed and the batch's
        smallest sample id): the same numbers whatever training did before, e.g. after a resume."""
        devices = [torch.cuda.current_device()] if sample["net_input"]["src_tokens"].is_cuda else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.cfg.seed + int(sample["id"].min()))
            return super().valid_step(sample, model, criterion)
