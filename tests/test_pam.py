"""The PAM blocks (L&S code's concat.py, seuqence.py, bert.py) against float64 loop references
written here from the formulas in docs/positional_encodings.md, section "PAM"."""
import argparse
import csv
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import BIN, PRETRAIN_ARGS, ROOT, command_in_process, run
from model_utils import build, tokens
from tupe_tools.analysis.attention_maps import attention_probs
from tupe_tools.analysis.checkpoint_maps import content_free_map, load_checkpoint, positional_maps
from tupe_tools.analysis.locality_symmetry import locality
from tupe_core.registry import VARIANTS
from tupe_plugin.models import VariantMismatchError
from tupe_plugin.models.tupe_roberta import TupeRobertaModel
from tupe_core.masks import attention_mask
from tupe_core.pam import PAM_MODES, PamSelfAttention, gaussian_distance_init, window_weights
from tupe_core.base import PositionalTerm

D, H, P = 8, 2, 16  # width, heads, max positions
NO_POS = PositionalTerm(None)  # PAM variants have no shared positional term
H_TINY = 4  # heads of the *_tiny archs


def official_window(T: int) -> torch.Tensor:
    """``cal_fixed_pos_att(T, 3)`` of the official bert.py, step by step (T >= 3)."""
    a = torch.eye(T, dtype=torch.float64)
    for i in range(1, T):  # for i = 0 numpy's attn[0, -1:2] is an empty slice
        a[i, i - 1 : i + 2] = 1 / 3
    a[0, 0:2] = 1 / 3
    return a


@torch.no_grad()
def linear(layer, x):
    return layer.weight.double() @ x + layer.bias.double()


@torch.no_grad()
def reference(m: PamSelfAttention, x: torch.Tensor, length: int) -> torch.Tensor:
    """(T, C) output for one sequence ``x`` (T, C) of which the first ``length`` tokens are real,
    entry by entry: positional weights w[h, |j-i|] (or 1/3 on |j-i| <= 1) on real keys only,
    softmax(q.k / sqrt(dh)) over real keys, merge(cat[out_proj(content), positional])."""
    x = x.double()
    T, dh = x.shape[0], D // H

    def positional(inp):
        out = torch.zeros(T, D, dtype=torch.float64)
        for i in range(T):
            for j in range(length):  # padded keys weigh 0
                if m.mode == "window":
                    out[i] += (1 / 3 if abs(i - j) <= 1 else 0.0) * inp[j]
                else:
                    v = linear(m.pos_v_proj, inp[j])
                    for h in range(H):
                        s = slice(h * dh, (h + 1) * dh)
                        out[i, s] += m.pos_weight[h, abs(i - j)].double() * v[s]
        return out

    def content(inp):
        out = torch.zeros(T, D, dtype=torch.float64)
        for i in range(T):
            q = linear(m.q_proj, inp[i])
            for h in range(H):
                s = slice(h * dh, (h + 1) * dh)
                logits = [float(q[s] @ linear(m.k_proj, inp[j])[s]) / math.sqrt(dh) for j in range(length)]
                top = max(logits)
                e = [math.exp(z - top) for z in logits]
                for j in range(length):
                    out[i, s] += e[j] / sum(e) * linear(m.v_proj, inp[j])[s]
        return torch.stack([linear(m.out_proj, out[i]) for i in range(T)])

    if m.mode == "sequential":
        return content(positional(x))
    c, p = content(x), positional(x)
    return torch.stack([linear(m.merge, torch.cat([c[i], p[i]])) for i in range(T)])


def block(mode: str, attention_path: str = "explicit", seed: int = 0) -> PamSelfAttention:
    torch.manual_seed(seed)
    m = PamSelfAttention(D, H, mode=mode, max_positions=P, attention_path=attention_path).eval()
    if mode != "window":  # distinct weights per head and distance, not just the shared init
        with torch.no_grad():
            m.pos_weight.add_(0.1 * torch.randn(H, P))
    return m


def test_gaussian_init_is_attenuated_l():
    m = PamSelfAttention(D, H, mode="concat", max_positions=512)
    norm = sum(math.exp(-0.5 * d * d) for d in range(512))
    for d in range(8):
        want = torch.full((H,), math.exp(-0.5 * d * d) / norm, dtype=torch.float64)
        assert torch.allclose(m.pos_weight.detach()[:, d].double(), want)
    noted = torch.tensor([0.570, 0.346, 0.077, 0.006])  # d = 0..3 as the official table starts
    assert torch.allclose(m.pos_weight.detach()[:, :4], noted.expand(H, 4), atol=5e-4)


@pytest.mark.parametrize("T", [3, 4, 7, 12])
def test_window_matches_official_band(T):
    w = window_weights(T, dtype=torch.float64)
    assert torch.equal(w, official_window(T))
    assert abs(float(w[0].sum()) - 2 / 3) < 1e-12 and abs(float(w[-1].sum()) - 2 / 3) < 1e-12
    assert torch.allclose(w[1:-1].sum(-1), torch.ones(T - 2, dtype=torch.float64))


@pytest.mark.parametrize("attention_path", ["explicit", "sdpa"])
@pytest.mark.parametrize("mode", PAM_MODES)
def test_block_matches_loop_reference_with_padding(mode, attention_path):
    m = block(mode, attention_path).double()
    T, lengths = 7, [7, 4]
    x = torch.randn(T, len(lengths), D, dtype=torch.float64)
    pad = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)
    out, _ = m(x, attention_mask(None, pad, torch.float64), NO_POS, pad)
    for b, n in enumerate(lengths):
        want = reference(m, x[:, b], n)
        assert torch.allclose(out[:n, b], want[:n], atol=1e-10), (mode, b)


@pytest.mark.parametrize("mode", PAM_MODES)
def test_padded_batch_equals_each_sequence_alone(mode):
    m = block(mode, "sdpa")
    T, lengths = 9, [9, 5, 2]
    x = torch.randn(T, len(lengths), D)
    pad = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]
    x = x.masked_fill(pad.t().unsqueeze(-1), 0.0)  # as the encoder zeroes padded embeddings
    batched, _ = m(x, attention_mask(None, pad, x.dtype), NO_POS, pad)
    for b, n in enumerate(lengths):
        alone, _ = m(x[:n, b : b + 1], None, NO_POS)
        assert (batched[:n, b] - alone[:, 0]).abs().max() <= 1e-5, (mode, b)


def test_need_weights_returns_content_probabilities():
    m = block("concat")
    x = torch.randn(5, 2, D)
    _, w = m(x, None, NO_POS, need_weights=True)
    assert w.shape == (2, H, 5, 5) and torch.allclose(w.sum(-1), torch.ones(2, H, 5))


def test_learned_weights_get_gradients_window_has_none():
    m = block("concat").train()
    m(torch.randn(6, 2, D), None, NO_POS)[0].sum().backward()
    assert m.pos_weight.grad is not None and m.pos_weight.grad[:, :6].abs().sum() > 0
    assert torch.all(m.pos_weight.grad[:, 6:] == 0)  # distances never seen
    assert not any("pos" in n for n, _ in block("window").named_parameters())


def test_position_weights_are_the_exact_map():
    m = block("sequential")
    w = m.position_weights(5)
    for h in range(H):
        for i in range(5):
            for j in range(5):
                assert w[h, i, j] == m.pos_weight[h, abs(i - j)]


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="PAM mode"):
        PamSelfAttention(D, H, mode="gaussian", max_positions=P)
    with pytest.raises(ValueError, match="--max-positions"):
        block("concat")(torch.randn(P + 1, 1, D), None, NO_POS)


# ---- the registered variants pam_concat / pam_sequential / pam_window in the whole model ----


@pytest.mark.parametrize("mode", PAM_MODES)
def test_registered_variant_builds_pam_layers_without_input_pe(mode):
    model = build(f"pam_{mode}_tiny", max_positions=32)
    enc = model.encoder.sentence_encoder
    assert VARIANTS[f"pam_{mode}"].options("pam").mode == mode
    assert enc.embed_positions is None  # no PE at the input
    assert all(isinstance(layer.self_attn, PamSelfAttention) and layer.self_attn.mode == mode for layer in enc.layers)
    tables = [k for k in model.state_dict() if k.endswith("self_attn.pos_weight")]
    assert len(tables) == (0 if mode == "window" else len(enc.layers))  # one (H, max_positions) per layer
    assert all(model.state_dict()[k].shape == (enc.layers[0].self_attn.num_heads, 32) for k in tables)


@pytest.mark.parametrize("saved,loaded", [("pam_concat", "pam_sequential"), ("pam_window", "nope")])
def test_checkpoint_of_one_pam_variant_refuses_to_load_as_another(saved, loaded):
    with pytest.raises(VariantMismatchError) as err:
        build(f"{loaded}_tiny").load_state_dict(build(f"{saved}_tiny").state_dict(), strict=False)
    assert f"'{saved}'" in str(err.value) and f"--arch {saved}_base" in str(err.value)


def save_checkpoint(model, path):
    """The parts of a fairseq checkpoint that the analysis commands read."""
    a = model.args
    args = argparse.Namespace(arch=a.arch, max_positions=a.max_positions, encoder_layers=a.encoder_layers,
                              encoder_embed_dim=a.encoder_embed_dim, encoder_attention_heads=a.encoder_attention_heads,
                              encoder_ffn_embed_dim=a.encoder_ffn_embed_dim)
    torch.save({"model": model.state_dict(), "args": args}, path)


@pytest.mark.parametrize("mode", PAM_MODES)
def test_position_maps_are_the_exact_pam_weights(mode, tmp_path):
    model = build(f"pam_{mode}_tiny", max_positions=32)
    layers = model.encoder.sentence_encoder.layers
    if mode != "window":  # trained-looking tables: different per layer, head and distance
        with torch.no_grad():
            for layer in layers:
                layer.self_attn.pos_weight.normal_()
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(model, path)
    T = 10
    values, probs, per_layer = positional_maps(str(path), T)
    assert per_layer is (mode != "window")  # declared by the encoding, not read from the shape
    if mode == "window":
        want = [[[1 / 3 if abs(i - j) <= 1 else 0.0 for j in range(T)] for i in range(T)]]
    else:
        want = [[[[float(layer.self_attn.pos_weight[h, abs(i - j)]) for j in range(T)] for i in range(T)]
                 for h in range(H_TINY)] for layer in layers]
    np.testing.assert_allclose(values, np.array(want), rtol=0, atol=1e-7)
    assert probs is values or np.array_equal(probs, values)  # used as weights: no softmax
    assert content_free_map(*load_checkpoint(str(path)), T).weights  # weights, so tupe-locality takes no softmax


# ---- through the real CLIs: pre-train a PAM model, load, map and fine-tune its checkpoint ----


def test_pam_checkpoint_loads_maps_and_finetunes_through_the_clis(lm_bin, spm_dir, tmp_path, starts_process):
    """The generic loss-falls run of every variant is in test_fairseq_cli.py; here a pam_concat checkpoint
    goes through from_pretrained, tupe-pos-maps, tupe-locality --text and glue/finetune.sh, which must
    rebuild the PAM model from the checkpoint's record."""
    save = tmp_path / "pretrain"
    run(["fairseq-train", str(lm_bin), *PRETRAIN_ARGS, "--arch", "pam_concat_tiny", "--max-update", "6",
         "--save-dir", str(save)])
    hub = TupeRobertaModel.from_pretrained(str(save), checkpoint_file="checkpoint_last.pt",
                                           data_name_or_path=str(lm_bin), bpe=None)
    layers = hub.model.encoder.sentence_encoder.layers
    saved = torch.load(save / "checkpoint_last.pt", map_location="cpu")["model"]
    assert all(isinstance(layer.self_attn, PamSelfAttention) for layer in layers)
    for i, layer in enumerate(layers):  # the trained tables, not a fresh Gaussian init
        key = f"encoder.sentence_encoder.layers.{i}.self_attn.pos_weight"
        assert torch.equal(layer.self_attn.pos_weight.detach().float(), saved[key].float())
        assert not torch.allclose(saved[key].float(), gaussian_distance_init(H_TINY, saved[key].shape[1]))

    # tupe-pos-maps: the trained weights themselves (layer-major), no softmax
    ckpt, maps = save / "checkpoint_last.pt", tmp_path / "maps"
    command_in_process([str(BIN / "tupe-pos-maps"), str(ckpt), "--out-dir", str(maps), "--length", "10"])
    values, probs = np.load(maps / "pos_logits.npy"), np.load(maps / "pos_probs.npy")
    assert values.shape == (len(layers) * H_TINY, 10, 10) and np.array_equal(values, probs)
    for layer, head, i, j in [(0, 0, 0, 0), (1, 3, 2, 7), (1, 0, 9, 1)]:
        key = f"encoder.sentence_encoder.layers.{layer}.self_attn.pos_weight"
        assert values[layer * H_TINY + head, i, j] == pytest.approx(float(saved[key][head, abs(i - j)]), abs=1e-6)
    # tupe-locality: one position row per layer and head, plus the content attention of real text
    text, table = tmp_path / "text.txt", tmp_path / "ls.csv"
    text.write_text("the cat happily saw the river .\na dog found the bridge today .\n")
    command_in_process([str(BIN / "tupe-locality"), str(ckpt), "--length", "10", "--text", str(text), "--spm-model",
                        str(spm_dir / "spm.model"), "--data", str(lm_bin), "--out-csv", str(table)])
    rows = list(csv.DictReader(table.open()))
    pos = {(r["layer"], r["head"]): r for r in rows if r["source"] == "position" and r["head"] != "mean"}
    assert len(pos) == len(layers) * H_TINY
    assert float(pos[("1", "2")]["locality"]) == pytest.approx(locality(values[H_TINY + 2]), abs=1e-6)
    assert len([r for r in rows if r["source"].startswith("attention (2 sentences)")]) == len(layers) * H_TINY + 1
    glue_bin, runs = tmp_path / "glue-bin", tmp_path / "runs"
    run([sys.executable, "-m", "tupe_preprocess.glue_binarize", "--glue-dir", str(ROOT / "tests/data/glue"),
         "--tasks", "RTE", "--spm-model", str(spm_dir / "spm.model"), "--dict", str(spm_dir / "dict.txt"),
         "--out-dir", str(glue_bin)])
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               CHECKPOINT=str(save / "checkpoint_last.pt"), GLUE_BIN=str(glue_bin), RUNS=str(runs),
               EPOCHS="1", SENTENCES_PER_BATCH="16", NUM_WORKERS="0", TRUNCATE="1")
    p = subprocess.run([str(ROOT / "glue/finetune.sh"), "RTE", "1e-3", "1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    run_dir = runs / "RTE" / "lr1e-3_seed1"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["checkpoint_variant"] == "pam_concat" and 0 <= result["best_valid"]["valid"] <= 100
    assert "--arch pam_concat_tiny" in (run_dir / "command.txt").read_text()
    log = (run_dir / "train.log").read_text()
    assert "positional variant: pam_concat " in log and "--attention-block pam_concat" in log


@pytest.mark.parametrize("mode", PAM_MODES)
def test_real_attention_maps_are_the_content_attention(mode):
    """tupe-locality --text reads every layer's content attention (attention_maps.attention_probs);
    layer 1's equals softmax(q k^T / sqrt(dh)) of the embedded tokens (of pos(x) for sequential)."""
    model = build(f"pam_{mode}_tiny", seed=2)
    x = tokens(1, 9, seed=3)
    probs = attention_probs(model, x[0])  # (L, H, T, T)
    enc = model.encoder.sentence_encoder
    attn = enc.layers[0].self_attn
    with torch.no_grad():
        emb = enc.forward_embedding(x)[0].transpose(0, 1)  # (T, 1, C)
        inp = (attn.positional_attention(emb, None) if mode == "sequential" else emb)[:, 0].double()
    T, dh = inp.shape[0], attn.head_dim
    for h in range(H_TINY):
        s = slice(h * dh, (h + 1) * dh)
        q = [linear(attn.q_proj, inp[i])[s] for i in range(T)]
        k = [linear(attn.k_proj, inp[j])[s] for j in range(T)]
        for i in range(T):
            e = [math.exp(float(q[i] @ k[j]) / math.sqrt(dh)) for j in range(T)]
            want = torch.tensor([v / sum(e) for v in e], dtype=torch.float64)
            assert torch.allclose(probs[0, h, i].double(), want, atol=1e-5), (h, i)
