"""fairseq's side of the model: the encoder (``encoder.py``) and the sentence classification heads."""
