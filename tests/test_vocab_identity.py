"""A sentencepiece model and a dict.txt that do not belong together are refused wherever a command combines them
(``tupe_common.vocab.check_pair``): the HF export (its tokenizer would give wrong ids), the analysis commands
(``tupe-locality --text``, ``tupe-probe``, the study's dev predictions, through ``load_hub``) and the binarizers.
A checkpoint records its dictionary's identity (``tupe_common.vocab.identity``); fine-tuning, the analysis commands
and the export compare a dict.txt with it, also where the training data is not on the machine.
A model of the same size from another training is the case that matters: every shape agrees, only the ids differ.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import BIN, ROOT, command_in_process, write_lines
from corpus import lm_lines
from tupe_common.vocab import check_pair, dict_symbols


@pytest.fixture(scope="module")
def other_spm(tmp_path_factory) -> Path:
    """A sentencepiece model of the same size as the session's (300 unigram pieces), trained on other text."""
    import sentencepiece as spm

    d = tmp_path_factory.mktemp("other_spm")
    text = write_lines(d / "corpus.txt", [line.upper() for line in lm_lines(800, seed=7)])
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(d / "spm"), vocab_size=300,
                                   model_type="unigram", hard_vocab_limit=False, character_coverage=1.0,
                                   minloglevel=2)
    return d / "spm.model"


def test_a_model_and_its_own_dictionary_pass(spm_dir):
    check_pair(str(spm_dir / "spm.model"), str(spm_dir / "dict.txt"))
    assert len(dict_symbols(str(spm_dir / "dict.txt"))) > 100


def test_a_model_of_the_same_size_from_other_text_is_refused_naming_both(spm_dir, other_spm):
    with pytest.raises(ValueError) as e:
        check_pair(str(other_spm), str(spm_dir / "dict.txt"))
    said = str(e.value)
    assert said.startswith(f"{spm_dir / 'dict.txt'} does not belong to the sentencepiece model {other_spm} (line ")


def test_a_text_file_given_as_the_model_is_named(spm_dir, tmp_path):
    fake = tmp_path / "spm.model"
    fake.write_text("not a model\n")
    with pytest.raises(ValueError, match=f"{fake}: not a sentencepiece model"):
        check_pair(str(fake), str(spm_dir / "dict.txt"))


@pytest.mark.usefixtures("starts_process")
@pytest.mark.parametrize("model", ["other", "text"])
def test_export_hf_refuses_a_tokenizer_of_another_model_and_writes_nothing(pretrained, lm_bin, other_spm, tmp_path,
                                                                          model):
    spm_model = other_spm if model == "other" else tmp_path / "spm.model"
    if model == "text":
        spm_model.write_text("a text file\n")
    out = tmp_path / "hf"
    p = command_in_process([BIN / "tupe-export-hf", pretrained / "checkpoint_last.pt", out, "--spm-model", spm_model,
                            "--dict", lm_bin / "dict.txt"], check=False)
    last = p.stderr.strip().splitlines()[-1]
    says = "does not belong to the sentencepiece model" if model == "other" else "not a sentencepiece model"
    assert p.returncode == 1 and says in last and str(spm_model) in last, p.stderr[-2000:]
    assert not out.exists() and not Path(str(out) + ".partial").exists()


@pytest.mark.usefixtures("starts_process")
def test_locality_on_text_refuses_a_mismatched_model_before_writing(pretrained, lm_bin, other_spm, tmp_path):
    text = write_lines(tmp_path / "text.txt", lm_lines(5, seed=3))
    csv = tmp_path / "loc.csv"
    p = command_in_process([BIN / "tupe-locality", pretrained / "checkpoint_last.pt", "--length", "8", "--text", text,
                            "--spm-model", other_spm, "--data", lm_bin, "--out-csv", csv], check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 1 and "does not belong to the sentencepiece model" in last, p.stderr[-2000:]
    assert not csv.exists()


def rewritten(checkpoint: Path, out: Path, identity: bool = True, data: bool = True) -> Path:
    """A copy of ``checkpoint`` without the vocabulary identity it recorded (one from before identities), or whose
    training data is not on this machine (another cluster's checkpoint)."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    if not identity:
        del state["cfg"]["model"].vocab_identity
    if not data:
        state["cfg"]["task"]["data"] = state["cfg"]["model"].data = "/elsewhere/data-bin"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, out)
    return out


@pytest.mark.usefixtures("starts_process")
@pytest.mark.parametrize("case", ["recorded", "recorded, data elsewhere", "older checkpoint"])
def test_finetuning_refuses_binaries_of_another_dictionary_of_the_same_size(pretrained, lm_bin, other_spm, tmp_path,
                                                                           capsys, case):
    """The checkpoint records its dictionary's identity, and fine-tuning compares the binaries' dict.txt with it,
    also where the pre-training data is not on this machine; a checkpoint from before identities is compared with
    its pre-training data's dict.txt (where the machine has it)."""
    from tupe_glue import finetune
    from tupe_preprocess import glue_binarize
    from tupe_preprocess.spm_dict import load_spm, write_fairseq_dict
    from tupe_common.vocab import dict_identity
    from tupe_tools.checkpoint_record import checkpoint_info
    from tupe_tools.checkpoint_info import trained_dict

    original = pretrained / "checkpoint_last.pt"
    recorded = checkpoint_info(str(original))["vocab_identity"]
    assert recorded == dict_identity(str(lm_bin / "dict.txt"))  # recorded at pre-training
    checkpoint = rewritten(original, tmp_path / "ckpt" / "checkpoint.pt", identity=case != "older checkpoint",
                           data=case != "recorded, data elsewhere")
    other_dict = tmp_path / "dict.txt"
    write_fairseq_dict(load_spm(str(other_spm)), str(other_dict))
    bins = tmp_path / "glue-bin"
    assert glue_binarize.main(["--glue-dir", str(ROOT / "tests/data/glue"), "--tasks", "RTE", "--spm-model",
                               str(other_spm), "--dict", str(other_dict), "--out-dir", str(bins)]) == 0
    capsys.readouterr()
    env = {"RUNS": str(tmp_path / "runs"), "GLUE_BIN": str(bins), "PATH": os.environ["PATH"],
           "CHECKPOINT": str(checkpoint)}
    assert finetune.main(["RTE", "1e-3", "1"], environ=env) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    given = bins / "RTE-bin" / "input0" / "dict.txt"
    if case == "older checkpoint":
        assert last.startswith(f"finetune.sh: error: {given} is not the dictionary {checkpoint} was trained with "
                               f"({trained_dict(str(original))}: line "), last
    else:
        assert last == (f"finetune.sh: error: {given} is not the dictionary {checkpoint} was trained with (its "
                        f"vocabulary {dict_identity(str(other_dict))}, the checkpoint's {recorded}); binarize with the "
                        "dict.txt and spm.model of its pre-training")
    assert not (tmp_path / "runs" / "RTE").exists()


@pytest.mark.usefixtures("starts_process")
def test_the_analysis_and_the_export_compare_the_dictionary_with_the_checkpoints(pretrained, lm_bin, spm_dir,
                                                                                other_spm, tmp_path):
    """tupe-locality with a data folder of another dictionary and that dictionary's sentencepiece model (the two
    agree: only the checkpoint's recorded identity can tell) is refused before it writes; the export records the identity in config.json, and refuses a --dict of
    another vocabulary."""
    import json

    from tupe_preprocess.spm_dict import load_spm, write_fairseq_dict
    from tupe_common.vocab import dict_identity

    other = tmp_path / "other-data"
    other.mkdir()
    write_fairseq_dict(load_spm(str(other_spm)), str(other / "dict.txt"))
    text = write_lines(tmp_path / "text.txt", lm_lines(5, seed=3))
    csv = tmp_path / "loc.csv"
    ckpt = pretrained / "checkpoint_last.pt"
    p = command_in_process([BIN / "tupe-locality", ckpt, "--length", "8", "--text", text, "--data", other,
                            "--spm-model", other_spm, "--out-csv", csv], check=False)
    assert p.returncode == 1 and "is not the dictionary" in p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    assert not csv.exists()
    spm_model = spm_dir / "spm.model"  # lm_bin's dict.txt is this model's
    out = tmp_path / "hf"
    p = command_in_process([BIN / "tupe-export-hf", ckpt, out, "--spm-model", other_spm, "--dict", other / "dict.txt"],
                           check=False)
    assert p.returncode == 1 and "is not the dictionary" in p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    assert not out.exists()
    p = command_in_process([BIN / "tupe-export-hf", ckpt, out, "--spm-model", spm_model, "--dict", lm_bin / "dict.txt"])
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_identity"] == dict_identity(str(lm_bin / "dict.txt"))


def test_a_dictionary_and_its_model_have_one_identity_and_another_model_another(spm_dir, other_spm, tmp_path):
    """The identity is the SHA-256 of the symbols in id order (a plain reference below: the dict.txt's first words),
    fairseq's madeupword padding not counted, and the same computed from the sentencepiece model."""
    import hashlib

    from tupe_common.vocab import check_identity, dict_identity, dict_pieces, identity, load_spm

    lines = (spm_dir / "dict.txt").read_text(encoding="utf-8").splitlines()
    plain = "vocab-" + hashlib.sha256("\n".join(line.split(" ")[0] for line in lines).encode()).hexdigest()[:16]
    padded = tmp_path / "dict.txt"
    padded.write_text("\n".join(lines + ["madeupword0000 0", "madeupword0001 0"]) + "\n", encoding="utf-8")
    ours = dict_identity(str(spm_dir / "dict.txt"))
    assert ours == plain == dict_identity(str(padded)) == identity(dict_pieces(load_spm(str(spm_dir / "spm.model"))))
    assert identity(dict_pieces(load_spm(str(other_spm)))) != ours and identity(["a", "b"]) != identity(["b", "a"])
    check_identity(ours, str(padded), "ckpt.pt")
    with pytest.raises(ValueError) as refused:
        check_identity(identity(["a", "b"]), str(padded), "ckpt.pt")
    assert str(refused.value) == (f"{padded} is not the dictionary ckpt.pt was trained with (its vocabulary {ours}, the "
                                  f"checkpoint's {identity(['a', 'b'])}); binarize with the dict.txt and spm.model of "
                                  "its pre-training")
