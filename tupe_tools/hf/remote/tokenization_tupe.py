"""Tokenizer of a TUPE-family model exported by ``tupe-export-hf``: the pre-training sentencepiece
model read through fairseq's ``dict.txt``, so ids equal tupe_plugin's ``tupe_preprocess.glue_binarize``.

Written by the tupe_plugin project (not copied from transformers). fairseq's dictionary starts with
``<s>=0 <pad>=1 </s>=2 <unk>=3``, then the ``dict.txt`` pieces in order (for a sentencepiece model with
default special ids that is ``spm id + 1``), then ``<mask>`` (added by fairseq's masked_lm and
sentence_prediction tasks). Inputs are built as fairseq's RoBERTa GLUE recipe
(``--init-token 0 --separator-token 2``): ``<s> A </s>`` and ``<s> A </s> </s> B </s>``.
"""
from __future__ import annotations

import os
import shutil
from typing import Dict, List, Optional, Tuple

import sentencepiece as spm
from transformers import PreTrainedTokenizer

VOCAB_FILES_NAMES = {"vocab_file": "spm.model", "dict_file": "dict.txt"}
FAIRSEQ_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def read_fairseq_dict(path: str) -> List[str]:
    """The symbols of fairseq's ``dict.txt`` (``SYMBOL COUNT [#fairseq:overwrite]`` lines), in order."""
    symbols = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\n").rsplit(" ", 2 if line.rstrip().endswith("#fairseq:overwrite") else 1)
            if len(parts) < 2:
                raise ValueError(f"{path}:{lineno}: expected 'SYMBOL COUNT', got {line!r}")
            symbols.append(parts[0])
    return symbols


class TupeTokenizer(PreTrainedTokenizer):
    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file: str, dict_file: str, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                 cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", **kwargs):
        self.vocab_file, self.dict_file = vocab_file, dict_file
        self.sp = spm.SentencePieceProcessor(model_file=vocab_file)
        symbols = FAIRSEQ_SPECIALS + read_fairseq_dict(dict_file)
        if mask_token not in symbols:
            symbols.append(mask_token)
        self.symbols = symbols
        self.indices: Dict[str, int] = {}
        for i, s in enumerate(symbols):
            self.indices.setdefault(s, i)  # fairseq keeps the first index of a repeated symbol
        super().__init__(bos_token=bos_token, eos_token=eos_token, sep_token=sep_token, cls_token=cls_token,
                         unk_token=unk_token, pad_token=pad_token, mask_token=mask_token, **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def get_vocab(self) -> Dict[str, int]:
        vocab = dict(self.indices)
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text: str, **kwargs) -> List[str]:
        # ids then pieces (not out_type=str), as glue_binarize: an unknown piece becomes "<unk>"
        return [self.sp.id_to_piece(i) for i in self.sp.encode(text)]

    def _convert_token_to_id(self, token: str) -> int:
        return self.indices.get(token, self.indices["<unk>"])

    def _convert_id_to_token(self, index: int) -> str:
        return self.symbols[index] if 0 <= index < len(self.symbols) else "<unk>"

    def convert_tokens_to_string(self, tokens: List[str]) -> str:
        return self.sp.decode_pieces([t for t in tokens if t not in self.all_special_tokens])

    def build_inputs_with_special_tokens(self, token_ids_0: List[int], token_ids_1: Optional[List[int]] = None) -> List[int]:
        cls, sep = [self.cls_token_id], [self.sep_token_id]
        if token_ids_1 is None:
            return cls + token_ids_0 + sep
        return cls + token_ids_0 + sep + sep + token_ids_1 + sep

    def get_special_tokens_mask(self, token_ids_0: List[int], token_ids_1: Optional[List[int]] = None,
                                already_has_special_tokens: bool = False) -> List[int]:
        if already_has_special_tokens:
            special = set(self.all_special_ids)
            return [int(t in special) for t in token_ids_0]
        if token_ids_1 is None:
            return [1] + [0] * len(token_ids_0) + [1]
        return [1] + [0] * len(token_ids_0) + [1, 1] + [0] * len(token_ids_1) + [1]

    def create_token_type_ids_from_sequences(self, token_ids_0: List[int], token_ids_1: Optional[List[int]] = None) -> List[int]:
        return [0] * len(self.build_inputs_with_special_tokens(token_ids_0, token_ids_1))  # no segment embeddings

    def save_vocabulary(self, save_directory: str, filename_prefix: Optional[str] = None) -> Tuple[str, str]:
        out = []
        for src, name in ((self.vocab_file, "spm.model"), (self.dict_file, "dict.txt")):
            dst = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + name)
            if os.path.abspath(src) != os.path.abspath(dst):
                shutil.copyfile(src, dst)
            out.append(dst)
        return tuple(out)
