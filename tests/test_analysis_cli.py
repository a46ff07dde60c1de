"""The analysis commands on a tiny pre-trained TUPE-R: positional maps, locality/symmetry, probing."""
from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, command_in_process, encode_pieces, run, write_lines
from references import layer0_reference_weights, reference
from tupe_tools.analysis import locality, softmax_rows, symmetry, symmetry_scaled

BIN = Path(sys.executable).parent


TUPE_R = reference("tupe_r")  # the session's `pretrained` model: tupe_roberta_tiny, TUPE-R (models/architectures.py)

@pytest.fixture(scope="module")
def hub(pretrained, lm_bin, spm_dir):
    from tupe_tools.analysis.attention_maps import load_hub

    return load_hub(str(pretrained / "checkpoint_last.pt"), str(lm_bin), str(spm_dir / "spm.model"))


def test_pos_maps_writes_the_models_positional_term(pretrained, hub, tmp_path, starts_process):
    p = run([str(BIN / "tupe-pos-maps"), str(pretrained / "checkpoint_last.pt"), "--out-dir", str(tmp_path), "--length", "20"])
    logits = np.load(tmp_path / "pos_logits.npy")
    want = TUPE_R.positional(hub.model, 20).detach().numpy()  # loop reference over the loaded model
    assert logits.shape == (4, 20, 20)
    np.testing.assert_allclose(logits, want, atol=1e-5)
    assert np.all(logits[:, 0, :] == logits[:, 0, :1])  # [CLS] row is theta1
    np.testing.assert_allclose(np.load(tmp_path / "pos_probs.npy").sum(-1), 1.0, atol=1e-9)
    assert (tmp_path / "pos_maps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| head 3 |" in p.stdout  # one table row per head
    assert "DEBUG" not in p.stderr  # the libraries log at INFO, as under fairseq-train (matplotlib: DEBUG lines)


def test_pos_maps_refuses_a_length_beyond_the_checkpoint(pretrained, tmp_path, starts_process):
    p = command_in_process([str(BIN / "tupe-pos-maps"), str(pretrained / "checkpoint_last.pt"), "--out-dir",
                            str(tmp_path), "--length", "65"], check=False)
    assert p.returncode == 2 and "exceeds the checkpoint's 64 positions" in p.stderr


def test_outputs_are_never_overwritten_without_force(pretrained, tmp_path, starts_process):
    """tupe-pos-maps into a folder of earlier maps and tupe-locality onto an existing CSV: exit 2, the files
    untouched, nothing computed; with --force they are written."""
    ckpt = str(pretrained / "checkpoint_last.pt")
    (tmp_path / "pos_maps.png").write_bytes(b"earlier maps")
    p = command_in_process([str(BIN / "tupe-pos-maps"), ckpt, "--out-dir", str(tmp_path), "--length", "8"], check=False)
    assert p.returncode == 2 and "already holds pos_maps.png; pass --force" in p.stderr
    assert (tmp_path / "pos_maps.png").read_bytes() == b"earlier maps" and not (tmp_path / "pos_logits.npy").exists()
    command_in_process([str(BIN / "tupe-pos-maps"), ckpt, "--out-dir", str(tmp_path), "--length", "8", "--force"])
    assert (tmp_path / "pos_maps.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "pos_logits.npy").exists()
    table = tmp_path / "mine.csv"
    table.write_text("my own table\n")
    q = command_in_process([str(BIN / "tupe-locality"), ckpt, "--length", "8", "--out-csv", str(table)], check=False)
    assert q.returncode == 2 and "--out-csv" in q.stderr and "exists; pass --force" in q.stderr
    assert table.read_text() == "my own table\n"
    command_in_process([str(BIN / "tupe-locality"), ckpt, "--length", "8", "--out-csv", str(table), "--force"])
    assert table.read_text().startswith("source,layer,head")


def test_bad_text_and_paths_get_one_line_naming_the_file(pretrained, lm_bin, spm_dir, tmp_path, starts_process):
    """tupe-locality --text: a non-UTF-8 file is named with its line; a folder given for the file is said to be a
    folder (not '[Errno 21]'); both exit 1 with one error line and no CSV."""
    ckpt = str(pretrained / "checkpoint_last.pt")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("the cat saw the river .\ncaf\xe9 au lait .\n".encode("latin-1"))
    args = ["--spm-model", str(spm_dir / "spm.model"), "--data", str(lm_bin), "--length", "8"]
    for text, expected in ((bad, f"error: {bad}: line 2 is not UTF-8 (byte 4 of the line is b'\\xe9'); save the file as UTF-8"),
                           (tmp_path, f"error: {tmp_path}: is a folder, where a file is expected")):
        p = command_in_process([str(BIN / "tupe-locality"), ckpt, "--text", str(text), *args, "--out-csv",
                                str(tmp_path / "out.csv")], check=False)
        assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == expected, p.stderr[-1500:]
        assert "Traceback" not in p.stderr and not (tmp_path / "out.csv").exists()


def test_attention_probs_equal_the_formula(hub):
    from tupe_tools.analysis.attention_maps import attention_probs

    tokens = hub.encode("the cat happily saw the river .")
    probs = attention_probs(hub.model, tokens)
    assert probs.shape == (2, 4, len(tokens), len(tokens))
    want = layer0_reference_weights(hub.model, "tupe_r", tokens.unsqueeze(0))[0]
    torch.testing.assert_close(probs[0].double(), want, atol=1e-5, rtol=1e-4)
    assert all(layer.self_attn.attention_path == "auto" for layer in hub.model.encoder.sentence_encoder.layers)


def test_locality_cli_tables(pretrained, lm_bin, spm_dir, hub, tmp_path, starts_process):
    """A line of no pieces (a zero-width space: <s> </s>, where the metrics are NaN) is left out, not averaged in
    (every mean was NaN)."""
    assert len(hub.encode("\u200b")) == 2
    text = write_lines(tmp_path / "text.txt", ["the cat happily saw the river .", "", "\u200b",
                                               "a dog found the bridge today ."])
    out = tmp_path / "ls.csv"
    command_in_process([str(BIN / "tupe-locality"), str(pretrained / "checkpoint_last.pt"), "--length", "16", "--text",
                        str(text), "--spm-model", str(spm_dir / "spm.model"), "--data", str(lm_bin), "--out-csv", str(out)])
    rows = list(csv.DictReader(out.open()))
    pos = [r for r in rows if r["source"] == "position" and r["head"] not in ("mean",)]
    probs = softmax_rows(TUPE_R.positional(hub.model, 16).detach().numpy())
    for r in pos:
        h = int(r["head"])
        assert float(r["locality"]) == pytest.approx(locality(probs[h]), abs=1e-6)
        assert float(r["symmetry"]) == pytest.approx(symmetry(probs[h]), abs=1e-6)
    att = [r for r in rows if r["source"].startswith("attention (2 sentences)")]
    assert len(att) == 2 * 4 + 1  # layers x heads + the mean; the blank line is skipped
    from tupe_tools.analysis.attention_maps import attention_probs

    maps = [attention_probs(hub.model, hub.encode(s)).numpy() for s in
            ["the cat happily saw the river .", "a dog found the bridge today ."]]
    want = np.mean([symmetry_scaled(m) for m in maps], axis=0)  # (L, H)
    got = {(int(r["layer"]), int(r["head"])): float(r["symmetry_scaled"]) for r in att if r["head"] != "mean"}
    assert got[(1, 2)] == pytest.approx(want[1, 2], abs=1e-6)
    assert all(np.isfinite(float(r[k])) for r in rows for k in ("locality", "symmetry", "symmetry_scaled"))
    p = command_in_process([str(BIN / "tupe-locality"), str(pretrained / "checkpoint_last.pt"), "--length", "16",
                            "--text", str(text), "--data", str(lm_bin)], check=False)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].endswith("--text needs --spm-model, the "
                                                                            "sentencepiece model of the checkpoint's "
                                                                            "data, to encode its lines")


def test_locality_text_cuts_a_long_line_before_its_eos(pretrained, lm_bin, spm_dir, hub, tmp_path, monkeypatch,
                                                       capsys):
    """A line longer than the model's positions is measured as pre-training saw its blocks: <s> pieces </s>, the
    pieces cut from the right; the old cut of the whole encoding dropped the </s> that every block ends with."""
    from tupe_tools.analysis import attention_maps
    from tupe_tools.analysis.locality_cli import attention_rows

    fed, real = [], attention_maps.attention_probs
    monkeypatch.setattr(attention_maps, "attention_probs", lambda model, tokens: fed.append(tokens) or real(model, tokens))
    long_line, short_line = "the cat happily saw the river . " * 20, "a dog found the bridge today ."
    text = write_lines(tmp_path / "text.txt", [long_line, short_line])
    attention_rows(str(pretrained / "checkpoint_last.pt"), str(text), str(lm_bin), str(spm_dir / "spm.model"), 10)
    limit, whole = hub.model.max_positions(), hub.encode(long_line)
    assert len(whole) > limit
    d = hub.task.source_dictionary
    assert fed[0].tolist() == [*whole[: limit - 1].tolist(), d.eos()]  # <s>, the first limit-2 pieces, </s>
    assert fed[1].tolist() == hub.encode(short_line).tolist()  # a line that fits is untouched
    assert f"{text}: 1 line(s) longer than the model's {limit} positions cut" in capsys.readouterr().err


@pytest.fixture(scope="module")
def nli_finetuned(pretrained, spm_dir, tmp_path_factory, starts_process):
    """A tiny NLI fine-tune on the SNLI fixture (quality irrelevant: the test checks the bookkeeping)."""
    d = tmp_path_factory.mktemp("nli")
    items = [json.loads(line) for line in (ROOT / "tests/data/snli_sample.jsonl").open()]
    items = [r for r in items if r["gold_label"] != "-"]
    for split in ("train", "valid"):
        write_lines(d / f"{split}.input0", encode_pieces(spm_dir, [r["sentence1"] for r in items]))
        write_lines(d / f"{split}.input1", encode_pieces(spm_dir, [r["sentence2"] for r in items]))
        write_lines(d / f"{split}.label", [r["gold_label"] for r in items])
    for field in ("input0", "input1"):
        run(["fairseq-preprocess", "--only-source", "--srcdict", str(spm_dir / "dict.txt"),
             "--trainpref", str(d / f"train.{field}"), "--validpref", str(d / f"valid.{field}"),
             "--destdir", str(d / "bin" / field), "--workers", "1"])
    run(["fairseq-preprocess", "--only-source", "--trainpref", str(d / "train.label"),
         "--validpref", str(d / "valid.label"), "--destdir", str(d / "bin" / "label"), "--workers", "1"])
    run(["fairseq-train", str(d / "bin"), "--user-dir", "tupe_plugin", "--task", "sentence_prediction",
         "--criterion", "sentence_prediction", "--num-classes", "3", "--init-token", "0", "--separator-token", "2",
         "--max-positions", "64", "--arch", "tupe_roberta_tiny", "--optimizer", "adam", "--lr", "1e-3",
         "--batch-size", "16", "--max-epoch", "2", "--restore-file", str(pretrained / "checkpoint_last.pt"),
         "--reset-optimizer", "--reset-dataloader", "--reset-meters", "--cpu", "--num-workers", "0",
         "--save-dir", str(d / "ckpt"), "--no-epoch-checkpoints", "--shorten-method", "truncate"])
    return d


def test_probe_reports_accuracy_per_set_and_drop(nli_finetuned, spm_dir, tmp_path, starts_process):
    from tupe_tools.analysis.attention_maps import load_hub

    from tupe_tools.analysis.probing_eval import pair_tokens

    ckpt = nli_finetuned / "ckpt" / "checkpoint_last.pt"
    hub = load_hub(str(ckpt), str(nli_finetuned / "bin"), str(spm_dir / "spm.model"))
    long_ids, cut = pair_tokens(hub, "a man " * 40, "a dog sleeps .")
    assert cut and len(long_ids) == 64 and long_ids[-1] == 2 and long_ids[0] == 0
    # keep the fixture pairs that fit untruncated, so hub.encode below is an independent count
    fits = [line for line in (ROOT / "tests/data/snli_sample.jsonl").open()
            if len(hub.encode(*(json.loads(line)[k] for k in ("sentence1", "sentence2")))) <= 64]
    assert len(fits) > 60
    snli = write_lines(tmp_path / "snli.jsonl", [line.rstrip("\n") for line in fits])
    sets = tmp_path / "sets"
    run([sys.executable, "-m", "tupe_preprocess.probing_sets", "--input", str(snli), "--out-dir", str(sets), "--seed", "1"])
    out = tmp_path / "probe.csv"
    command_in_process([str(BIN / "tupe-probe"), str(ckpt), "--sets-dir", str(sets), "--data",
                        str(nli_finetuned / "bin"), "--spm-model", str(spm_dir / "spm.model"), "--out-csv", str(out)])
    rows = {r["set"]: r for r in csv.DictReader(out.open())}
    assert {"original", "shuffle_3", "random", "role_swap", "role_swap_original"} <= set(rows)
    table = out.read_bytes()  # a second run onto the same --out-csv is refused without --force, the table kept
    again = command_in_process([str(BIN / "tupe-probe"), str(ckpt), "--sets-dir", str(sets), "--data",
                                str(nli_finetuned / "bin"), "--spm-model", str(spm_dir / "spm.model"), "--out-csv",
                                str(out)], check=False)
    assert again.returncode == 2 and f"--out-csv {out} exists; pass --force" in again.stderr and out.read_bytes() == table

    labels = hub.task.label_dictionary

    def acc(name):  # one pair at a time, no batching/padding: the independent count
        hits = []
        for line in (sets / f"{name}.jsonl").open():
            r = json.loads(line)
            logp = hub.predict("sentence_classification_head", hub.encode(r["sentence1"], r["sentence2"]))
            pred = labels[int(logp.argmax()) + labels.nspecial]
            hits.append(pred != "entailment" if r["gold_label"] == "non-entailment" else pred == r["gold_label"])
        return 100 * sum(hits) / len(hits), len(hits)

    for name in ("original", "shuffle_4", "role_swap", "role_swap_original"):
        a, n = acc(name)
        assert int(rows[name]["items"]) == n and float(rows[name]["accuracy"]) == pytest.approx(a, abs=0.01)
    want = float(rows["role_swap"]["accuracy"]) - float(rows["role_swap_original"]["accuracy"])
    assert float(rows["role_swap"]["delta"]) == pytest.approx(want, abs=0.011) and rows["role_swap"]["baseline"] == "role_swap_original"
    assert rows["shuffle_3"]["baseline"] == "original"
    # another task's fine-tune (3 classes, other names): refused before any set is scored
    other = tmp_path / "other_bin"
    shutil.copytree(nli_finetuned / "bin", other)
    (other / "label" / "dict.txt").write_text("positive 5\nnegative 4\nmixed 3\n")
    p = command_in_process([str(BIN / "tupe-probe"), str(ckpt), "--sets-dir", str(sets), "--data", str(other),
                            "--spm-model", str(spm_dir / "spm.model")], check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and ("its label dictionary holds positive, negative, mixed, not the NLI labels "
                                  "entailment, neutral, contradiction") in last, last


LONG_TEXT, SHORT_TEXT = "a man walks his dog in the park " * 12, "a dog sleeps ."  # > the 64 positions; fits


def probe_command(nli_finetuned, spm_dir, sets: Path, sets_of_pairs: dict, out: Path) -> list:
    """``tupe-probe`` on the tiny NLI fine-tune, over ``{set: [(premise, hypothesis)]}`` written to ``sets``."""
    sets.mkdir(exist_ok=True)
    for name, pairs in sets_of_pairs.items():
        write_lines(sets / f"{name}.jsonl", [json.dumps({"sentence1": a, "sentence2": b, "gold_label": "neutral"})
                                             for a, b in pairs])
    return [str(BIN / "tupe-probe"), str(nli_finetuned / "ckpt" / "checkpoint_last.pt"), "--sets-dir", str(sets),
            "--data", str(nli_finetuned / "bin"), "--spm-model", str(spm_dir / "spm.model"), "--out-csv", str(out)]


def test_probe_counts_the_cut_premises_of_each_set(nli_finetuned, spm_dir, tmp_path, starts_process):
    """Each set's cut premises: a warning naming its file, and a `cut` column in the table and the CSV."""
    sets, out = tmp_path / "sets", tmp_path / "probe.csv"
    p = command_in_process(probe_command(nli_finetuned, spm_dir, sets, {
        "original": [(SHORT_TEXT, SHORT_TEXT), (LONG_TEXT, SHORT_TEXT), (SHORT_TEXT, SHORT_TEXT)],
        "shuffle_3": [(LONG_TEXT, SHORT_TEXT), (LONG_TEXT, SHORT_TEXT)]}, out))
    assert f"{sets / 'original.jsonl'}: 1 of 3 premises cut from the right to fit the model's 64 positions" in p.stderr
    assert f"{sets / 'shuffle_3.jsonl'}: 2 of 2 premises cut from the right" in p.stderr
    rows = {r["set"]: r for r in csv.DictReader(out.open())}
    assert (rows["original"]["cut"], rows["shuffle_3"]["cut"]) == ("1", "2")
    table = p.stdout.splitlines()
    assert table[0] == "| set | items | accuracy | Δ | vs | cut |"
    assert any(line.startswith("| shuffle_3 | 2 |") and line.endswith("| original | 2 |") for line in table), table


def test_probe_names_the_file_and_line_of_a_hypothesis_too_long(nli_finetuned, spm_dir, tmp_path, monkeypatch,
                                                                starts_process):
    """A hypothesis too long for the model even with one premise piece: one line naming its file and line and the
    fix, exit 1 (an input error), before any set is scored and without an --out-csv."""
    from tupe_tools.analysis import probing_eval

    scored, real = [], probing_eval.predict_labels
    monkeypatch.setattr(probing_eval, "predict_labels", lambda *a, **k: scored.append(a) or real(*a, **k))
    sets, out = tmp_path / "sets", tmp_path / "probe.csv"
    p = command_in_process(probe_command(nli_finetuned, spm_dir, sets, {
        "original": [(SHORT_TEXT, SHORT_TEXT)], "random": [(SHORT_TEXT, SHORT_TEXT), (SHORT_TEXT, LONG_TEXT)]},
        out), check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 1 and "Traceback" not in p.stderr and not out.exists() and not scored, p.stderr
    assert last.startswith(f"error: {sets / 'random.jsonl'}:2: the hypothesis is ") and last.endswith(
        "too long for the model's 64 positions even with its premise cut to one piece (at most 59); use a model "
        "with more positions, or shorten or remove that pair"), last


def test_pos_maps_of_a_learned_per_layer_prior(lm_bin, tmp_path, starts_process):
    from conftest import PRETRAIN_ARGS

    run(["fairseq-train", str(lm_bin), *PRETRAIN_ARGS, "--arch", "learned_gaussian_tiny", "--max-update", "2",
         "--save-dir", str(tmp_path / "ckpt")])
    ckpt = tmp_path / "ckpt" / "checkpoint_last.pt"
    p = command_in_process([str(BIN / "tupe-pos-maps"), str(ckpt), "--out-dir", str(tmp_path / "maps"), "--length",
                            "10"])
    assert "| layer 1 head 3 |" in p.stdout and "| head 7 |" not in p.stdout  # named by layer, not head 0..7
    logits = np.load(tmp_path / "maps" / "pos_logits.npy")
    table = torch.load(ckpt)["model"]["encoder.sentence_encoder.positions.distance_bias"].double().numpy()
    assert logits.shape == (2 * 4, 10, 10)  # layers x heads, layer-major
    for layer, head, i, j in [(0, 0, 0, 0), (1, 3, 2, 7), (1, 0, 9, 1)]:
        assert logits[layer * 4 + head, i, j] == pytest.approx(table[layer, head, abs(i - j)], abs=1e-6)


def test_pos_maps_figure_has_one_colour_scale_a_colorbar_and_axis_labels():
    from tupe_tools.analysis.pos_maps_cli import grid_figure

    rng = np.random.default_rng(0)
    logits = np.stack([rng.normal(scale=s, size=(6, 6)) + s for s in (0.1, 1.0, 5.0)])  # very different ranges
    fig = grid_figure(logits, "t")
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 3
    assert all(im.get_clim() == (logits.min(), logits.max()) for im in images)  # one scale for every head
    bars = [im.colorbar for im in images if im.colorbar is not None]
    assert len(bars) == 1 and bars[0].ax.get_ylabel() == "positional logit"  # one colorbar for the figure
    heads = [ax for ax in fig.axes if ax.get_images()]
    assert all(ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position" for ax in heads)
