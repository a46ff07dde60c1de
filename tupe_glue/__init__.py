"""GLUE fine-tuning with the TUPE paper's protocol, and the results table (``python -m tupe_glue.collect``)."""
