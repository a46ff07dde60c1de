"""Hugging Face bridge: ``tupe-export-hf`` (export.py) and the model/tokenizer code it writes (remote/).

Needs the ``hf`` extra (``pip install -e .[hf]``); the fairseq plugin itself never imports this package.
"""
