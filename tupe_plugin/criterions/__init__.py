"""Criteria of the plugin: ``glue_sentence_prediction`` (unrounded GLUE metrics), ``electra`` (ELECTRA's loss)."""
from .electra import ElectraCriterion  # noqa: F401
from .glue_sentence_prediction import GlueSentencePredictionCriterion  # noqa: F401
