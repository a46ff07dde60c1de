"""``tupe_roberta``: fairseq's RoBERTa with the position handling of every TUPE paper variant."""
from __future__ import annotations

import argparse
import logging

from fairseq.models import register_model
from fairseq.models.roberta import RobertaEncoder, RobertaModel
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from ..modules.encoder import TupeTransformerEncoder
from .variants import DISTANCE_PRIORS, VARIANTS, PositionalVariant

logger = logging.getLogger(__name__)

VARIANT_KEY = "encoder.sentence_encoder.positions.variant"


class VariantMismatchError(ValueError):
    """A checkpoint of one positional variant loaded into a model of another."""


@register_model("tupe_roberta")
class TupeRobertaModel(RobertaModel):
    """RoBERTa whose encoder takes the TUPE positional term; archs in ``architectures.py``."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        flag = dict(action=argparse.BooleanOptionalAction)
        parser.add_argument("--input-pe", **flag, help="add learned absolute PE to word embeddings (BERT)")
        parser.add_argument("--untied-pos", **flag, help="TUPE untied absolute term with U^Q/U^K")
        parser.add_argument("--untie-cls", **flag, help="reset [CLS] row/column to per-head thetas")
        parser.add_argument("--rel-pos", **flag, help="add the T5-bucketed relative bias (TUPE-R)")
        parser.add_argument("--pos-mixed-terms", **flag, help="BERT-Ad: keep word-position terms")
        parser.add_argument(
            "--distance-prior", choices=list(DISTANCE_PRIORS),
            help="L&S paper: add a fixed (gaussian) or learned per-layer (learned_gaussian) distance prior",
        )
        parser.add_argument("--rel-pos-bins", type=int, metavar="N", help="relative buckets (32)")
        parser.add_argument("--max-rel-pos", type=int, metavar="N", help="max relative distance (128)")
        parser.add_argument(
            "--attention-impl", choices=["sdpa", "reference"],
            help="scaled_dot_product_attention (default) or the plain reference path",
        )

    @classmethod
    def build_model(cls, args, task):
        from .architectures import tupe_roberta_base_architecture

        if OmegaConf.is_config(args):  # fairseq-hydra-train passes a DictConfig
            OmegaConf.set_struct(args, False)
        if safe_getattr(args, "max_positions") is None:
            args.max_positions = safe_getattr(args, "tokens_per_sample") or task.max_positions()
        tupe_roberta_base_architecture(args)
        args.max_source_positions = args.max_positions  # input PE (BERT-A/R) sized like the TUPE table
        variant = PositionalVariant.from_args(args)
        variant.validate()
        args.no_token_positional_embeddings = not variant.input_pe
        args.attn_scale_factor = variant.attn_scale_factor
        logger.info(f"positional variant: {variant.name} ({variant.flags()})")
        encoder = TupeRobertaEncoder(args, task.source_dictionary)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return cls(args, encoder)

    @property
    def variant(self) -> PositionalVariant:
        return PositionalVariant.from_tensor(self.encoder.sentence_encoder.positions.variant)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        key = (name + "." if name else "") + VARIANT_KEY
        if key not in state_dict:
            logger.warning(f"checkpoint does not record its positional variant; assuming {self.variant.name}")
            state_dict[key] = self.encoder.sentence_encoder.positions.variant.clone()
            return
        self._check_max_positions(state_dict, name)
        saved = PositionalVariant.from_tensor(state_dict[key])
        state_dict[key] = self.encoder.sentence_encoder.positions.variant.clone()  # current encoding
        if saved != self.variant:
            named = [n for n, v in VARIANTS.items() if v == saved]
            hint = f"--arch {named[0]}_base (or _large/_tiny) or " if named else ""
            raise VariantMismatchError(
                f"the checkpoint was trained as positional variant '{saved.name}' but this model is "
                f"'{self.variant.name}'. Use {hint}the flags: {saved.flags()}"
            )

    def _check_max_positions(self, state_dict, name):
        prefix = (name + "." if name else "") + "encoder.sentence_encoder."
        table = state_dict.get(prefix + "positions.pos.weight")
        saved = None if table is None else table.size(0) - 1
        pe = state_dict.get(prefix + "embed_positions.weight")
        if saved is None and pe is not None:
            saved = pe.size(0) - self.encoder.sentence_encoder.padding_idx - 1
        if saved is not None and saved != self.args.max_positions:
            raise ValueError(
                f"the checkpoint was trained with {saved} positions but this model has "
                f"{self.args.max_positions}; pass --max-positions {saved}"
            )

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".",
                        bpe="sentencepiece", **kwargs):
        """Load a checkpoint offline; pass ``sentencepiece_model=PATH`` for the default bpe."""
        from fairseq import hub_utils
        from fairseq.models.roberta import RobertaHubInterface

        x = hub_utils.from_pretrained(
            model_name_or_path, checkpoint_file, data_name_or_path, archive_map={},
            bpe=bpe, load_checkpoint_heads=True, **kwargs,
        )
        return RobertaHubInterface(x["args"], x["task"], x["models"][0])


class TupeRobertaEncoder(RobertaEncoder):
    """RoBERTa's encoder (LM head, embeddings) around the TUPE transformer."""

    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = TupeTransformerEncoder(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        # travels in every state dict, so a checkpoint says which variant it is
        encoder.positions.register_buffer("variant", PositionalVariant.from_args(args).to_tensor())
        return encoder
