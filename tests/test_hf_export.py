"""tupe-export-hf: the transformers model equals fairseq's (features, MLM logits, classifier logits) for
every registered variant, runs without fairseq and tupe_plugin, takes left padding by the one rule, the tokenizer gives
glue_binarize's ids, and a transformers Trainer fine-tunes it."""
from __future__ import annotations

import csv
import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

from conftest import BIN, ROOT, command_in_process, run

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from model_utils import LEFT_PADDED, build, left_padded, tokens  # noqa: E402
from tupe_tools.hf import export as hf_export  # noqa: E402
from tupe_tools.hf.remote import SHIPPED, exported_source  # noqa: E402
from tupe_core.registry import VARIANTS  # noqa: E402

HEAD = "sentence_classification_head"
TOL = dict(rtol=0, atol=1e-5)


def padded_batch() -> tuple:
    x = tokens(3, 12, seed=5)
    x[1, 8:] = 1  # right padding (<pad> = 1), as fairseq batches
    x[2, 5:] = 1
    return x, x.ne(1).long()


def tiny_checkpoint(tmp_path: Path, variant: str, **args) -> Path:
    """A tupe_roberta checkpoint of ``variant`` with a 3-class head, weights moved off their init."""
    model = build(f"{variant}_tiny", max_positions=32, seed=1, **args)
    model.register_classification_head(HEAD, num_classes=3)
    with torch.no_grad():
        for p in model.parameters():  # LayerNorms != 1, per-layer priors differ, ...
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path / f"{variant}.pt"
    torch.save({"args": model.args, "model": model.state_dict()}, path)
    return path, model.eval()


def load(cls, folder: Path):
    return cls.from_pretrained(str(folder), trust_remote_code=True).eval()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_equals_fairseq(variant, tmp_path):
    assert_export_equals_fairseq(variant, tmp_path)


def test_a_flag_combination_that_is_no_registered_variant_exports_too(tmp_path):
    config = assert_export_equals_fairseq("tupe_r", tmp_path, untie_cls=False)  # TUPE-R without the [CLS] reset
    assert config["tupe_variant"] == "custom" and config["positional_encodings"] == [
        {"encoding": "tupe", "untie_cls": False, "rel_pos": True, "rel_pos_bins": 32, "max_rel_pos": 128}]


@pytest.mark.parametrize("scaling", ["linear", "yarn"])
def test_rope_with_scaling_exports_its_options_and_equals_fairseq(scaling, tmp_path):
    """RoPE's scaling options reach the config (its entry of positional_encodings) and the exported model's tables."""
    length = 16 if scaling == "yarn" else 0
    config = assert_export_equals_fairseq("rope", tmp_path, rope_scaling=scaling, rope_scaling_factor=2.0,
                                          rope_scaling_length=length)
    assert config["positional_encodings"] == [{"encoding": "rope", "rope_scaling": scaling, "rope_scaling_factor": 2.0,
                                               "rope_scaling_length": length}]


def assert_export_equals_fairseq(variant: str, tmp_path: Path, **args) -> dict:
    """Exports ``{variant}_tiny`` (with ``args``) and checks the three transformers models against fairseq's;
    returns the exported config."""
    ckpt, model = tiny_checkpoint(tmp_path, variant, **args)
    out = hf_export.export(str(ckpt), str(tmp_path / "hf"))
    config = json.loads((out / "config.json").read_text())
    assert config["tupe_variant"] == model.positional_variant.name and config["num_labels"] == 3
    x, mask = padded_batch()
    with torch.no_grad():
        feats, _ = model(x, features_only=True)
        logits, _ = model(x)
        cls_logits, _ = model(x, features_only=True, classification_head_name=HEAD)
        hf_feats = load(AutoModel, out)(input_ids=x, attention_mask=mask).last_hidden_state
        hf_logits = load(AutoModelForMaskedLM, out)(input_ids=x, attention_mask=mask).logits
        hf_cls = load(AutoModelForSequenceClassification, out)(input_ids=x, attention_mask=mask).logits
        alone = load(AutoModel, out)(input_ids=x[2:, :5]).last_hidden_state  # no padding, no mask
    keep = mask.bool()
    torch.testing.assert_close(hf_feats[keep], feats[keep], **TOL)
    torch.testing.assert_close(hf_logits[keep], logits[keep], **TOL)
    torch.testing.assert_close(hf_cls, cls_logits, **TOL)
    torch.testing.assert_close(alone[0], hf_feats[2, :5], **TOL)  # padding does not change a sequence
    assert hf_cls.shape == (3, 3) and hf_logits.shape == (3, 12, model.encoder.sentence_encoder.embed_tokens.num_embeddings)
    return config


# Loads an export where fairseq and tupe_plugin cannot be imported (a None entry in sys.modules makes the
# import fail), as on a machine with transformers alone: argv = folder, inputs .pt, output .pt
WITHOUT_PLUGIN = """
import os, sys
sys.modules.update(fairseq=None, tupe_core=None, tupe_plugin=None, tupe_tools=None, torchaudio=None)
os.environ["HF_MODULES_CACHE"] = os.path.join(os.path.dirname(sys.argv[3]), "hf_modules")
import torch
from transformers import AutoModel
x, mask = torch.load(sys.argv[2])
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
with torch.no_grad():
    torch.save(model(input_ids=x, attention_mask=mask).last_hidden_state, sys.argv[3])
"""


def test_the_export_runs_without_fairseq_and_tupe_plugin(tmp_path, starts_process):
    ckpt, model = tiny_checkpoint(tmp_path, "deberta_rel")
    out = hf_export.export(str(ckpt), str(tmp_path / "hf"))
    shipped = sorted(p.name for p in out.glob("*.py"))
    assert shipped == sorted(["configuration_tupe.py", "modeling_tupe.py"] + [f"{n}.py" for n in SHIPPED])
    for name, module in SHIPPED.items():  # tupe_core's own files, not copies that could drift
        assert (out / f"{name}.py").read_bytes() == Path(importlib.import_module(module).__file__).read_bytes()
    for name in ("configuration_tupe.py", "modeling_tupe.py"):  # the model code, its core imports made relative
        text = (out / name).read_text(encoding="utf-8")
        assert text == exported_source(name) and not [line for line in text.splitlines() if "import tupe_core" in line
                                                      or line.startswith("from tupe_core")]
    assert "\nfrom .registry import build" in (out / "modeling_tupe.py").read_text(encoding="utf-8")
    x, mask = padded_batch()
    torch.save((x, mask), tmp_path / "in.pt")
    run([sys.executable, "-c", WITHOUT_PLUGIN, str(out), str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
        cwd=tmp_path)
    with torch.no_grad():
        feats, _ = model(x, features_only=True)
    keep = mask.bool()
    torch.testing.assert_close(torch.load(tmp_path / "out.pt")[keep], feats[keep], **TOL)


@pytest.mark.parametrize("variant", LEFT_PADDED)
def test_left_padding_follows_the_one_rule(variant, tmp_path):
    """The cases of tests/test_left_padding.py: the real tokens' features equal fairseq's on the same left-padded
    batch (each token's position passed in where the variant reads positions); the classifier, which reads [CLS]
    from column 0, refuses a row that starts with padding for every variant; where an encoding declares it cannot
    take left padding (REFUSED), the export refuses it with the fairseq model's words."""
    ckpt, fairseq_model = tiny_checkpoint(tmp_path, variant)
    model = load(AutoModel, hf_export.export(str(ckpt), str(tmp_path / "hf")))
    x, mask = padded_batch()
    left = left_padded(x, 4)
    with torch.no_grad():
        model(input_ids=x, attention_mask=mask)  # right padding: fine
        got = model(input_ids=left, attention_mask=left.ne(1).long()).last_hidden_state
        want, _ = fairseq_model(left, features_only=True)
        torch.testing.assert_close(got[0, 4:], want[0, 4:], **TOL)
        model.left_padding = "refused"  # what the model reads from a refusing encoding's declaration at init
        with pytest.raises(ValueError, match=r"left-padded input \(batch rows \[0\] have padding before real "
                                             r"tokens\).*padding_side = 'right'"):
            model(input_ids=left, attention_mask=left.ne(1).long())
        classifier = load(AutoModelForSequenceClassification, tmp_path / "hf")
        with pytest.raises(ValueError, match="rows that start with padding.*column 0"):
            classifier(input_ids=left, attention_mask=left.ne(1).long())


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path, starts_process):
    (tmp_path / "notes.txt").write_text("not a model\n")
    p = command_in_process([str(BIN / "tupe-export-hf"), str(tmp_path / "notes.txt"), str(tmp_path / "hf")], check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "unexpected" not in p.stderr
    assert "notes.txt: not a checkpoint (a text file: 'not a model'); pass a checkpoint" in p.stderr.splitlines()[-1]
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    with pytest.raises(ValueError, match="tensor.pt: not a fairseq checkpoint .*a Tensor, no 'model' state"):
        hf_export.export(str(tmp_path / "tensor.pt"), str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()


def test_head_style_is_read_from_the_checkpoint(tmp_path):
    from tupe_plugin.modules.classification_head import head_style

    for style in ("release", "roberta", None):  # None: args that predate the option
        ckpt, model = tiny_checkpoint(tmp_path, "tupe_a", pooler_dropout=0.3,
                                      **({"classification_head_style": style} if style else {}))
        if style is None:
            vars(model.args).pop("classification_head_style", None)
            torch.save({"args": model.args, "model": model.state_dict()}, ckpt)
        out = hf_export.export(str(ckpt), str(tmp_path / f"hf_{style}"))
        head = load(AutoModelForSequenceClassification, out).classifier
        assert head.dropout_first is (head_style(model.args) == "roberta")
        assert json.loads((out / "config.json").read_text())["classification_head_style"] == head_style(model.args)
        features = torch.randn(2, 5, 64)  # training mode: dropout where fairseq's head has it, same masks
        torch.manual_seed(3)
        want = model.classification_heads[HEAD].train()(features)
        torch.manual_seed(3)
        torch.testing.assert_close(head.train()(features), want, **TOL)


def test_a_checkpoint_with_a_hydra_config_exports_the_same(tmp_path):
    """fairseq-hydra-train checkpoints keep the model settings in cfg.model (a DictConfig), not args."""
    from omegaconf import OmegaConf

    ckpt, model = tiny_checkpoint(tmp_path, "bert_a")
    simple = {k: v for k, v in vars(model.args).items() if isinstance(v, (int, float, str, bool, type(None)))}
    hydra_ckpt = tmp_path / "hydra.pt"
    torch.save({"cfg": {"model": OmegaConf.create(simple), "task": OmegaConf.create({"data": str(tmp_path)})},
                "model": model.state_dict()}, hydra_ckpt)
    a = json.loads((hf_export.export(str(ckpt), str(tmp_path / "a")) / "config.json").read_text())
    b = json.loads((hf_export.export(str(hydra_ckpt), str(tmp_path / "b")) / "config.json").read_text())
    assert a == b and b["positional_encodings"] == [{"encoding": "learned_absolute"}] and b["num_hidden_layers"] == 2


def test_cli_refuses_a_non_empty_out_dir_in_one_line(tmp_path, starts_process):
    ckpt, _ = tiny_checkpoint(tmp_path, "tupe_r")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("user data")
    p = command_in_process([str(BIN / "tupe-export-hf"), str(ckpt), str(tmp_path / "taken")], check=False)
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(errors) == 1
    assert errors[0].startswith("error:") and "taken exists and is not empty" in errors[0]
    assert "--force" in p.stderr and (tmp_path / "taken" / "mine.txt").read_text() == "user data"
    assert "trust_remote_code" in command_in_process([str(BIN / "tupe-export-hf"), "--help"]).stdout


def test_cli_refuses_an_out_dir_that_holds_an_input_even_with_force(tmp_path):
    """--force replaces OUT_DIR whole: a checkpoint (or --spm-model, --dict) inside it would be deleted."""
    run_dir = tmp_path / "runx"
    run_dir.mkdir()
    ckpt, _ = tiny_checkpoint(run_dir, "tupe_r")
    (run_dir / "train.log").write_text("user data")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    p = command_in_process([str(BIN / "tupe-export-hf"), str(ckpt), str(run_dir), "--force"], check=False)
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert (p.returncode, len(errors)) == (2, 1) and "Traceback" not in p.stderr, p.stderr
    assert errors[0] == (f"error: {ckpt}: the checkpoint is inside OUT_DIR {run_dir}, which the export replaces "
                         f"whole; choose an OUT_DIR outside the checkpoint's folder, e.g. {run_dir.resolve()}-hf")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runx"]
    out = tmp_path / "hf"
    out.mkdir()
    (out / "spm.model").write_text("user data")
    (tmp_path / "alias").symlink_to(out)  # the same folder by another name: compared by real paths
    spm = tmp_path / "alias" / "spm.model"
    p = command_in_process([str(BIN / "tupe-export-hf"), str(ckpt), str(out), "--force", "--spm-model", str(spm)],
                           check=False)
    assert p.returncode == 2 and p.stderr.splitlines()[-1].startswith(
        f"error: {spm}: the --spm-model file is inside OUT_DIR {out}"), p.stderr
    assert [p.name for p in out.iterdir()] == ["spm.model"] and (out / "spm.model").read_text() == "user data"


@pytest.fixture(scope="module")
def finetuned(pretrained, cls_bin, tmp_path_factory, starts_process) -> Path:
    """The session's tiny TUPE-R fine-tuned a few updates by fairseq-train sentence_prediction."""
    save = tmp_path_factory.mktemp("hf_ft")
    run(["fairseq-train", str(cls_bin), "--user-dir", "tupe_plugin", "--task", "sentence_prediction",
         "--criterion", "sentence_prediction", "--num-classes", "2", "--init-token", "0",
         "--separator-token", "2", "--max-positions", "64", "--arch", "tupe_roberta_tiny",
         "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16", "--max-update", "4",
         "--restore-file", str(pretrained / "checkpoint_last.pt"), "--reset-optimizer", "--reset-dataloader",
         "--reset-meters", "--cpu", "--num-workers", "0", "--save-dir", str(save), "--no-epoch-checkpoints"])
    return save / "checkpoint_last.pt"


def rte_rows(split: str):
    with open(ROOT / "tests/data/glue/RTE" / f"{split}.tsv", encoding="utf-8") as f:
        return [row for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][1:]


def test_finetuned_checkpoint_and_tokenizer_equal_fairseq_and_glue_binarize(finetuned, cls_bin, spm_dir, tmp_path, starts_process):
    finetuned_data = cls_bin
    from fairseq.data import data_utils

    from tupe_plugin import TupeRobertaModel

    out = tmp_path / "hf"
    p = command_in_process([str(BIN / "tupe-export-hf"), str(finetuned), str(out), "--spm-model",
                            str(spm_dir / "spm.model")])
    assert "AutoModelForMaskedLM.from_pretrained" in p.stdout  # dict.txt found from the checkpoint's data
    tok = AutoTokenizer.from_pretrained(str(out), trust_remote_code=True)
    from tupe_preprocess import glue_binarize

    assert glue_binarize.main(["--glue-dir", str(ROOT / "tests/data/glue"), "--tasks", "RTE", "--spm-model",
                               str(spm_dir / "spm.model"), "--dict", str(spm_dir / "dict.txt"),
                               "--out-dir", str(tmp_path / "glue-bin")]) == 0
    binaries = [data_utils.load_indexed_dataset(str(tmp_path / "glue-bin/RTE-bin" / f"input{k}/valid"), None)
                for k in (0, 1)]
    rows = rte_rows("dev")
    assert len(rows) == len(binaries[0]) > 10
    for row, a, b in zip(rows, *binaries):
        want = [0] + a.tolist() + [2] + b.tolist()  # fairseq: --init-token 0 --separator-token 2
        assert tok(row[1], row[2])["input_ids"] == want
    assert tok("a b")["input_ids"][0] == 0 and tok.mask_token_id == tok.vocab_size - 1
    assert tok.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]

    hub = TupeRobertaModel.from_pretrained(str(finetuned.parent), checkpoint_file=finetuned.name,
                                           data_name_or_path=str(tmp_path / "glue-bin/RTE-bin"), bpe=None).eval()
    texts = [(r[1], r[2]) for r in rows[:4]]
    batch = tok([t[0] for t in texts], [t[1] for t in texts], padding=True, return_tensors="pt")
    model = load(AutoModelForSequenceClassification, out)
    with torch.no_grad():
        want, _ = hub.model(batch["input_ids"], features_only=True, classification_head_name=HEAD)
        got = model(**batch).logits
        feats, _ = hub.model(batch["input_ids"], features_only=True)
        hf_feats = load(AutoModel, out)(**batch).last_hidden_state
    torch.testing.assert_close(got, want, **TOL)
    keep = batch["attention_mask"].bool()
    assert not keep.all()  # the batch is padded
    torch.testing.assert_close(hf_feats[keep], feats[keep], **TOL)
    label_dict = (finetuned_data / "label" / "dict.txt").read_text().split("\n")
    assert [model.config.id2label[i] for i in range(2)] == [line.split(" ")[0] for line in label_dict[:2]]


def hide_broken_torchaudio() -> bool:
    """Make a torchaudio that cannot load count as absent; returns True if it was hidden.

    fairseq requires torchaudio, and the newest torchaudio wheel (2.11) fails to load its native
    library with torch 2.13 (``OSError: Could not load this library``). transformers imports it
    whenever it is installed (``from transformers import Trainer`` goes through audio_utils), so
    call this before importing Trainer. A ``None`` entry in ``sys.modules`` makes
    ``importlib.util.find_spec`` return None and ``import torchaudio`` raise ImportError.
    """
    if sys.modules.get("torchaudio", 0) is None:
        return True
    try:
        import torchaudio  # noqa: F401
    except (ImportError, OSError) as e:
        for name in [m for m in sys.modules if m == "torchaudio" or m.startswith("torchaudio.")]:
            del sys.modules[name]
        sys.modules["torchaudio"] = None
        utils = sys.modules.get("transformers.utils.import_utils")  # transformers already imported
        if utils is not None and hasattr(utils.is_torchaudio_available, "cache_clear"):
            utils.is_torchaudio_available.cache_clear()
        print(f"note: torchaudio cannot be loaded here ({type(e).__name__}); treating it as not installed",
              file=sys.stderr)
        return True
    return False


def test_transformers_trainer_finetunes_the_export(pretrained, lm_bin, spm_dir, tmp_path):
    hide_broken_torchaudio()  # fairseq's torchaudio 2.11 does not load with torch 2.13; Trainer imports it
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    out = hf_export.export(str(pretrained / "checkpoint_last.pt"), str(tmp_path / "hf"),
                           spm_model=str(spm_dir / "spm.model"), dict_path=str(lm_bin / "dict.txt"))
    tok = AutoTokenizer.from_pretrained(str(out), trust_remote_code=True)
    model = AutoModelForSequenceClassification.from_pretrained(str(out), trust_remote_code=True, num_labels=2)
    labels = {"entailment": 0, "not_entailment": 1}
    data = [dict(tok(r[1], r[2]), labels=labels[r[3]]) for r in rte_rows("train")]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=8, max_steps=4,
                             learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
                             logging_steps=1, dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=DataCollatorWithPadding(tok))
    result = trainer.train()
    assert result.global_step == 4 and torch.isfinite(torch.tensor(result.training_loss))
    after = model.state_dict()
    assert not torch.equal(after["tupe.layers.0.fc1.weight"], before["tupe.layers.0.fc1.weight"])
    assert not torch.equal(after["tupe.positions.relative_attention_bias.weight"],
                           before["tupe.positions.relative_attention_bias.weight"])
    model.save_pretrained(tmp_path / "tuned")  # a fine-tuned export saves and loads back
    back = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "tuned"), trust_remote_code=True).eval()
    batch = tok(["a b c"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(back(**batch).logits, model.eval()(**batch).logits, **TOL)


def test_a_head_the_checkpoint_lacks_or_an_ambiguous_head_is_a_usage_error():
    """--head is the user's choice: naming no head of the checkpoint, or none where it has two, exits 2."""
    from tupe_tools.hf.export import pick_head
    from tupe_tools.errors import UsageError

    state = {f"classification_heads.{n}.out_proj.weight": torch.zeros(2, 4) for n in ("rte", "mrpc")}
    with pytest.raises(UsageError, match="no classification head 'sst'"):
        pick_head(state, "ckpt.pt", "sst")
    with pytest.raises(UsageError, match="several classification heads"):
        pick_head(state, "ckpt.pt", None)
    assert pick_head(state, "ckpt.pt", "rte")[0] == "rte"


def test_a_full_disk_is_one_line_naming_out_dir_and_keeps_the_earlier_export(tmp_path, monkeypatch, capsys):
    """A full disk while copying the model code (shutil's error names the file copied from) or writing the weights
    (safetensors' error is no OSError): one line naming OUT_DIR, exit 1, not called a bug; OUT_DIR.partial is
    removed and the earlier export is kept."""
    import argparse
    import errno
    import os
    import shutil

    import safetensors.torch

    from tupe_tools.errors import run_command

    ckpt, _ = tiny_checkpoint(tmp_path, "tupe_r")
    out = tmp_path / "export"
    hf_export.export(str(ckpt), str(out))
    before = sorted(p.name for p in out.iterdir())
    copy = shutil.copyfile

    def copy_to_a_full_disk(src, dst, **kwargs):  # as shutil says it: the source file named, the target second
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))

    def save_to_a_full_disk(*args, **kwargs):
        copy(ckpt, args[1])  # half written
        raise RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                           'left on device" })')

    args = argparse.Namespace(checkpoint=str(ckpt), out_dir=str(out), spm_model=None, dict_path=None, head=None,
                              force=True)
    for name, module, fake in (("copyfile", shutil, copy_to_a_full_disk),
                               ("save_file", safetensors.torch, save_to_a_full_disk)):
        with monkeypatch.context() as m:
            m.setattr(module, name, fake)
            assert run_command(hf_export.run, args) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {out}: no space left on its disk while writing it") and "bug" not in err, err
        assert len(err.splitlines()) == 1 and "free space there" in err and "hf/remote" not in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "tupe_r.pt"]
        assert sorted(p.name for p in out.iterdir()) == before
