"""BERT-Ad (TUPE Table 1, our reading): ``p U^Q`` added to q and ``p U^K`` to k in every layer, all four terms at
(4 dh)^-0.5; no bias."""
from references._shared import content
from tupe_core.base import QK

ENTERS, INPUT, SCALE = QK, None, 4  # four terms: 1/sqrt(4d)
BEYOND = ""  # a learned row per position
ARCH_ONLY = False

positional = None


def layer0_logits(model, attn, term, q, k, h):
    return content(q + term.payload.query[h].double(), k + term.payload.key[h].double(), SCALE)
