"""tupe-convert-original: a checkpoint in the original TUPE release's layout (written here from the facts
of docs/original_release.md and docs/positional_encodings.md) converts to a tupe_roberta checkpoint whose outputs equal an
independent re-implementation of the original forward pass, and which the fairseq CLIs load."""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import types
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import command_in_process, run, write_lines
from corpus import labelled, lm_lines
from test_tupe_math import paper_bucket

P = "decoder.sentence_encoder."
L, D, H, FFN, MAXPOS = 2, 32, 4, 64, 24
WORDS = sorted({w for line in lm_lines(400, seed=0) for w in line.split()})
VOCAB = 4 + len(WORDS) + 1  # <s> <pad> </s> <unk>, the dict, <mask>


# --------------------------------------------------------------------------------------------
# The original layout, written from the facts (not from this plugin's modules)
# --------------------------------------------------------------------------------------------


class _Meter:  # pickled as fairseq.meters.* like the 2019 trainer's extra_state['train_meters']
    def __init__(self):
        self.val, self.avg, self.sum, self.count = 1.0, np.float64(2.5), 10.0, 4


def original_args(rel_pos: bool, normalize_before: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        arch="bert_base", task="masked_lm", criterion="masked_lm", data="/media/data/data-bin/wiki_book_32768",
        rel_pos=rel_pos, max_positions=MAXPOS, tokens_per_sample=MAXPOS, embedding_normalize=True,
        encoder_normalize_before=normalize_before, encoder_layers=L, encoder_embed_dim=D,
        encoder_ffn_embed_dim=FFN, encoder_attention_heads=H, activation_fn="gelu", pooler_activation_fn="tanh",
        dropout=0.1, attention_dropout=0.1, activation_dropout=0.0, pooler_dropout=0.1,
        optimizer="adam", adam_betas="(0.9, 0.999)", lr=[1e-4], lr_scheduler="polynomial_decay", fp16=True,
        max_sentences=16, update_freq=[1], seed=1, sample_break_mode="complete", mask_prob=0.15,
    )


def original_model(rel_pos: bool, seed: int, pos_proj: bool = False, normalize_before: bool = False,
                   heads: dict = None) -> "OrderedDict[str, torch.Tensor]":
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape, scale=1.0: torch.randn(*shape, generator=g) * scale  # noqa: E731
    lin = lambda out, inp: (rnd(out, inp, scale=inp ** -0.5), rnd(out, scale=0.2))  # noqa: E731
    ln = lambda: (1 + rnd(D, scale=0.3), rnd(D, scale=0.2))  # noqa: E731
    sd = OrderedDict()

    def put(prefix, pair):
        sd[prefix + "weight"], sd[prefix + "bias"] = pair

    sd[P + "embed_tokens.weight"] = rnd(VOCAB, D, scale=0.5)  # LM logits of a few units, as trained ones
    sd[P + "pos.weight"] = rnd(MAXPOS + 1, D)
    if pos_proj:
        put(P + "pos_proj.", lin(2 * D, D))
    else:
        put(P + "pos_q_linear.", lin(D, D))
        put(P + "pos_k_linear.", lin(D, D))
    put(P + "pos_ln.", ln())
    put(P + "emb_layer_norm.", ln())
    if normalize_before:
        put(P + "emb_out_layer_norm.", ln())
    if rel_pos:
        sd[P + "relative_attention_bias.weight"] = rnd(33, H)
        bucket = torch.tensor([[paper_bucket(j - i) for j in range(MAXPOS)] for i in range(MAXPOS)])
        bucket[:, 0], bucket[0, :] = 32, 16
        sd[P + "rp_bucket"] = bucket  # in the state where a later change of the fork made it an nn.Parameter
    for i in range(L):
        o = f"{P}layers.{i}."
        sd[o + "self_attn.in_proj_weight"], sd[o + "self_attn.in_proj_bias"] = lin(3 * D, D)
        put(o + "self_attn.out_proj.", lin(D, D))
        put(o + "self_attn_layer_norm.", ln())
        put(o + "fc1.", lin(FFN, D))
        put(o + "fc2.", lin(D, FFN))
        put(o + "final_layer_norm.", ln())
    put("decoder.lm_head.dense.", lin(D, D))
    put("decoder.lm_head.layer_norm.", ln())
    sd["decoder.lm_head.weight"] = sd[P + "embed_tokens.weight"]  # tied
    sd["decoder.lm_head.bias"] = rnd(VOCAB, scale=0.5)
    for name, classes in (heads or {}).items():
        put(f"classification_heads.{name}.dense.", lin(D, D))
        put(f"classification_heads.{name}.out_proj.", lin(classes, D))
    return sd


def save_original(path: Path, args: argparse.Namespace, model: dict, legacy: bool = True, **extra) -> Path:
    """torch.save like fairseq 2019's save_state (legacy, non-zip serialization as torch 1.2 wrote)."""
    meters = types.ModuleType("fairseq.meters")
    for name in ("AverageMeter", "TimeMeter", "StopwatchMeter"):
        cls = type(name, (_Meter,), {"__module__": "fairseq.meters"})
        setattr(meters, name, cls)
    state = {
        "args": args,
        "model": model,
        "optimizer_history": [{"criterion_name": "MaskedLmLoss", "optimizer_name": "FP16Optimizer",
                               "lr_scheduler_state": {"best": np.float64(2.04)}, "num_updates": 1000000}],
        "extra_state": {"train_iterator": {"epoch": 12, "iterations_in_epoch": 345}, "val_loss": np.float64(2.04),
                        "best": np.float64(2.04),
                        "train_meters": OrderedDict((n, getattr(meters, n)()) for n in
                                                    ("AverageMeter", "TimeMeter", "StopwatchMeter"))},
        "last_optimizer_state": {"state": {0: {"step": 3, "exp_avg": torch.zeros(4)}},
                                 "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "params": [0]}],
                                 "loss_scale": 4.0},
        **extra,
    }
    old = sys.modules.get("fairseq.meters")
    sys.modules["fairseq.meters"] = meters
    try:
        torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    finally:
        if old is None:
            del sys.modules["fairseq.meters"]
        else:
            sys.modules["fairseq.meters"] = old
    return path


def write_dict(path: Path) -> Path:
    return write_lines(path, [f"{w} {100 - i}" for i, w in enumerate(WORDS)])


# --------------------------------------------------------------------------------------------
# The original forward pass, independently, in plain torch over the original tensors
# --------------------------------------------------------------------------------------------


def original_forward(sd, args, tokens, head: str = None):
    """(features (B,T,D), LM logits (B,T,V), head logits or None) as the original computes them.

    Computed in float64 from the stored tensors, so a difference to the fp32 model is its own rounding.
    """
    t = lambda k: sd[k].double()  # noqa: E731
    d, nh = args.encoder_embed_dim, args.encoder_attention_heads
    dh, scale = d // nh, (2 * (d // nh)) ** -0.5  # content and positional logits: 1/sqrt(2 * d_head)
    B, T = tokens.shape
    ln = lambda x, p: F.layer_norm(x, (d,), t(p + "weight"), t(p + "bias"))  # noqa: E731
    gelu = lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))  # noqa: E731
    pad = tokens.eq(1)

    x = t(P + "embed_tokens.weight")[tokens]  # no scaling, no input positional embedding
    x = ln(x, P + "emb_layer_norm.")
    x = x * (~pad).unsqueeze(-1).double()

    rows = ln(t(P + "pos.weight")[: T + 1], P + "pos_ln.")  # (T+1, d)
    if P + "pos_proj.weight" in sd:
        wq, wk = t(P + "pos_proj.weight").split(d)
        bq, bk = t(P + "pos_proj.bias").split(d)
    else:
        wq, bq = t(P + "pos_q_linear.weight"), t(P + "pos_q_linear.bias")
        wk, bk = t(P + "pos_k_linear.weight"), t(P + "pos_k_linear.bias")
    qp = (rows @ wq.T + bq).view(T + 1, nh, dh).transpose(0, 1) * scale
    kp = (rows @ wk.T + bk).view(T + 1, nh, dh).transpose(0, 1)
    full = qp @ kp.transpose(1, 2)  # (H, T+1, T+1)
    theta1, theta2 = full[:, 0, 0].clone(), full[:, 1, 1].clone()
    bias = full[:, 1:, 1:].clone()
    bias[:, :, 0] = theta2[:, None]
    bias[:, 0, :] = theta1[:, None]
    if args.rel_pos:
        bucket = torch.tensor([[paper_bucket(j - i) for j in range(T)] for i in range(T)])
        bucket[:, 0], bucket[0, :] = 32, 16
        bias = bias + t(P + "relative_attention_bias.weight")[bucket].permute(2, 0, 1)

    pre = args.encoder_normalize_before
    for i in range(args.encoder_layers):
        o = f"{P}layers.{i}."
        residual, h = x, (ln(x, o + "self_attn_layer_norm.") if pre else x)
        q, k, v = (h @ t(o + "self_attn.in_proj_weight").T + t(o + "self_attn.in_proj_bias")).chunk(3, dim=-1)
        heads = lambda y: y.view(B, T, nh, dh).transpose(1, 2)  # noqa: E731
        logits = (heads(q) * scale) @ heads(k).transpose(-1, -2) + bias
        logits = logits.masked_fill(pad[:, None, None, :], float("-inf"))
        a = (torch.softmax(logits, dim=-1) @ heads(v)).transpose(1, 2).reshape(B, T, d)
        x = residual + a @ t(o + "self_attn.out_proj.weight").T + t(o + "self_attn.out_proj.bias")
        x = x if pre else ln(x, o + "self_attn_layer_norm.")
        residual, h = x, (ln(x, o + "final_layer_norm.") if pre else x)
        h = gelu(h @ t(o + "fc1.weight").T + t(o + "fc1.bias")) @ t(o + "fc2.weight").T + t(o + "fc2.bias")
        x = residual + h
        x = x if pre else ln(x, o + "final_layer_norm.")
    if pre:
        x = ln(x, P + "emb_out_layer_norm.")

    lm = gelu(x @ t("decoder.lm_head.dense.weight").T + t("decoder.lm_head.dense.bias"))
    lm = ln(lm, "decoder.lm_head.layer_norm.") @ t(P + "embed_tokens.weight").T + t("decoder.lm_head.bias")
    out = None
    if head is not None:
        c = f"classification_heads.{head}."
        out = torch.tanh(x[:, 0] @ t(c + "dense.weight").T + t(c + "dense.bias"))
        out = out @ t(c + "out_proj.weight").T + t(c + "out_proj.bias")
    return x, lm, out


def batches():
    g = torch.Generator().manual_seed(7)
    full = torch.randint(4, VOCAB - 1, (2, 13), generator=g)
    full[:, 0], full[:, -1] = 0, 2
    padded = torch.randint(4, VOCAB - 1, (3, 17), generator=g)
    padded[:, 0] = 0
    for row, n in enumerate([17, 9, 4]):  # right padding
        padded[row, n - 1] = 2
        padded[row, n:] = 1
    return {"no_padding": full, "right_padding": padded}


def max_diff_against_original(model, sd, args, head=None):
    diffs = {}
    for name, tokens in batches().items():
        with torch.no_grad():
            want_x, want_lm, want_head = original_forward(sd, args, tokens, head)
            got_x, _ = model(tokens, features_only=True)
            got_lm, _ = model(tokens)
            assert got_x.dtype == torch.float32
            diffs[name] = max((got_x - want_x).abs().max().item(), (got_lm - want_lm).abs().max().item())
            if head is not None:
                got_head, _ = model(tokens, classification_head_name=head)
                diffs[name] = max(diffs[name], (got_head - want_head).abs().max().item())
    return diffs


def load_converted(path: Path):
    from tupe_plugin import TupeRobertaModel

    hub = TupeRobertaModel.from_pretrained(str(path.parent), checkpoint_file=path.name,
                                           data_name_or_path=str(path.parent), bpe=None)
    return hub.model.eval()


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

VARIANTS = {"tupe_a": False, "tupe_r": True}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Original-layout TUPE-A and TUPE-R (TUPE-R with a classification head), converted by tupe-convert-original."""
    out = {}
    for variant, rel_pos in VARIANTS.items():
        d = tmp_path_factory.mktemp(f"orig_{variant}")
        heads = {"sentence_classification_head": 3} if rel_pos else None
        sd = original_model(rel_pos, seed=11 + rel_pos, heads=heads)
        src = save_original(d / "checkpoint_best.pt", original_args(rel_pos), sd)
        write_dict(d / "dict.txt")
        dest = d / "converted" / "model.pt"
        p = command_in_process(["tupe-convert-original", str(src), str(dest), "--dict", str(d / "dict.txt")])
        out[variant] = (dest, sd, original_args(rel_pos), p.stdout)
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_converted_outputs_equal_the_original_forward(converted, variant):
    dest, sd, args, log = converted[variant]
    assert f"arch {variant}_base" in log and (dest.parent / "dict.txt").is_file()
    model = load_converted(dest)
    assert model.positional_variant.name == variant
    head = "sentence_classification_head" if args.rel_pos else None
    diffs = max_diff_against_original(model, sd, args, head)
    print(f"{variant}: max abs diff {diffs}")
    assert all(v <= 1e-5 for v in diffs.values()), diffs


def test_converted_checkpoint_records_variant_and_config(converted):
    from tupe_tools.checkpoint_record import checkpoint_info, fairseq_args

    dest, _, _, log = converted["tupe_r"]
    info = checkpoint_info(str(dest))
    assert f"fine-tune with: {fairseq_args(info)} --restore-file {dest} " in log  # every flag that rebuilds it
    assert info["arch"] == "tupe_r_base" and info["variant"] == "tupe_r" and info["max_positions"] == MAXPOS
    assert (info["encoder_layers"], info["encoder_embed_dim"], info["encoder_attention_heads"]) == (L, D, H)
    assert fairseq_args(info).startswith(
        f"--arch tupe_r_base --max-positions {MAXPOS} --encoder-layers {L} --encoder-embed-dim {D} "
        f"--encoder-attention-heads {H} --encoder-ffn-embed-dim ")  # the sizes: a resized arch rebuilds as trained
    assert " --no-input-pe --untied-pos --untie-cls --rel-pos " in fairseq_args(info)
    state = torch.load(dest, map_location="cpu")  # weights_only, plugin allowlist
    assert all(v.dtype in (torch.float32, torch.int64, torch.uint8) for v in state["model"].values())  # uint8: the record
    assert state["extra_state"]["tupe_convert_original"]["source_num_updates"] == 1000000
    model_args = vars(state["cfg"]["model"])  # the Namespace fairseq-train would parse (legacy-args model)
    assert model_args["classification_head_style"] == "release"  # the release's GLUE head
    assert not any(k.startswith("decoder.") or "in_proj" in k or "rp_bucket" in k for k in state["model"])


def convert_in_process(tmp_path, sd, args, **kwargs):
    from tupe_tools.convert_original import convert

    src = save_original(tmp_path / "orig.pt", args, sd, **kwargs.pop("save", {}))
    dest = tmp_path / "out" / "model.pt"
    convert(str(src), str(dest), **kwargs)
    return dest


def test_pos_proj_layout_fp16_weights_and_pre_ln(tmp_path):
    """The fork's earlier stacked ``pos_proj``, fp16 weights (--fp16 training saves them) and Pre-LN."""
    args = original_args(rel_pos=True, normalize_before=True)
    sd = original_model(True, seed=5, pos_proj=True, normalize_before=True)
    sd = OrderedDict((k, v.half() if v.is_floating_point() else v) for k, v in sd.items())
    sd["decoder.lm_head.weight"] = sd[P + "embed_tokens.weight"]
    dest = convert_in_process(tmp_path, sd, args, save={"legacy": False},
                              dict_path=str(write_dict(tmp_path / "dict.txt")))
    diffs = max_diff_against_original(load_converted(dest), sd, args)
    print(f"pos_proj + fp16 + pre-LN: max abs diff {diffs}")
    assert all(v <= 1e-5 for v in diffs.values()), diffs


def test_refuses_unknown_and_missing_keys_with_a_list(tmp_path):
    from tupe_tools.convert_original import ConversionError

    sd = original_model(True, seed=1)
    sd[P + "segment_embeddings.weight"] = torch.zeros(2, D)
    sd["decoder.sentence_encoder.layers.2.fc1.weight"] = torch.zeros(FFN, D)
    del sd[P + "layers.1.fc2.bias"], sd[P + "pos_ln.weight"]
    with pytest.raises(ConversionError) as e:
        convert_in_process(tmp_path, sd, original_args(True))
    msg = str(e.value)
    assert "2 unknown key(s)" in msg and P + "segment_embeddings.weight" in msg and P + "layers.2.fc1.weight" in msg
    assert "2 missing key(s)" in msg and P + "layers.1.fc2.bias" in msg and P + "pos_ln.weight" in msg
    assert not (tmp_path / "out" / "model.pt").exists()


def test_refuses_wrong_shapes_and_a_foreign_dictionary(tmp_path):
    from tupe_tools.convert_original import ConversionError

    sd = original_model(False, seed=1)
    sd[P + "layers.0.fc1.weight"] = torch.zeros(FFN + 1, D)
    with pytest.raises(ConversionError, match=r"layers\.0\.fc1\.weight has shape \(65, 32\), expected \(64, 32\)"):
        convert_in_process(tmp_path, sd, original_args(False))
    write_lines(tmp_path / "small_dict.txt", ["a 1", "b 1"])
    with pytest.raises(ConversionError, match="not this checkpoint's dictionary"):
        convert_in_process(tmp_path, original_model(False, seed=1), original_args(False),
                           dict_path=str(tmp_path / "small_dict.txt"))


def test_refuses_to_overwrite_without_force(tmp_path):
    from tupe_tools.convert_original import ConversionError

    dest = convert_in_process(tmp_path, original_model(False, seed=1), original_args(False))
    before = dest.stat().st_mtime_ns
    with pytest.raises(ConversionError, match="exists; pass --force"):
        convert_in_process(tmp_path, original_model(False, seed=2), original_args(False))
    assert dest.stat().st_mtime_ns == before
    convert_in_process(tmp_path, original_model(False, seed=2), original_args(False), force=True)
    assert [p.name for p in dest.parent.iterdir()] == ["model.pt"]  # no temporary left beside it


def test_refuses_to_replace_another_dict_beside_the_output(tmp_path):
    from tupe_tools.convert_original import ConversionError

    (tmp_path / "out").mkdir()
    write_lines(tmp_path / "out" / "dict.txt", ["something 1"])
    with pytest.raises(ConversionError, match="dict.txt exists and differs"):
        convert_in_process(tmp_path, original_model(False, seed=1), original_args(False),
                           dict_path=str(write_dict(tmp_path / "dict.txt")))
    assert not (tmp_path / "out" / "model.pt").exists()


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy_format", "zip_format"])
def test_refuses_a_pickle_with_a_disallowed_global(tmp_path, legacy):
    marker = tmp_path / "pwned"
    src = save_original(tmp_path / "evil.pt", original_args(True), original_model(True, seed=1), legacy=legacy,
                        extra_state={"payload": _Evil(marker)})
    p = command_in_process(["tupe-convert-original", str(src), str(tmp_path / "out.pt")], check=False)
    assert p.returncode == 1, p.stderr  # failed on its input (exit 2 is usage/settings)
    assert "system" in p.stderr and "Nothing from the file was executed" in p.stderr
    assert not marker.exists() and not (tmp_path / "out.pt").exists()


def convert_first(path: Path) -> str:
    """The end of the refusal of an original-release file by any command but the converter."""
    return (f"; it looks like a checkpoint of the original TUPE release (or of a 2019 fairseq): convert it first "
            f"with tupe-convert-original {path} OUT.pt (docs/original_release.md), then pass OUT.pt")


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy_format", "zip_format"])
def test_other_commands_on_an_original_checkpoint_say_to_convert_it(tmp_path, legacy, monkeypatch):
    """The globals only a 2019 fairseq pickled (a numpy scalar, ``fairseq.meters``) name the converter, not
    fairseq-train; the converter itself reads them."""
    from tupe_common.checkpoint_file import CheckpointError, load

    scalar = tmp_path / "scalar.pt"
    torch.save({"model": {}, "best": np.float64(1.0)}, scalar, _use_new_zipfile_serialization=not legacy)
    meter = type("AverageMeter", (_Meter,), {"__module__": "fairseq.meters"})
    monkeypatch.setitem(sys.modules, "fairseq.meters", types.SimpleNamespace(AverageMeter=meter))
    meters = tmp_path / "meters.pt"
    torch.save({"model": {}, "extra_state": {"train_meters": {"loss": meter()}}}, meters,
               _use_new_zipfile_serialization=not legacy)
    for path, refused in ((scalar, r"numpy\._?core\.multiarray\.scalar"), (meters, r"fairseq\.meters\.AverageMeter")):
        with pytest.raises(CheckpointError) as e:
            load(str(path))
        assert re.fullmatch(rf"{re.escape(str(path))}: not a readable checkpoint \(UnpicklingError: Unsupported "
                            rf"global: GLOBAL {refused} .*\){re.escape(convert_first(path))}", str(e.value)), e.value
    src = save_original(tmp_path / "checkpoint.pt", original_args(True), original_model(True, seed=1), legacy=legacy)
    p = command_in_process(["tupe-checkpoint-info", str(src)], check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 1 and last.startswith(f"error: {src}: not a readable checkpoint"), p.stderr
    assert last.endswith(convert_first(src)) and "fairseq-train wrote" not in last, last
    assert command_in_process(["tupe-convert-original", str(src), str(tmp_path / "out.pt")]).returncode == 0


@pytest.mark.parametrize("content", [b"hello world\n", bytes(range(256)) * 8], ids=["text", "binary"])
def test_a_file_that_is_not_a_checkpoint_is_named_so(tmp_path, content):
    src = tmp_path / "notes.pt"
    src.write_bytes(content)
    p = command_in_process(["tupe-convert-original", str(src), str(tmp_path / "out.pt")], check=False)
    assert p.returncode == 1, p.stderr  # failed on its input (exit 2 is usage/settings)
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"{src}: not a checkpoint" in last, p.stderr
    assert "weights_only" not in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out.pt").exists()


def test_torch_advice_is_cut_from_an_unreadable_checkpoint(tmp_path):
    """A torch file the weights-only unpickler refuses: its reason, not torch's weights_only=False advice."""
    from tupe_tools.original_release import ConversionError, load_original

    src = tmp_path / "truncated.pt"
    torch.save({"model": {"w": torch.zeros(3)}}, src)
    src.write_bytes(src.read_bytes()[:200])  # a zip with its central directory cut off
    torch.save({"model": {"w": torch.zeros(3)}}, tmp_path / "ok.pt", _use_new_zipfile_serialization=False)
    legacy = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "legacy_cut.pt").write_bytes(legacy[:60])
    for path in (src, tmp_path / "legacy_cut.pt"):
        with pytest.raises(ConversionError) as e:
            load_original(str(path))
        assert str(path) in str(e.value) and "weights_only" not in str(e.value), e.value


# --------------------------------------------------------------------------------------------
# The converted checkpoint in the real fairseq CLIs
# --------------------------------------------------------------------------------------------

MODEL_FLAGS = ["--encoder-layers", str(L), "--encoder-embed-dim", str(D), "--encoder-ffn-embed-dim", str(FFN),
               "--encoder-attention-heads", str(H), "--max-positions", str(MAXPOS)]


@pytest.fixture(scope="module")
def original_vocab_data(converted, tmp_path_factory, starts_process):
    """masked_lm and sentence_prediction binaries over the converted checkpoint's own dict.txt."""
    d = tmp_path_factory.mktemp("orig_data")
    dict_txt = converted["tupe_r"][0].parent / "dict.txt"
    write_lines(d / "train.txt", lm_lines(200, seed=1))
    write_lines(d / "valid.txt", lm_lines(40, seed=2))
    run(["fairseq-preprocess", "--only-source", "--srcdict", str(dict_txt), "--trainpref", str(d / "train.txt"),
         "--validpref", str(d / "valid.txt"), "--destdir", str(d / "lm"), "--workers", "1"])
    for split, items in {"train": labelled(64, seed=3), "valid": labelled(16, seed=4)}.items():
        write_lines(d / f"{split}.input0", [s for s, _ in items])
        write_lines(d / f"{split}.label", [str(y) for _, y in items])
    run(["fairseq-preprocess", "--only-source", "--srcdict", str(dict_txt), "--trainpref", str(d / "train.input0"),
         "--validpref", str(d / "valid.input0"), "--destdir", str(d / "cls" / "input0"), "--workers", "1"])
    run(["fairseq-preprocess", "--only-source", "--trainpref", str(d / "train.label"),
         "--validpref", str(d / "valid.label"), "--destdir", str(d / "cls" / "label"), "--workers", "1"])
    return d


@pytest.mark.parametrize("resets", [True, False], ids=["finetune_resets", "no_resets"])
def test_fairseq_train_restores_the_converted_checkpoint(converted, original_vocab_data, tmp_path, resets, starts_process):
    dest = converted["tupe_r"][0]
    reset = ["--reset-optimizer", "--reset-dataloader", "--reset-meters"] if resets else []
    p = run(["fairseq-train", str(original_vocab_data / "cls"), "--user-dir", "tupe_plugin",
             "--task", "sentence_prediction", "--criterion", "sentence_prediction", "--num-classes", "2",
             "--init-token", "0", "--separator-token", "2", "--arch", "tupe_r_base", *MODEL_FLAGS,
             "--optimizer", "adam", "--lr", "1e-4", "--batch-size", "8", "--max-update", "2",
             "--restore-file", str(dest), *reset, "--cpu", "--num-workers", "0",
             "--log-format", "simple", "--log-interval", "1", "--save-dir", str(tmp_path / "ft"),
             "--no-epoch-checkpoints"])
    log = p.stdout + p.stderr
    assert re.search(r"[Ll]oaded checkpoint .*model\.pt", log), log[-3000:]
    assert "positional variant: tupe_r" in log
    losses = [float(x) for x in re.findall(r"train_inner\W.*?loss=([0-9.]+)", log)]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), log[-3000:]


def test_fairseq_validate_runs_masked_lm_on_the_converted_checkpoint(converted, original_vocab_data, starts_process):
    dest = converted["tupe_r"][0]
    p = run(["fairseq-validate", str(original_vocab_data / "lm"), "--path", str(dest), "--user-dir", "tupe_plugin",
             "--task", "masked_lm", "--criterion", "masked_lm", "--tokens-per-sample", str(MAXPOS),
             "--batch-size", "8", "--cpu", "--num-workers", "0", "--log-format", "simple"])
    log = p.stdout + p.stderr
    loss = re.findall(r"valid on 'valid' subset.*?\| loss ([0-9.]+)", log)
    assert loss and math.isfinite(float(loss[-1])), log[-3000:]
    print(f"fairseq-validate masked_lm loss on the converted tiny checkpoint: {loss[-1]}")


def test_the_flags_of_a_converted_checkpoint_rebuild_its_layers(tmp_path):
    """tupe-finetune rebuilds a model from checkpoint_info's flags (fairseq_args) and restores the weights into it:
    a converted original with ReLU, Pre-LN and no layernorm on the embeddings rebuilds as converted. The flags
    carried none of the three: the activation silently became gelu, and the layer norms' keys were missing or
    unexpected."""
    from fairseq import options
    from fairseq.data import Dictionary

    from tupe_tools.checkpoint_record import checkpoint_info, fairseq_args
    from tupe_tools.convert_original import build_plugin_model

    args = original_args(rel_pos=True, normalize_before=True)
    args.activation_fn, args.embedding_normalize = "relu", False
    sd = original_model(True, seed=6, normalize_before=True)
    del sd[P + "emb_layer_norm.weight"], sd[P + "emb_layer_norm.bias"]
    dest = convert_in_process(tmp_path, sd, args, dict_path=str(write_dict(tmp_path / "dict.txt")))
    flags = fairseq_args(checkpoint_info(str(dest)))
    assert flags.endswith(" --activation-fn relu --encoder-normalize-before --no-layernorm-embedding")
    parsed = options.parse_args_and_arch(options.get_training_parser(), [
        str(dest.parent), "--task", "masked_lm", "--criterion", "masked_lm", *flags.split()])
    dictionary = Dictionary.load(str(dest.parent / "dict.txt"))
    dictionary.add_symbol("<mask>")  # as masked_lm adds it
    rebuilt = build_plugin_model(parsed, dictionary, {})
    rebuilt.load_state_dict(torch.load(dest, map_location="cpu")["model"], strict=True)
    rebuilt.eval()
    converted = load_converted(dest)
    for tokens in batches().values():
        with torch.no_grad():
            assert torch.equal(rebuilt(tokens)[0], converted(tokens)[0])
