"""``tupe_roberta``: fairseq's RoBERTa with the position handling of every TUPE paper variant."""
from __future__ import annotations

import argparse
import json
import logging
import sys

import torch
from fairseq.models import register_model
from fairseq.models.roberta import RobertaEncoder, RobertaModel
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from tupe_common.errors import UsageError
from tupe_core import attend
from tupe_core.attend import ATTENTION_PATHS, fused_kernels, triton_runs
from tupe_core.encoder_stack import DEFAULT_HEAD_STYLE, HEAD_STYLES
from tupe_core.facts import ATTENTION_FALLBACK_KEY, RECORD_BUFFER, VARIANT_KEY
from tupe_core.record import PositionalVariant
from tupe_core.registry import arch_only, flags, flags_of, from_args, from_record

from ..modules.classification_head import build_classification_head
from ..modules.encoder import TupeTransformerEncoder
from .batch_check import check_target_batch_size
from .checkpoint_checks import check_dictionary
from .electra_checkpoint import keep_discriminator

logger = logging.getLogger(__name__)


def vocab_identity(task) -> str:
    """The identity of the task's dictionary (``tupe_common.vocab.identity``): what fine-tuning, the analysis
    commands and the export compare a dict.txt with when the training data is not on the machine."""
    from tupe_common.vocab import dictionary_identity

    dictionary = task.source_dictionary
    return dictionary_identity(dictionary.symbols, dictionary.nspecial)


class VariantMismatchError(ValueError):
    """A checkpoint of one positional variant loaded into a model of another."""


def check_attention_path_runs(args) -> None:
    """Refuse ``--tupe-attention triton`` at model build, before any data is read or step taken, where our kernel
    cannot run on the device fairseq trains on (CUDA unless ``--cpu``): triton is not installed, or there is neither
    a CUDA device nor Triton's interpreter (``TRITON_INTERPRET=1``, as the tests run it). Else the first step fails
    inside the kernel's launch, as a traceback."""
    if args.tupe_attention != "triton":
        return
    device = torch.device("cuda" if torch.cuda.is_available() and not safe_getattr(args, "cpu", False) else "cpu")
    if triton_runs(device):
        return
    kernels = fused_kernels("triton_attention")
    why = ("triton is not installed: pip install triton" if kernels is None or kernels.triton is None else
           "no CUDA device (or --cpu), and not in Triton's interpreter: TRITON_INTERPRET=1 is not set")
    raise UsageError(f"--tupe-attention triton: our Triton kernel cannot run here ({why}); it runs on a CUDA device, "
                     "or on the CPU in Triton's interpreter (TRITON_INTERPRET=1, slow: for tests). Use "
                     "--tupe-attention auto (triton where it runs) or sdpa")


def _add_fallback_record(module, state_dict, prefix, local_metadata) -> None:
    """State-dict hook: where ``--tupe-attention auto`` switched a configuration of our Triton kernel to SDPA in
    this process, the state dict records which and why (``ATTENTION_FALLBACK_KEY``, JSON as uint8)."""
    record = attend.fallback_record()
    if record:
        state_dict[prefix + ATTENTION_FALLBACK_KEY] = torch.tensor(list(json.dumps(record).encode()), dtype=torch.uint8)


def agree_on_fallbacks(device: torch.device) -> None:
    """With several data-parallel processes: every configuration that one of them switched to SDPA is switched in
    all (a max over the ranks' ``attend.fallback_flags``); one process needs no collective."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return
    flags = attend.fallback_flags(device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    attend.take_fallback_flags(flags)


@register_model("tupe_roberta")
class TupeRobertaModel(RobertaModel):
    """RoBERTa whose encoder takes the TUPE positional term; archs in ``architectures.py``."""

    def __init__(self, args, encoder):
        super().__init__(args, encoder)
        self._register_state_dict_hook(_add_fallback_record)
        self._agreed_at = None  # the update at which the ranks last agreed on the attention path

    def set_num_updates(self, num_updates):
        """fairseq calls it on every rank before each step: at each new update, the ranks agree on the
        configurations ``auto`` runs on SDPA (``agree_on_fallbacks``), so that they all take the same path."""
        super().set_num_updates(num_updates)
        if num_updates != self._agreed_at:
            self._agreed_at = num_updates
            agree_on_fallbacks(next(self.parameters()).device)

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument(  # RoBERTa's --layernorm-embedding only sets it, and its archs default to it
            "--no-layernorm-embedding", dest="layernorm_embedding", action="store_false",
            help="no layernorm on the embeddings (a converted original trained without --embedding-normalize)")
        for flag in flags().values():  # the flags the encodings declare (tupe_core/registry.py)
            if flag.choices:
                parser.add_argument(flag.option, choices=list(flag.choices), help=flag.help)
            elif isinstance(flag.default, bool):
                parser.add_argument(flag.option, action=argparse.BooleanOptionalAction, help=flag.help)
            else:
                parser.add_argument(flag.option, type=type(flag.default), metavar="N", help=flag.help)
        parser.add_argument(
            "--tupe-attention", choices=list(ATTENTION_PATHS),
            help="attention path, same math: sdpa (F.scaled_dot_product_attention), explicit (matmul, softmax, "
                 "dropout; returns the weights), triton (our fused kernel for a learned bias: the bias and the "
                 "padding apart, dropout inside), flex (FlexAttention; no attention dropout), auto (default: triton "
                 "for a learned bias in fp16/bf16 on CUDA, explicit on CPU when training with attention dropout, "
                 "sdpa otherwise; docs/gpu.md)",
        )
        parser.add_argument(
            "--compile-layers", action="store_true",
            help="torch.compile every encoder layer (an ELECTRA generator's too) at the first training forward: "
                 "fewer, fused kernels, which matters most where small kernels wait on their launches (ELECTRA's "
                 "generator); the first steps compile; evaluation-only uses never compile (docs/gpu.md)",
        )
        parser.add_argument(
            "--classification-head-style", choices=list(HEAD_STYLES), default=DEFAULT_HEAD_STYLE,
            help="sentence head: release (dense, tanh, dropout, out_proj; default) or roberta (dropout first too)",
        )

    @classmethod
    def build_model(cls, args, task):
        from .architectures import tupe_roberta_base_architecture

        if OmegaConf.is_config(args):  # fairseq-hydra-train passes a DictConfig
            OmegaConf.set_struct(args, False)
            check_target_batch_size(args)
        if safe_getattr(args, "max_positions") is None:
            args.max_positions = safe_getattr(args, "tokens_per_sample") or task.max_positions()
        tupe_roberta_base_architecture(args)
        args.max_source_positions = args.max_positions  # input PE (BERT-A/R) sized like the TUPE table
        args.vocab_identity = vocab_identity(task)  # the checkpoint records its dictionary (tupe_common.vocab)
        variant = from_args(args)  # refused here, naming the flags, where they are not a variant
        check_attention_path_runs(args)
        args.no_token_positional_embeddings = True  # the variant's input encoding is the encoder's own
        logger.info(f"positional variant: {variant.name} ({flags_of(variant)})")
        encoder = TupeRobertaEncoder(args, task.source_dictionary)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return cls(args, encoder)

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        """fairseq's registration, with the head of ``--classification-head-style`` (modules/classification_head.py)."""
        super().register_classification_head(name, num_classes, inner_dim, **kwargs)
        self.classification_heads[name] = build_classification_head(self.args, num_classes, inner_dim)

    @property
    def variant_record(self) -> torch.Tensor:
        """The checkpoint record of this model's positional variant (the buffer at ``VARIANT_KEY``)."""
        return getattr(self.encoder.sentence_encoder.positions, RECORD_BUFFER)

    @property
    def positional_variant(self) -> PositionalVariant:
        """This model's positional variant, decoded from its record."""
        return from_record(self.variant_record)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        record = state_dict.pop((name + "." if name else "") + ATTENTION_FALLBACK_KEY, None)
        if record is not None:  # a run that resumes from it (or fine-tunes it) starts on the same path
            attend.take_fallback_record(json.loads(bytes(record.tolist()).decode()), "the checkpoint")
        self.keep_discriminator(state_dict, name)
        check_dictionary(state_dict, name, self.encoder.sentence_encoder.embed_tokens.num_embeddings, self.args)
        key = (name + "." if name else "") + VARIANT_KEY
        current = self.positional_variant
        if key not in state_dict:
            logger.warning(f"checkpoint does not record its positional variant; assuming {current.name}")
            state_dict[key] = self.variant_record.clone()
            return
        self._check_max_positions(state_dict, name)
        saved = from_record(state_dict[key])
        if saved != current:
            hint = f"{saved.arch_hint()} (or _large/_tiny)" if saved.name != "custom" else ""
            if not arch_only(saved):  # NoPE and an encoding without flags of its own are reached by their arch only
                hint += (" or " if hint else "") + f"the flags: {flags_of(saved)}"
            raise VariantMismatchError(
                f"the checkpoint was trained as positional variant '{saved.name}' but this model is "
                f"'{current.name}' (--arch {safe_getattr(self.args, 'arch', '?')}). Use {hint}"
            )
        state_dict[key] = self.variant_record.clone()  # current encoding (after the check: a refused dict is kept)

    def keep_discriminator(self, state_dict, name):
        """An ELECTRA checkpoint loads as its discriminator: generator dropped, MLM head filled (models/electra.py)."""
        keep_discriminator(state_dict, name, self.encoder.lm_head)

    def _check_max_positions(self, state_dict, name):
        """The positions the checkpoint's encodings were trained for (each encoding says, where it has a row per
        position: ``PositionalEncoding.trained_positions``) against this model's ``--max-positions``."""
        prefix = (name + "." if name else "") + "encoder.sentence_encoder."
        encoder = self.encoder.sentence_encoder
        state = {key[len(prefix):]: value for key, value in state_dict.items() if key.startswith(prefix)}
        found = [module.trained_positions(state) for module in (encoder.positions, encoder.embed_positions)
                 if module is not None]
        saved = next((n for n in found if n is not None), None)
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
        variant = from_args(args)
        encoder = TupeTransformerEncoder(args, dictionary, embed_tokens, variant)
        encoder.apply(init_bert_params)
        # travels in every state dict, so a checkpoint says which variant it is
        encoder.positions.register_buffer(RECORD_BUFFER, variant.to_tensor())
        return encoder
