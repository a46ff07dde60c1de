"""Criteria of the plugin: ``glue_sentence_prediction`` (unrounded GLUE metrics), ``electra`` (ELECTRA's loss),
``masked_lm_4dp`` (fairseq's ``masked_lm``, its loss logged with 4 decimals: what ``pretrain.sh`` trains MLM with)."""
from .electra import ElectraCriterion  # noqa: F401
from .glue_sentence_prediction import GlueSentencePredictionCriterion  # noqa: F401
from .masked_lm_4dp import MaskedLm4dpLoss  # noqa: F401
