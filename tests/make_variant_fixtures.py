"""Write ``tests/data/variants_before_options.pt``: every registered variant as today's code builds, records,
exports and trains it, the guard of the refactor that gives each encoding its own options (the record becomes a
list of (encoding, options); docs/extending.md). Deterministic on CPU.

Per variant (tiny sizes, ``SIZES``): the state dict built from seed 0 (its names, shapes and values: the refactor
must build the same parameters), the checkpoint's variant record as written today (``VARIANT_KEY``), the keys the
HF export writes into config.json for the variant, the features of a padded batch, and the first 20 losses of a plain MLM loop
(Adam, dropout on, seed 0).

    python tests/make_variant_fixtures.py [OUT]     # default: tests/data/variants_before_options.pt
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DEFAULT_OUT = os.path.join(HERE, "data", "variants_before_options.pt")
SIZES = {"encoder_layers": 2, "encoder_embed_dim": 16, "encoder_attention_heads": 2, "encoder_ffn_embed_dim": 16}
MAX_POSITIONS, STEPS, MASK_RATE = 16, 20, 0.3


def padded_batch() -> torch.Tensor:
    """(3, 12) tokens, the last row right-padded from 8 (fairseq's padding index 1)."""
    from model_utils import tokens

    x = tokens(3, 12, seed=5)
    x[2, 8:] = 1
    return x


def training_losses(model, steps: int = STEPS) -> List[float]:
    """The first ``steps`` MLM losses of ``model``: Adam at 1e-3, dropout on, each step a fresh batch and mask
    drawn from seed 0's stream (the same stream for every variant); one thread, so the sums run in one order."""
    from model_utils import tokens

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _losses(model, steps, tokens)
    finally:
        torch.set_num_threads(threads)


def _losses(model, steps: int, tokens) -> List[float]:
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    for step in range(steps):
        x = tokens(4, 12, seed=100 + step)
        masked = torch.rand(x.shape) < MASK_RATE
        masked[:, 0] = False
        masked[0, 1] = True  # at least one
        inputs = x.masked_fill(masked, 3)  # 3: the test dictionary's last special, as <mask>
        logits, _ = model(inputs, masked_tokens=masked)
        loss = F.cross_entropy(logits.float(), x[masked])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def variant_fixture(name: str) -> Dict:
    from model_utils import build
    from tupe_core.facts import VARIANT_KEY

    torch.set_num_threads(1)  # as in the tests (tests/conftest.py): the features' sums in one order
    model = build(f"{name}_tiny", max_positions=MAX_POSITIONS, seed=0, **SIZES)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        features, _ = model(padded_batch(), features_only=True)
    # hf_config: the variant's keys of the HF export's config.json (one key per field before the JSON record; since,
    # positional_encodings): tests/test_variants_before_options.py decodes either
    hf_config = {"positional_encodings": model.positional_variant.entries()}
    return {"state": state, "record": state[VARIANT_KEY].clone(), "hf_config": hf_config,
            "features": features, "losses": training_losses(model)}


def main(argv: List[str]) -> int:
    from tupe_core.registry import VARIANTS

    out = argv[0] if argv else DEFAULT_OUT
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                            text=True).stdout.strip()
    fixture = {"commit": commit, "sizes": SIZES, "max_positions": MAX_POSITIONS, "tokens": padded_batch(),
               "variants": {name: variant_fixture(name) for name in VARIANTS}}
    torch.save(fixture, out + ".partial")
    os.replace(out + ".partial", out)
    print(f"wrote {out}: {len(fixture['variants'])} variants at {commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
