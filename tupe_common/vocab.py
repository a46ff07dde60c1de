"""Which sentencepiece model a fairseq ``dict.txt`` belongs to: the check every command that combines the two runs.

``dict.txt`` lists the model's pieces in sentencepiece id order, control and unknown pieces left out (fairseq's
four specials stand in for them), then at most fairseq's ``madeupwordNNNN`` padding (``tupe_preprocess.spm_dict`` writes
it so). A model and a dictionary of the same size but from another training give the same shapes and wrong ids,
so the check compares the pieces themselves. sentencepiece is imported only when a model is read.
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from tupe_common.io import need, utf8_lines


def load_spm(model_path: str) -> Any:
    """The sentencepiece model at ``model_path``; a ValueError names a file that is not one (a text file given as
    spm.model, a truncated copy), an OSError one that is missing or a folder."""
    import sentencepiece as spm

    need(model_path)
    try:
        return spm.SentencePieceProcessor(model_file=model_path)
    except (RuntimeError, OSError) as e:
        raise ValueError(f"{model_path}: not a sentencepiece model ({str(e).strip().splitlines()[0]}); pass the "
                         "spm.model of preprocess step 2") from None


def is_padding(symbol: str) -> bool:
    """fairseq's ``madeupwordNNNN`` padding symbol, which may follow a dictionary's real symbols."""
    return symbol.startswith("madeupword") and symbol[len("madeupword"):].isdigit()


def dict_pieces(sp: Any) -> List[str]:
    """Pieces that go into dict.txt, in sentencepiece id order."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def dict_symbols(dict_path: str) -> List[str]:
    """The symbols of fairseq's ``dict.txt`` (``SYMBOL COUNT [#fairseq:overwrite]`` lines), in order; a ValueError
    names a line of another form."""
    symbols = []
    for number, line in utf8_lines(dict_path):
        text = line.rstrip("\n")
        parts = text.rsplit(" ", 2 if text.endswith("#fairseq:overwrite") else 1)
        if len(parts) < 2:
            raise ValueError(f"{dict_path}: line {number} is {text!r}, not 'SYMBOL COUNT': not a fairseq dict.txt")
        symbols.append(parts[0])
    return symbols


def check_dict(sp: Any, symbols: Sequence[str], dict_path: str, model_path: str) -> None:
    """Refuse a dict.txt that does not list ``sp``'s pieces in order (``symbols``: its lines' symbols, fairseq's
    four specials not included); after them only fairseq's ``madeupwordNNNN`` padding may follow."""
    expected = dict_pieces(sp)
    head, tail = list(symbols[:len(expected)]), symbols[len(expected):]
    extra = [s for s in tail if not is_padding(s)]
    if head == expected and not extra:
        return
    bad = next((i for i, (a, b) in enumerate(zip(head, expected)) if a != b), min(len(head), len(expected)))
    if bad < len(expected) and bad < len(head):
        what = f"line {bad + 1} is {head[bad]!r} where the model has {expected[bad]!r}"
    elif bad < len(expected):
        what = f"it ends at line {len(head)}, the model has {len(expected)} pieces"
    else:
        what = f"line {len(expected) + tail.index(extra[0]) + 1} is {extra[0]!r}, after the model's {len(expected)} pieces"
    raise ValueError(f"{dict_path} does not belong to the sentencepiece model {model_path} ({what}): use the "
                     "dict.txt written for this model (preprocess step 2, tupe_preprocess.spm_dict.write_fairseq_dict)")


def check_same_dict(trained: str, given: str, what: str) -> None:
    """``given`` lists the symbols of ``trained`` (the dict.txt a checkpoint was trained with) in the same order
    (fairseq's ``madeupword`` padding aside), else a ValueError naming both and the first line that differs: a
    dictionary of the same size from another sentencepiece model passes every shape check and gives wrong ids."""
    a, b = real_symbols(dict_symbols(trained)), real_symbols(dict_symbols(given))
    if a == b:
        return
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    where = (f"line {i + 1} is {b[i]!r} where it has {a[i]!r}" if i < min(len(a), len(b))
             else f"{len(b)} symbols where it has {len(a)}")
    raise ValueError(f"{given} is not the dictionary {what} was trained with ({trained}: {where}); binarize with "
                     "that dict.txt and its spm.model")


def real_symbols(symbols: Sequence[str]) -> List[str]:
    """``symbols`` without fairseq's ``madeupwordNNNN`` padding at the end."""
    out = list(symbols)
    while out and is_padding(out[-1]):
        out.pop()
    return out


def identity(symbols: Sequence[str]) -> str:
    """The vocabulary's identity: ``vocab-`` and 16 hex digits of the SHA-256 of its symbols in id order (fairseq's
    specials and padding not counted). A dict.txt and the sentencepiece model it was written for have the same one
    (:func:`dict_identity`, and ``identity(dict_pieces(sp))``); a checkpoint records the identity of its training dictionary."""
    import hashlib

    return "vocab-" + hashlib.sha256("\n".join(real_symbols(symbols)).encode("utf-8")).hexdigest()[:16]


def dict_identity(dict_path: str) -> str:
    """:func:`identity` of a fairseq ``dict.txt``."""
    return identity(dict_symbols(dict_path))


def dictionary_identity(symbols: Sequence[str], nspecial: int) -> str:
    """:func:`identity` of a loaded fairseq dictionary's ``symbols``: its ``nspecial`` specials first and the
    ``<mask>`` a masked-LM or sentence-prediction task adds last are not the dict.txt's."""
    words = list(symbols[nspecial:])
    if words and words[-1] == "<mask>":
        words.pop()
    return identity(words)


def check_identity(recorded: str, dict_path: str, what: str) -> str:
    """``dict_path`` is the dictionary whose identity ``what`` (a checkpoint) recorded, else a ValueError naming
    both: the check that needs neither the training data nor the sentencepiece model on this machine. Returns the
    identity."""
    found = dict_identity(dict_path)
    if found != recorded:
        raise ValueError(f"{dict_path} is not the dictionary {what} was trained with (its vocabulary {found}, the "
                         f"checkpoint's {recorded}); binarize with the dict.txt and spm.model of its pre-training")
    return found


def check_pair(model_path: str, dict_path: str) -> None:
    """The sentencepiece model and the dict.txt belong together (:func:`check_dict`), else a ValueError naming both
    (an OSError for a path that is missing or of the wrong kind)."""
    check_dict(load_spm(model_path), dict_symbols(dict_path), dict_path, model_path)


def dict_in(data: str) -> Optional[str]:
    """The dict.txt of a fairseq data folder: DATA/dict.txt (pre-training) or DATA/input0/dict.txt (a GLUE task);
    None when it has neither."""
    return next((path for path in (os.path.join(data, "dict.txt"), os.path.join(data, "input0", "dict.txt"))
                 if os.path.isfile(path)), None)


def data_dict(data: str) -> str:
    """:func:`dict_in`, or the OS error naming DATA/dict.txt when the folder has none."""
    return dict_in(data) or need(os.path.join(data, "dict.txt"))
