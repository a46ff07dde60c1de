"""A content-dependent variant's checkpoint through the real CLIs: a DeBERTa-style tiny model pre-trained with
fairseq-train, then fine-tuned by glue/finetune.sh (its flags read from the checkpoint), mapped by
tupe-pos-maps (refused with the reason) and listed by tupe-checkpoint-info.

The loss-falls run of every registered variant is ``test_fairseq_cli.py::test_pretrain_every_variant_loss_falls``
(parametrized over the registry, so it covers sinusoidal, nope, t5_rel, alibi, rope and deberta_rel too).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import PRETRAIN_ARGS, run
from test_glue_scripts import FINETUNE, TINY, glue_bin, sh  # noqa: F401  (glue_bin: module fixture)

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process


@pytest.fixture(scope="module")
def deberta_pretrained(lm_bin, tmp_path_factory) -> Path:
    save = tmp_path_factory.mktemp("deberta_pretrain")
    run(["fairseq-train", str(lm_bin), *PRETRAIN_ARGS, "--arch", "deberta_rel_tiny", "--max-update", "10",
         "--save-dir", str(save)])
    return save


def test_deberta_checkpoint_fine_tunes_through_finetune_sh(deberta_pretrained, glue_bin, tmp_path):  # noqa: F811
    ckpt = deberta_pretrained / "checkpoint_last.pt"
    info = json.loads(run(["tupe-checkpoint-info", str(ckpt)]).stdout)
    assert info["variant"] == "deberta_rel" and info["arch"] == "deberta_rel_tiny"
    runs = tmp_path / "runs"
    sh([FINETUNE, "RTE", "1e-3", "1"], **dict(TINY, EPOCHS="1", CHECKPOINT=str(ckpt), GLUE_BIN=str(glue_bin),
                                             RUNS=str(runs)))
    run_dir = runs / "RTE" / "lr1e-3_seed1"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["checkpoint_variant"] == "deberta_rel" and 0 <= result["best_valid"]["valid"] <= 100
    cmd = (run_dir / "command.txt").read_text()
    assert "--arch deberta_rel_tiny" in cmd and "--attention-block deberta" in cmd
    assert "positional variant: deberta_rel " in (run_dir / "train.log").read_text()


def test_pos_maps_refuses_content_dependent_variants_with_the_reason(deberta_pretrained, tmp_path):
    p = run(["tupe-pos-maps", str(deberta_pretrained / "checkpoint_last.pt"), "--out-dir", str(tmp_path / "maps")],
            check=False)
    assert p.returncode != 0
    assert "depends on content" in p.stderr and "tupe-locality" in p.stderr
    assert not (tmp_path / "maps" / "pos_logits.npy").exists()


def test_locality_reports_only_real_attention_maps_for_content_dependent_variants(
    deberta_pretrained, lm_bin, spm_dir, tmp_path
):
    ckpt = str(deberta_pretrained / "checkpoint_last.pt")
    alone = run(["tupe-locality", ckpt, "--length", "8"], check=False)
    assert alone.returncode != 0 and "--text" in alone.stderr.strip().splitlines()[-1]
    text, table = tmp_path / "text.txt", tmp_path / "ls.csv"
    text.write_text("the cat saw the river .\na dog found the bridge today .\n")
    p = run(["tupe-locality", ckpt, "--length", "8", "--text", str(text), "--spm-model", str(spm_dir / "spm.model"),
             "--data", str(lm_bin), "--out-csv", str(table)])
    assert "real attention maps only" in p.stderr
    rows = table.read_text().splitlines()[1:]
    assert rows and all(r.startswith("attention (2 sentences)") for r in rows)
    assert len(rows) == 2 * 4 + 1  # tiny: 2 layers x 4 heads, plus the mean


def test_from_pretrained_loads_a_deberta_checkpoint(deberta_pretrained, lm_bin):
    import torch

    from tupe_plugin import TupeRobertaModel

    hub = TupeRobertaModel.from_pretrained(str(deberta_pretrained), checkpoint_file="checkpoint_last.pt",
                                           data_name_or_path=str(lm_bin), bpe=None).eval()
    assert hub.model.positional_variant.name == "deberta_rel"
    features = hub.extract_features(torch.tensor([0, 5, 9, 17, 2]))
    assert features.shape == (1, 5, 64) and torch.isfinite(features).all()
