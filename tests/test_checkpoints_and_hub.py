"""Safe checkpoint loading (torch weights_only + the plugin's allowlist), the hub interface, the warmup-ratio LR
schedule, and checkpoints of every variant written by an older layout of the code loading with their features."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, run
from model_utils import build

# the 17 variants registered when tests/data/checkpoints_before_encodings.pt was written
VARIANTS_BEFORE = ("bert_a", "bert_r", "tupe_a", "tupe_r", "tupe_a_tie_cls", "bert_ad", "gaussian_prior",
                   "learned_gaussian", "sinusoidal", "nope", "t5_rel", "alibi", "rope", "deberta_rel", "pam_concat",
                   "pam_sequential", "pam_window")

LOAD = "import fairseq.checkpoint_utils as c; s = c.load_checkpoint_to_cpu({path!r}); print('LOADED', sorted(s))"


class Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_fairseq_checkpoint_needs_the_plugin_allowlist(pretrained, starts_process):
    path = str(pretrained / "checkpoint_last.pt")
    without = run([sys.executable, "-c", LOAD.format(path=path)], check=False)
    assert without.returncode != 0 and "weights_only" in without.stderr  # torch refuses alone
    with_plugin = run([sys.executable, "-c", "import tupe_plugin; " + LOAD.format(path=path)])
    assert "LOADED" in with_plugin.stdout and "'model'" in with_plugin.stdout


def test_a_pickle_with_another_global_is_refused_and_never_runs(tmp_path, pretrained, cls_bin, starts_process):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    state = torch.load(pretrained / "checkpoint_last.pt", weights_only=False)
    state["extra_state"]["payload"] = Evil(marker)
    torch.save(state, evil)
    p = run([sys.executable, "-c", "import tupe_plugin; " + LOAD.format(path=str(evil))], check=False)
    assert p.returncode != 0 and "system" in p.stderr and "weights_only" in p.stderr.lower().replace(" ", "_")
    p = run(["fairseq-train", str(cls_bin), "--user-dir", "tupe_plugin", "--task", "sentence_prediction",
             "--criterion", "sentence_prediction", "--num-classes", "2", "--max-positions", "64",
             "--arch", "tupe_roberta_tiny", "--optimizer", "adam", "--lr", "1e-4", "--batch-size", "8",
             "--max-update", "1", "--cpu", "--restore-file", str(evil), "--save-dir", str(tmp_path / "s")],
            check=False)
    assert p.returncode != 0 and "system" in p.stderr
    assert not marker.exists()


@pytest.fixture(scope="module")
def hub(pretrained, lm_bin, spm_dir):
    from tupe_plugin import TupeRobertaModel

    return TupeRobertaModel.from_pretrained(
        str(pretrained), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(lm_bin),
        sentencepiece_model=str(spm_dir / "spm.model"),
    ).eval()  # as with fairseq's RoBERTa hub: dropout off


def test_hub_encode_matches_sentencepiece_and_dict(hub, spm_dir):
    from tupe_preprocess.spm_dict import load_spm

    sp = load_spm(str(spm_dir / "spm.model"))
    text = "the cat happily saw the river ."
    ids = hub.encode(text)
    d = hub.task.source_dictionary
    assert ids[0] == d.bos() == 0 and ids[-1] == d.eos() == 2
    assert [d[i] for i in ids[1:-1]] == sp.encode(text, out_type=str)
    assert hub.decode(ids) == text


def test_hub_extract_features_is_the_model_forward(hub):
    ids = hub.encode("a dog gladly found the bridge .")
    feats = hub.extract_features(ids)
    assert feats.shape == (1, len(ids), 64)
    with torch.no_grad():
        direct, _ = hub.model(ids.unsqueeze(0), features_only=True)
    torch.testing.assert_close(feats, direct)


def test_hub_predict_with_a_finetuned_head(pretrained, cls_bin, spm_dir, tmp_path, starts_process):
    from tupe_plugin import TupeRobertaModel

    save = tmp_path / "ft"
    run(["fairseq-train", str(cls_bin), "--user-dir", "tupe_plugin", "--task", "sentence_prediction",
         "--criterion", "sentence_prediction", "--num-classes", "2", "--init-token", "0",
         "--separator-token", "2", "--max-positions", "64", "--arch", "tupe_roberta_tiny",
         "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16", "--max-epoch", "4",
         "--lr-scheduler", "warmup_ratio", "--restore-file", str(pretrained / "checkpoint_last.pt"),
         "--reset-optimizer", "--reset-dataloader", "--reset-meters", "--cpu", "--num-workers", "0",
         "--save-dir", str(save), "--no-epoch-checkpoints"])
    shutil.copy(cls_bin / "input0" / "dict.txt", save / "dict.txt")
    m = TupeRobertaModel.from_pretrained(str(save), checkpoint_file="checkpoint_last.pt",
                                         data_name_or_path=str(cls_bin), sentencepiece_model=str(spm_dir / "spm.model"))
    m.eval()
    labels = m.task.label_dictionary

    def predict(text: str) -> int:  # class index -> label symbol, as fairseq's GLUE examples do
        return int(labels.string([m.predict("sentence_classification_head", m.encode(text)).argmax() + labels.nspecial]))

    positive = predict("my friend warmly answered a letter .")
    negative = predict("the teacher slowly carried the river .")
    logp = m.predict("sentence_classification_head", m.encode("a dog found the bridge today ."))
    assert logp.shape == (1, 2) and torch.allclose(logp.exp().sum(), torch.tensor(1.0))
    assert (positive, negative) == (1, 0)


def lr_curve(warmup_ratio: float, updates_per_epoch: int, max_epoch: int, lr: float = 1e-3):
    from omegaconf import OmegaConf

    from fairseq.optim.adam import FairseqAdam
    from fairseq.optim.lr_scheduler import build_lr_scheduler
    from tupe_plugin.optim.warmup_ratio_schedule import WarmupRatioConfig

    root = OmegaConf.create({
        "optimization": {"max_epoch": max_epoch, "max_update": 0, "update_freq": [1], "lr": [lr]},
        "lr_scheduler": OmegaConf.structured(WarmupRatioConfig(warmup_ratio=warmup_ratio, updates_per_epoch=updates_per_epoch)),
        "optimizer": {"_name": "adam", "lr": [lr]},
    })
    root.lr_scheduler._name = "warmup_ratio"
    opt = FairseqAdam(OmegaConf.create({"lr": [lr], "adam_betas": "(0.9, 0.999)", "adam_eps": 1e-8,
                                        "weight_decay": 0.0, "use_old_adam": False, "fp16_adam_stats": False}),
                      [torch.nn.Parameter(torch.zeros(1))])
    sched = build_lr_scheduler(root.lr_scheduler, opt)
    return [sched.step_update(n) for n in range(updates_per_epoch * max_epoch + 2)]


def test_warmup_ratio_schedule_is_linear_up_then_down():
    curve = lr_curve(0.06, updates_per_epoch=50, max_epoch=10)  # 500 updates, 30 warmup
    assert curve[0] == 0.0 and curve[15] == pytest.approx(0.5e-3) and curve[30] == pytest.approx(1e-3)
    assert curve[265] == pytest.approx(1e-3 * (500 - 265) / 470)
    assert curve[500] == 0.0 and max(curve) == pytest.approx(1e-3)


OLD_CHECKPOINTS = ROOT / "tests" / "data" / "checkpoints_before_encodings.pt"


@pytest.fixture(scope="module")
def old_checkpoints():
    """Tiny models of every variant written by the code before the encodings became modules (commit 9894ad8,
    tupe_plugin/models/variants.py and modules/positional_term.py), with their features on one padded batch."""
    return torch.load(OLD_CHECKPOINTS, map_location="cpu", weights_only=False)


@pytest.mark.parametrize("name", list(VARIANTS_BEFORE))
def test_checkpoints_written_before_the_encoding_modules_load_and_give_the_same_features(name, old_checkpoints):
    old = old_checkpoints["variants"][name]
    model = build(f"{name}_tiny", max_positions=old_checkpoints["max_positions"], **old_checkpoints["sizes"])
    model.load_state_dict(old["state"])  # strict: every key, none missing or unexpected
    assert model.positional_variant.name == name
    with torch.no_grad():
        features, _ = model(old_checkpoints["tokens"], features_only=True)
    keep = old_checkpoints["tokens"].ne(1)
    torch.testing.assert_close(features[keep], old["features"][keep], rtol=0, atol=1e-5)
