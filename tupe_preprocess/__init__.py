"""Data pipelines: C4 -> sentencepiece -> fairseq binaries, GLUE TSV -> binaries, probing sets."""
