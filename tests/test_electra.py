"""ELECTRA (``--task electra --criterion electra``): the loss against a plain reference, gradients, sharing,
padding, the masking split, real fairseq-train runs per attention-block kind, resume after kill -9,
fine-tuning through glue/finetune.sh, tupe-checkpoint-info and the HF export of the discriminator."""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY

from conftest import BIN, PRETRAIN_ARGS, ROOT, fairseq_train_in_one_process, run
from model_utils import build, tokens
from tupe_plugin import TupeRobertaModel
from tupe_plugin.build_task import DictionaryTask, numbered_dictionary
from tupe_plugin.criterions.electra import ElectraCriterion
from tupe_core.facts import GENERATOR_DIVISORS, SIZES, generator_sizes
from tupe_plugin.models.electra import ElectraModel, find_masked_positions

PAD, MASK = 1, 43  # model_utils' dictionary: 4 specials + 40 words; the last word stands in for <mask>
ELECTRA_ARGS = ["electra" if a == "masked_lm" else a for a in PRETRAIN_ARGS]  # --task and --criterion


def electra(arch: str = "tupe_r_tiny", seed: int = 0, divisor: int = 0) -> ElectraModel:
    return ElectraModel.from_discriminator(build(arch, seed=seed), divisor).eval()


def masked_batch(seed: int = 0):
    """(input with <mask>/kept tokens, targets: original at the selected positions, pad elsewhere), padded."""
    x = tokens(3, 12, seed=seed)
    x[1, 9:] = PAD
    x[2, 6:] = PAD
    g = torch.Generator().manual_seed(seed + 1)
    selected = (torch.rand(x.shape, generator=g) < 0.4) & x.ne(PAD)
    selected[:, 0] = False
    targets = torch.where(selected, x, torch.full_like(x, PAD))
    src = x.clone()
    src[selected & (torch.rand(x.shape, generator=g) < 0.85)] = MASK
    return src, targets


def criterion(weight: float = 50.0) -> ElectraCriterion:
    return ElectraCriterion(DictionaryTask(numbered_dictionary(44), 64), disc_weight=weight)


# ---- in-process math ---------------------------------------------------------------------------------


def test_generator_sizes_follow_electra():
    assert set(GENERATOR_DIVISORS) == set(SIZES)  # one default per registered size
    args = type("A", (), dict(encoder_layers=12, encoder_embed_dim=768, encoder_ffn_embed_dim=3072,
                              encoder_attention_heads=12))
    assert generator_sizes(args, 3) == dict(generator_layers=12, generator_embed_dim=256,
                                            generator_ffn_embed_dim=1024, generator_attention_heads=4)
    with pytest.raises(ValueError, match="--generator-size-divisor 5"):
        generator_sizes(args, 5)
    m = electra()
    gen = m.generator.sentence_encoder
    assert (len(gen.layers), gen.layers[0].embed_dim, gen.layers[0].fc1.out_features) == (2, 16, 32)  # tiny: 1/4
    assert m.args.generator_embed_dim == 16 and not hasattr(m.encoder, "lm_head")


@pytest.mark.parametrize("arch", ["tupe_r_tiny", "bert_a_tiny"])
def test_shared_embeddings_are_one_tensor_and_positional_parts_per_network(arch):
    m = electra(arch)
    disc, gen = m.encoder.sentence_encoder, m.generator.sentence_encoder
    assert gen.embed_tokens.weight is disc.embed_tokens.weight
    assert m.generator.lm_head.weight is disc.embed_tokens.weight  # the generator's output layer is tied
    assert gen.layernorm_embedding.weight is disc.layernorm_embedding.weight
    assert gen.embed_positions is disc.embed_positions and (disc.embed_positions is not None) == (arch == "bert_a_tiny")
    assert gen.positions is not disc.positions
    if arch == "tupe_r_tiny":  # U^Q at each network's width, relative table per network's heads
        assert gen.positions.pos_q_linear.weight.shape == (16, 16) and disc.positions.pos_q_linear.weight.shape == (64, 64)
        assert gen.positions.relative_attention_bias.weight.shape == (33, 1)
    own = {id(p) for p in m.generator.parameters()} - {id(p) for p in m.encoder.parameters()}
    tensors = {id(p) for _, p in m.named_parameters(remove_duplicate=False)}
    assert len(tensors) == len(list(m.encoder.parameters())) + len(own) + 4  # + the replaced-token head
    state = m.state_dict()  # the shared keys of a checkpoint hold one storage
    for key in ("embed_tokens.weight", "layernorm_embedding.weight"):
        assert state["generator.sentence_encoder." + key].data_ptr() == state["encoder.sentence_encoder." + key].data_ptr()


def reference_loss(out, src, targets, weight):
    """The ELECTRA loss written plainly: labels, CE mean over masked tokens, BCE mean over non-pad tokens."""
    masked = targets.ne(PAD)
    original = targets[masked]
    corrupted = src.clone()
    corrupted[masked] = out.sampled
    labels = (masked & (corrupted != targets)).float()
    logits = out.gen_logits.double()
    ce = (torch.logsumexp(logits, -1) - logits.gather(1, original[:, None]).squeeze(1)).mean()
    z, y = out.disc_logits.double()[src.ne(PAD)], labels[src.ne(PAD)].double()
    bce = -(y * torch.log(torch.sigmoid(z)) + (1 - y) * torch.log(1 - torch.sigmoid(z))).mean()
    return ce + weight * bce, labels


@pytest.mark.parametrize("weight", [50.0, 3.0])
def test_loss_equals_a_plain_reference(weight):
    m = electra()
    src, targets = masked_batch()
    fixed = int(targets[targets.ne(PAD)][0])  # the generator samples this token only:
    with torch.no_grad():
        m.generator.lm_head.bias[fixed] = 100.0  # where it is the original, the position is not replaced
    torch.manual_seed(3)
    out = m(src, targets=targets)
    want, labels = reference_loss(out, src, targets, weight)
    assert out.replaced.equal(labels.bool())
    masked = targets.ne(PAD)
    assert (out.sampled == fixed).all() and (targets[masked] == fixed).any() and 0 < out.replaced.sum() < masked.sum()
    torch.manual_seed(3)
    loss, sample_size, log = criterion(weight)(m, {"net_input": {"src_tokens": src}, "target": targets,
                                                     "ntokens": int(src.ne(PAD).sum())})
    assert sample_size == int(masked.sum()) == log["_masked"]
    assert abs(loss.item() / sample_size - want.item()) <= 1e-5
    assert log["_replaced"] == int(labels.sum()) and log["_tokens"] == int(src.ne(PAD).sum())


def test_the_generator_never_samples_pad():
    """A <pad> in the discriminator's input would read as padding (the encoder refuses padding before a real
    token): sampling leaves it out, even where the generator puts nearly all its probability on it."""
    m = electra()
    src, targets = masked_batch()
    with torch.no_grad():
        m.generator.lm_head.bias[PAD] = 30.0
    torch.manual_seed(0)
    out = m(src, targets=targets)
    assert out.gen_logits.argmax(-1).eq(PAD).all()  # the generator prefers it everywhere
    assert len(out.sampled) == int(targets.ne(PAD).sum()) > 5 and out.sampled.ne(PAD).all()


def test_discriminator_loss_sends_no_gradient_into_the_generator():
    m = electra()
    m.train()
    src, targets = masked_batch(seed=2)
    sample = {"net_input": {"src_tokens": src}, "target": targets, "ntokens": 1}

    def grads(weight):
        m.zero_grad()
        torch.manual_seed(7)  # the same dropout and samples in both runs
        criterion(weight)(m, sample)[0].backward()
        return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    full, mlm_only = grads(50.0), grads(0.0)
    shared = {id(p) for p in m.encoder.parameters()}
    own = [n for n, p in m.named_parameters() if n.startswith("generator.") and id(p) not in shared]
    assert own and all(torch.equal(full[n], mlm_only[n]) for n in own)
    embed = "encoder.sentence_encoder.embed_tokens.weight"
    assert not torch.allclose(full[embed], mlm_only[embed])  # the shared embeddings get both losses


@pytest.mark.parametrize("arch", ["tupe_r_tiny", "rope_tiny", "deberta_rel_tiny", "pam_concat_tiny"])
def test_padding_does_not_change_either_network(arch):
    m = electra(arch)
    src, targets = masked_batch(seed=4)
    masked = targets.ne(PAD)
    with torch.no_grad():
        gen = m.generator(src, find_masked_positions(targets, PAD))
        disc = m.discriminator_head(m.encoder(src, features_only=True)[0])
        for i, n in ((1, 9), (2, 6)):
            alone = m.generator(src[i:i + 1, :n], find_masked_positions(targets[i:i + 1, :n], PAD))
            rows = masked[:i].sum()
            torch.testing.assert_close(alone, gen[rows:rows + len(alone)], rtol=0, atol=1e-5)
            d = m.discriminator_head(m.encoder(src[i:i + 1, :n], features_only=True)[0])
            torch.testing.assert_close(d[0], disc[i, :n], rtol=0, atol=1e-5)


def test_masking_split_and_the_all_mask_option(lm_bin):
    from tupe_plugin.tasks.electra import ElectraConfig, ElectraTask

    def counts(**cfg) -> Dict[str, int]:
        task = ElectraTask.setup_task(ElectraConfig(data=str(lm_bin), tokens_per_sample=64,
                                                    sample_break_mode="complete", seed=1, **cfg))
        task.load_dataset("train")
        c = dict(tokens=0, selected=0, masked=0, kept=0, other=0)
        for i in range(len(task.datasets["train"])):
            item = task.datasets["train"][i]
            src, tgt = item["net_input.src_tokens"], item["target"]
            sel = tgt.ne(task.dictionary.pad())
            c["tokens"] += len(src)
            c["selected"] += int(sel.sum())
            c["masked"] += int((sel & src.eq(task.mask_idx)).sum())
            c["kept"] += int((sel & src.eq(tgt)).sum())
            c["other"] += int((~sel & src.eq(task.mask_idx)).sum())
        return c

    c = counts()
    assert c["tokens"] > 10000 and abs(c["selected"] / c["tokens"] - 0.15) < 0.01
    assert c["masked"] + c["kept"] == c["selected"] and c["other"] == 0  # no random replacement
    assert abs(c["kept"] / c["selected"] - 0.15) < 0.03
    allmask = counts(leave_unmasked_prob=0.0)
    assert allmask["kept"] == 0 and allmask["masked"] == allmask["selected"]


def test_an_electra_state_loads_as_its_discriminator_and_keeps_its_variant():
    from tupe_plugin import VariantMismatchError

    m = electra()
    state = m.state_dict()
    plain = build("tupe_r_tiny", seed=5)
    plain.load_state_dict(dict(state))  # strict: generator dropped, MLM head filled
    x = tokens(2, 10)
    with torch.no_grad():
        torch.testing.assert_close(plain(x, features_only=True)[0], m(x, features_only=True)[0], rtol=0, atol=0)
        assert plain.encoder.lm_head.weight is plain.encoder.sentence_encoder.embed_tokens.weight
    with pytest.raises(VariantMismatchError, match="'tupe_r'"):
        build("bert_a_tiny").load_state_dict(dict(state))


def plugin_imports(path: Path) -> set:
    """The tupe_plugin modules ``path`` imports (relative imports resolved), as dotted names."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if module.startswith("tupe_plugin"):
                names.add(module)
                names.update(f"{module}.{a.name}" for a in node.names)  # `from . import x`
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("tupe_plugin"))
    return names


def test_the_checkpoint_surgery_imports_neither_model_module_and_nothing_re_exports_it():
    """The surgery is read where it is defined: the model module does not hand its names on under a second path
    (issue 51: names re-exported with no importer)."""
    from tupe_plugin.models import electra

    source = ROOT / "tupe_plugin/models/electra_checkpoint.py"
    assert not plugin_imports(source) & {"tupe_plugin.models.tupe_roberta", "tupe_plugin.models.electra"}
    assert "tupe_plugin.models.tupe_roberta" in plugin_imports(ROOT / "tupe_plugin/models/electra.py")  # the check reads imports
    for name in ("is_electra_state", "objective_info", "discriminator_for_export", "GENERATOR_KEYS"):
        assert not hasattr(electra, name)
    assert electra.ElectraModel.keep_discriminator is not None  # the method, not the function, is the model's


# ---- real CLIs ---------------------------------------------------------------------------------------



def logged(log: str, pattern: str = r"train_inner") -> List[Dict[str, float]]:
    """The key=value pairs of every matching fairseq log line (--log-format simple)."""
    lines = [line for line in log.splitlines() if re.search(pattern + r" \|", line)]
    value = r"(\w+)[= ](-?[0-9.]+(?:e[+-]?[0-9]+)?|nan|inf)(?=,| \||$)"  # train_inner: k=v, ...; valid: | k v |
    return [{k: float(v) for k, v in re.findall(value, line)} for line in lines]


def train(data: Path, arch: str, save: Path, updates: int, *extra: str) -> str:
    p = run(["fairseq-train", str(data), *ELECTRA_ARGS, "--arch", arch, "--max-update", str(updates),
             "--save-dir", str(save), "--lr", "3e-3", *extra])
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def electra_run(lm_bin, tmp_path_factory):
    """TUPE-R tiny pre-trained with ELECTRA for 40 updates: (save dir, log)."""
    save = tmp_path_factory.mktemp("electra")
    return save, train(lm_bin, "tupe_roberta_tiny", save, 40)


def falls(log: str) -> None:
    rows = logged(log)
    first, last = rows[0], rows[-1]
    assert last["gen_loss"] < first["gen_loss"] - 0.3, (first, last)
    assert last["disc_loss"] < first["disc_loss"] - 0.05, (first, last)
    for key in ("gen_acc", "disc_acc", "disc_precision", "disc_recall", "replace_rate", "gen_ppl"):
        assert key in last, last
    assert 0 < last["replace_rate"] < 16  # at most the 15% selected, less what the generator gets right
    assert math.isclose(last["loss"], last["gen_loss"] + 50 * last["disc_loss"], rel_tol=0.01)


def test_fairseq_train_tupe_r_both_losses_fall_and_validation_logs_the_metrics(electra_run):
    save, log = electra_run
    falls(log)
    valid = logged(log, r"valid on 'valid' subset")
    assert valid and {"gen_loss", "gen_acc", "disc_loss", "disc_acc", "disc_precision", "disc_recall",
                      "replace_rate"} <= set(valid[-1])
    assert "ELECTRA generator: layers 2, embed_dim 16, ffn_embed_dim 32, attention_heads 1" in log


BLOCKS = ("rope_tiny", "deberta_rel_tiny", "pam_sequential_tiny")  # the variants with attention blocks of their own


@pytest.fixture(scope="module")
def block_logs(lm_bin, tmp_path_factory, starts_process) -> Dict[str, str]:
    """20 ELECTRA updates of each of BLOCKS, in one process: each arch's log."""
    return fairseq_train_in_one_process(
        {arch: [str(lm_bin), *ELECTRA_ARGS, "--arch", arch, "--max-update", "20", "--lr", "3e-3", "--no-save"]
         for arch in BLOCKS}, tmp_path_factory.mktemp("electra_blocks"))


@pytest.mark.parametrize("arch", BLOCKS)
def test_fairseq_train_both_losses_fall_for_each_attention_block(arch, block_logs):
    falls(block_logs[arch])


def test_checkpoint_info_shows_objective_and_sizes(electra_run, starts_process):
    from tupe_tools.checkpoint_record import fairseq_args, info_from_state

    save, _ = electra_run
    p = run(["tupe-checkpoint-info", str(save / "checkpoint_last.pt")])
    info = json.loads(p.stdout)
    assert info["objective"] == "electra" and info["variant"] == "tupe_r" and info["arch"] == "tupe_roberta_tiny"
    assert (info["generator_layers"], info["generator_embed_dim"], info["generator_ffn_embed_dim"],
            info["generator_attention_heads"]) == (2, 16, 32, 1)
    assert fairseq_args(info).startswith("--arch tupe_roberta_tiny --max-positions 64 --encoder-layers 2 --encoder-embed-dim 64")
    plain = build("tupe_r_tiny")
    assert info_from_state({"args": plain.args, "model": plain.state_dict()}, "x")["objective"] == "mlm"


def test_analysis_loads_the_electra_checkpoint_as_its_discriminator(electra_run, lm_bin):
    from tupe_tools.analysis.attention_maps import attention_probs, load_hub

    save, _ = electra_run
    hub = load_hub(str(save / "checkpoint_last.pt"), str(lm_bin))
    assert isinstance(hub.model, ElectraModel)  # built by the checkpoint's task; the encoder is the discriminator
    args = argparse.Namespace(arch="tupe_roberta_tiny", max_positions=64)
    ARCH_CONFIG_REGISTRY[args.arch](args)
    plain = TupeRobertaModel.build_model(args, DictionaryTask(hub.task.source_dictionary, 64)).eval()
    plain.load_state_dict(torch.load(save / "checkpoint_last.pt", map_location="cpu")["model"])  # the discriminator
    x = tokens(1, 10)
    with torch.no_grad():
        torch.testing.assert_close(hub.model(x, features_only=True)[0], plain(x, features_only=True)[0])
    assert attention_probs(hub.model, x[0]).shape == (2, 4, 10, 10)


def test_finetune_script_takes_the_electra_checkpoint_unchanged(electra_run, spm_dir, tmp_path, starts_process):
    save, _ = electra_run
    from tupe_preprocess import glue_binarize

    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1")
    assert glue_binarize.main(["--glue-dir", str(ROOT / "tests/data/glue"), "--tasks", "RTE", "--spm-model",
                               str(spm_dir / "spm.model"), "--dict", str(spm_dir / "dict.txt"),
                               "--out-dir", str(tmp_path / "glue-bin")]) == 0
    env.update(CHECKPOINT=str(save / "checkpoint_last.pt"), GLUE_BIN=str(tmp_path / "glue-bin"),
               RUNS=str(tmp_path / "runs"), EPOCHS="1", SENTENCES_PER_BATCH="16", NUM_WORKERS="0", TRUNCATE="1", LOG_INTERVAL="1")
    p = subprocess.run([str(ROOT / "glue/finetune.sh"), "RTE", "1e-3", "1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    run_dir = tmp_path / "runs/RTE/lr1e-3_seed1"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["checkpoint_variant"] == "tupe_r" and 0 <= result["best_valid"]["valid"] <= 100
    log = (run_dir / "train.log").read_text()
    assert "keeping the discriminator; dropped the generator" in log
    assert "--arch tupe_roberta_tiny" in (run_dir / "command.txt").read_text()


# ---- resume after kill -9 (train_scripts/pretrain.sh) -------------------------------------------------

TINY = {"OBJECTIVE": "electra", "ARCH": "rope_tiny", "TOKENS_PER_SAMPLE": "64", "GPUS": "0",
        "MAX_SENTENCES": "8", "SENTENCES_PER_UPDATE": "16", "WARMUP": "5", "LR": "2e-3", "LOG_INTERVAL": "1",
        "NUM_WORKERS": "0", "SEED": "1", "TOTAL_UPDATES": "1000", "SAVE_INTERVAL_UPDATES": "4",
        "TENSORBOARD_DIR": "none"}


def pretrain_env(data: Path, save: Path, **extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "EXTRA_ARGS")}
    env.update(TINY, PATH=f"{BIN}:{env.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               DATA=str(data), SAVE_DIR=str(save), **extra)
    return env


def by_update(log: str) -> Dict[int, Dict[str, float]]:
    return {int(r["num_updates"]): r for r in logged(log) if "num_updates" in r}


def test_killed_electra_run_resumes_with_the_same_losses(lm_bin, tmp_path, starts_process):
    script = str(ROOT / "train_scripts/pretrain.sh")
    whole = subprocess.run([script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env=pretrain_env(lm_bin, tmp_path / "whole", EXTRA_ARGS="--max-update 12",
                                            KEEP_INTERVAL_UPDATES="3"))  # keeps the checkpoints at 4, 8, 12
    assert whole.returncode == 0, whole.stderr[-4000:]
    assert "--task electra --criterion electra" in whole.stderr
    first = tmp_path / "first.log"
    with open(first, "w") as out:
        job = subprocess.Popen([script], cwd=ROOT, env=pretrain_env(lm_bin, tmp_path / "killed"), stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not re.search(r"Saved checkpoint \S+ \(epoch \d+ @ 4 updates", first.read_text()):
            assert job.poll() is None and time.time() < deadline, first.read_text()[-4000:]
            time.sleep(0.1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # kill -9, wherever it is
        job.wait()
    at = run(["python", "tupe_pretrain/check_resume.py", str(tmp_path / "killed")]).stderr
    n = int(re.search(r"@ (\d+) updates", at).group(1))
    assert n in (4, 8), at
    again = subprocess.run([script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env=pretrain_env(lm_bin, tmp_path / "killed", EXTRA_ARGS=f"--max-update {n + 4}"))
    assert again.returncode == 0, again.stderr[-4000:]
    want, got = by_update(whole.stderr + whole.stdout), by_update(again.stderr + again.stdout)
    assert sorted(got) == [n + 1, n + 2, n + 3, n + 4]
    for u in got:
        for key in ("loss", "gen_loss", "disc_loss", "replace_rate"):
            assert math.isclose(got[u][key], want[u][key], abs_tol=1e-3), (u, key, got[u], want[u])
    # bit for bit (docs/study.md, "Seeds and commits"): the resumed run's parameters at n + 4 are the whole run's
    (same_update,) = (tmp_path / "whole").glob(f"checkpoint_*_{n + 4}.pt")
    whole_model = torch.load(same_update, map_location="cpu", weights_only=False)["model"]
    resumed = torch.load(tmp_path / "killed" / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert sorted(whole_model) == sorted(resumed)
    assert [k for k in whole_model if not torch.equal(whole_model[k], resumed[k])] == []


# ---- HF export of the discriminator --------------------------------------------------------------------


def test_hf_export_of_the_discriminator_equals_fairseq(tmp_path, capsys):
    pytest.importorskip("transformers")
    from transformers import AutoModel, AutoModelForSequenceClassification

    from tupe_tools.hf import export as hf_export

    head = "sentence_classification_head"
    m = electra(seed=1)
    with torch.no_grad():
        for p in m.parameters():  # LayerNorms != 1, ...
            p.add_(0.05 * torch.randn_like(p))
    x = tokens(3, 12, seed=5)
    x[1, 8:] = PAD
    mask = x.ne(PAD).long()
    keep = mask.bool()

    def export(name: str) -> Path:
        torch.save({"args": m.args, "model": m.state_dict()}, tmp_path / f"{name}.pt")
        return hf_export.export(str(tmp_path / f"{name}.pt"), str(tmp_path / name))

    pretrained = export("pretrained")  # as pre-training saved it: no classification head
    assert "exporting its discriminator; the generator is not exported" in capsys.readouterr().err
    m.register_classification_head(head, num_classes=3)  # as fine-tuning adds one
    finetuned = export("finetuned")
    with torch.no_grad():
        feats, _ = m(x, features_only=True)
        cls, _ = m(x, features_only=True, classification_head_name=head)
        hf_feats = AutoModel.from_pretrained(str(pretrained), trust_remote_code=True).eval()(
            input_ids=x, attention_mask=mask).last_hidden_state
        hf_cls = AutoModelForSequenceClassification.from_pretrained(str(finetuned), trust_remote_code=True).eval()(
            input_ids=x, attention_mask=mask).logits
    torch.testing.assert_close(hf_feats[keep], feats[keep], rtol=0, atol=1e-5)
    torch.testing.assert_close(hf_cls, cls, rtol=0, atol=1e-5)

def test_bench_train_step_takes_the_electra_step():
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_train_step as bench

    x, masked = bench.make_batch(128, 32, "cpu")
    mlm = bench.build("tupe_r_tiny", "tiny", 32, "cpu")
    both = bench.with_objective(bench.build("tupe_r_tiny", "tiny", 32, "cpu"), "electra")
    flops = [bench.step_flops(m, torch.optim.Adam(m.parameters()), x, masked) for m in (mlm, both)]
    assert flops[1] > flops[0]  # the generator and the discriminator's dense head come on top


def test_bench_train_step_runs_the_electra_row_end_to_end(tmp_path, starts_process):
    """The benchmark as a user runs it (tiny, one step): a measured row against RoBERTa, not a 'failed' cell."""
    out = tmp_path / "rows.json"
    run([sys.executable, str(ROOT / "bench" / "bench_train_step.py"), "--variants", "tupe_r", "--objective",
         "electra", "--sizes", "tiny", "--lengths", "32", "--tokens", "64", "--steps", "1", "--warmup", "0",
         "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["objective"] == "electra" and not rows[0].get("error")
    assert rows[0]["attention"].startswith("auto: ") and rows[0]["flop_ratio"] > 1


def test_generator_samples_follow_the_softmax_and_never_a_zero_probability_token():
    """sample_rows draws row r's index i with probability probs[r, i] (20,000 draws per row against each
    probability, within 5 standard deviations) and never an index of probability 0."""
    from tupe_plugin.models.electra import sample_rows

    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [0.1, 0.2, 0.3, 0.4, 0.0]])
    n = 20000
    torch.manual_seed(0)
    drawn = sample_rows(probs.repeat_interleave(n, dim=0)).view(3, n)
    for r in range(3):
        freq = torch.bincount(drawn[r], minlength=5).double() / n
        sd = (probs[r].double() * (1 - probs[r].double()) / n).sqrt()
        assert torch.all((freq - probs[r].double()).abs() <= 5 * sd + 1e-12), (r, freq, probs[r])
        assert torch.all(freq[probs[r] == 0] == 0)
