"""tupe_study.valid_se: the validation loss's own standard error (delta method over blocks) against plain references,
the paired difference's, the small-split problem line and the report's section (none without block data)."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from tupe_study import valid_se
from tupe_study.endpoints import Endpoint


def blocks(seed: int, n: int = 400, shift: float = 0.0, noise: float = 1.0):
    """n blocks of 5-25 masked tokens, ~3 bits each, with block-level variation (shared via ``seed``) and per-model
    noise."""
    rng = np.random.default_rng(seed)
    masked = rng.integers(5, 26, n).astype(float)
    level = rng.normal(3.0, 0.6, n)  # the block's difficulty: the same text for every model
    model = np.random.default_rng(1000 + int(shift * 100)).normal(0, noise * 0.2, n)
    return {"block": list(range(n)), "bits": ((level + shift + model) * masked).tolist(), "masked": masked.tolist()}


def bootstrap_se(records, draws: int = 4000) -> float:
    """The plain reference: resample blocks with replacement, the statistic (ratio, or difference of ratios on the
    same resampled blocks) recomputed, the standard deviation of the draws."""
    rng = np.random.default_rng(7)
    n = len(records[0]["bits"])
    idx = rng.integers(0, n, (draws, n))
    stats = []
    for r in records:
        x, m = np.asarray(r["bits"])[idx].sum(1), np.asarray(r["masked"])[idx].sum(1)
        stats.append(x / m)
    value = stats[0] if len(stats) == 1 else stats[0] - stats[1]
    return float(np.std(value, ddof=1))


def test_ratio_se_is_the_mean_s_standard_error_with_equal_blocks_and_matches_a_block_bootstrap():
    rng = np.random.default_rng(0)
    per_token = rng.normal(3, 0.5, 50)
    r, se = valid_se.ratio_se(per_token * 20, np.full(50, 20.0))  # every block 20 tokens: the plain mean's SE
    assert r == pytest.approx(per_token.mean()) and se == pytest.approx(per_token.std(ddof=1) / math.sqrt(50))
    a = blocks(1)
    r, se = valid_se.ratio_se(a["bits"], a["masked"])
    assert r == pytest.approx(sum(a["bits"]) / sum(a["masked"]))
    assert se == pytest.approx(bootstrap_se([a]), rel=0.06)
    assert math.isnan(valid_se.ratio_se([3.0], [1.0])[1])


def test_paired_se_uses_the_per_block_differences_and_matches_a_block_bootstrap():
    a, b = blocks(1), blocks(1, shift=0.05)  # the same blocks, B 0.05 bits worse, its own small noise
    d, se = valid_se.paired_se(a, b)
    assert d == pytest.approx(-0.05, abs=0.04)  # the models' own noise: about 0.014
    assert se == pytest.approx(bootstrap_se([a, b]), rel=0.06)
    assert se < valid_se.ratio_se(a["bits"], a["masked"])[1] / 2  # the blocks' shared difficulty cancels
    # equal masks: the SE of the ratio of the per-block differences
    diff = {"bits": (np.asarray(a["bits"]) - np.asarray(b["bits"])).tolist(), "masked": a["masked"]}
    assert se == pytest.approx(valid_se.ratio_se(diff["bits"], diff["masked"])[1], rel=1e-9)
    with pytest.raises(ValueError, match="other blocks"):
        valid_se.paired_se(a, dict(b, block=list(range(1, 401))))


def write_small_study(out, blocks_n: int, valid_steps: int) -> None:
    (out / "c4").mkdir(parents=True, exist_ok=True)
    (out / "settings.env").write_text(f"PRESET=cpu-small\nVALID_STEPS={valid_steps}\n")
    (out / "c4" / valid_se.VALID_BLOCKS).write_text(json.dumps(
        {"tokens_per_sample": 128, "blocks": blocks_n, "tokens": 82612, "masked_estimate": 12506}))


@pytest.mark.parametrize("blocks_n, steps, named", [(759, 0, True), (759, 20, False), (5060, 0, False)])
def test_a_small_split_validated_whole_is_a_problem_with_its_count_and_fix(tmp_path, blocks_n, steps, named):
    write_small_study(tmp_path, blocks_n, steps)
    line = valid_se.small_split_problem(str(tmp_path))
    if not named:
        assert line is None
        return
    assert "759 blocks of 128 tokens (82,612 tokens, about 12,506 masked), fewer than 5,000" in line
    assert "VALID_STEPS=0" in line and "--valid-fraction 0.15" in line
    assert valid_se.small_split_problem(str(tmp_path / "elsewhere")) is None  # nothing recorded: nothing said


def test_the_section_gives_each_model_s_se_and_the_declared_pairs_beside_the_margin(tmp_path):
    models = [SimpleNamespace(name=n, seeds=[SimpleNamespace(seed=s) for s in (1, 2)]) for n in ("a", "b")]
    assert valid_se.section_lines(str(tmp_path), models) == []  # no block data: nothing (old reports unchanged)
    for v, shift in (("a", 0.0), ("b", 0.05)):
        for s in (1, 2):
            path = tmp_path / "longer" / v / f"seed{s}.blocks.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(blocks(s, shift=shift)))
    text = "\n".join(valid_se.section_lines(str(tmp_path), models, [Endpoint("final_loss", "a", "b"),
                                                                      Endpoint("loss_auc", "a", "b")], 0.05))
    ses = [valid_se.ratio_se(blocks(s)["bits"], blocks(s)["masked"])[1] for s in (1, 2)]
    assert f"| a | 2 | {np.median(ses):.4f} |" in text
    pair = np.median([valid_se.paired_se(blocks(s), blocks(s, shift=0.05))[1] for s in (1, 2)])
    assert f"| a - b | 2 | {pair:.4f} | 0.05 |" in text and text.count("| a - b |") == 1  # final_loss only
    assert "400 blocks" in text and "cannot show it" in text
