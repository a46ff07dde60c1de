"""Criteria of the plugin: ``glue_sentence_prediction`` (unrounded GLUE metrics)."""
from .glue_sentence_prediction import GlueSentencePredictionCriterion  # noqa: F401
