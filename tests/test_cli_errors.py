"""Our commands fail clearly: one last ``error:`` line (traceback only with TUPE_DEBUG=1), instant and quiet
``--help``, out-of-range options refused, the fairseq-train log's error found, dictionary mismatches named."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import run, write_lines
from tupe_plugin.models.checkpoint_checks import DictionaryMismatchError, check_dictionary
from tupe_plugin_cli.commands import CONSOLE_SCRIPTS
from tupe_plugin_cli.errors import last_error

BIN = Path(sys.executable).parent
CONSOLE = [script.partition("=")[0] for script in CONSOLE_SCRIPTS]


def last_line(p: subprocess.CompletedProcess) -> str:
    return (p.stderr.strip().splitlines() or [""])[-1]


@pytest.mark.parametrize("command", CONSOLE)
def test_help_answers_at_once_without_info_lines(command):
    times = []
    for _ in range(2):  # the faster of two, so one scheduling hiccup of a busy machine does not count
        start = time.monotonic()
        p = subprocess.run([str(BIN / command), "--help"], capture_output=True, text=True, timeout=60)
        times.append(time.monotonic() - start)
    assert p.returncode == 0 and p.stdout.startswith("usage: ") and command in p.stdout, p.stderr
    assert "INFO" not in p.stdout + p.stderr and not p.stderr
    assert min(times) < 1.0, times


def test_parsing_imports_neither_torch_nor_fairseq():
    code = ("import sys\nfrom tupe_plugin_cli.commands import COMMANDS\n"
            "for make in COMMANDS.values(): make[0]().format_help()\n"
            "print(sorted(m for m in ('torch', 'fairseq', 'tupe_plugin') if m in sys.modules))")
    p = run([sys.executable, "-c", code])
    assert p.stdout.strip() == "[]"


@pytest.mark.parametrize("argv, option", [
    (["tupe-pos-maps", "ck.pt", "--out-dir", "o", "--length", "0"], "--length"),
    (["tupe-pos-maps", "ck.pt", "--out-dir", "o", "--length", "-5"], "--length"),
    (["tupe-pos-maps", "ck.pt", "--out-dir", "o", "--length", "ten"], "--length"),
    (["tupe-locality", "ck.pt", "--length", "2"], "--length"),
    (["tupe-locality", "ck.pt", "--max-sentences", "0"], "--max-sentences"),
    (["tupe-probe", "ck.pt", "--sets-dir", "s", "--data", "d", "--spm-model", "m", "--batch-size", "0"], "--batch-size"),
])
def test_out_of_range_options_are_refused_by_name(argv, option, tmp_path):
    p = run([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"argument {option}:" in last_line(p) and ("at least" in last_line(p) or "not an integer" in last_line(p))
    assert not (tmp_path / "o").exists()


def test_the_error_is_the_last_line_and_the_traceback_needs_the_debug_switch(tmp_path):
    junk = tmp_path / "notes.pt"
    junk.write_text("not a checkpoint\n")
    for command in (["tupe-checkpoint-info", str(junk)], ["tupe-pos-maps", str(junk), "--out-dir", str(tmp_path)]):
        p = run([str(BIN / command[0]), *command[1:]], check=False)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert last_line(p).startswith("error: not a readable checkpoint") and "weights_only" not in p.stderr
    p = run([str(BIN / "tupe-checkpoint-info"), str(tmp_path / "missing.pt")], check=False)
    assert p.returncode == 1 and last_line(p).startswith("error: ") and "missing.pt" in last_line(p)
    env = dict(os.environ, TUPE_DEBUG="1")
    p = subprocess.run([str(BIN / "tupe-checkpoint-info"), str(tmp_path / "missing.pt")], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr
    assert last_line(p).startswith("error: ") and "missing.pt" in last_line(p)


def test_python_m_runs_the_same_command(tmp_path):
    p = run([sys.executable, "-m", "tupe_plugin.convert_original", str(tmp_path / "none.pt"),
             str(tmp_path / "out.pt")], check=False)
    assert p.returncode == 1 and last_line(p) == f"error: {tmp_path / 'none.pt'}: file not found"


def test_pos_maps_length_beyond_the_checkpoint_is_the_last_line(pretrained, tmp_path):
    p = run([str(BIN / "tupe-pos-maps"), str(pretrained / "checkpoint_last.pt"), "--out-dir", str(tmp_path / "m"),
             "--length", "65"], check=False)
    assert p.returncode == 2 and last_line(p) == "error: --length 65 exceeds the checkpoint's 64 positions"
    (tmp_path / "file").write_text("mine\n")
    p = run([str(BIN / "tupe-pos-maps"), str(pretrained / "checkpoint_last.pt"), "--out-dir", str(tmp_path / "file")],
            check=False)
    assert p.returncode == 2 and "is a file; pass a folder" in last_line(p)
    assert (tmp_path / "file").read_text() == "mine\n"


# ------------------------------------------------------------------------------------------ exit codes
ROOT = Path(__file__).resolve().parents[1]


def test_usage_errors_exit_2_and_bad_data_exits_1(tmp_path, capsys):
    """The convention of every command (README, "Exit codes"), where a command had it the other way round."""
    from glue import finetune_helper
    from preprocess import c4_spm
    from tupe_plugin_cli.commands import checkpoint_info

    assert checkpoint_info([]) == 2 and last_line_of(capsys) == "error: give a CHECKPOINT (or --list-variants)"
    bins = tmp_path / "glue-bin"
    for task in ("RTE", "Notes"):  # a task's binaries: input0/ and label/ dictionaries
        for sub, lines in (("input0", ["a 1"]), ("label", ["0 1", "1 1"])):
            (bins / f"{task}-bin" / sub).mkdir(parents=True)
            write_lines(bins / f"{task}-bin" / sub / "dict.txt", lines)
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint\n")
    assert finetune_helper.main(["settings", "RTE", str(junk), str(bins)]) == 1  # a bad checkpoint: data
    assert finetune_helper.main(["settings", "Notes", str(junk), str(bins)]) == 2  # no such task: usage
    assert "unknown task 'Notes'" in capsys.readouterr().err
    empty = write_lines(tmp_path / "empty.txt", [])
    assert c4_spm.main([str(empty), "--out-dir", str(tmp_path / "spm"), "--vocab-size", "50"]) == 1  # no text
    assert "no non-empty lines" in capsys.readouterr().err
    save = tmp_path / "save"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"truncated")  # damaged, and nothing to fall back on
    p = run([sys.executable, str(ROOT / "train_scripts" / "check_resume.py"), str(save)], check=False)
    assert p.returncode == 1 and "cannot be read" in p.stderr


def last_line_of(capsys) -> str:
    return (capsys.readouterr().err.strip().splitlines() or [""])[-1]


@pytest.mark.parametrize("script, env, message", [
    ("glue/grid.sbatch", {}, "not an array task"),
    ("train_scripts/pretrain.sbatch", {}, "not inside a SLURM job"),
    ("train_scripts/fairseq_rank.sh", {"WORLD_SIZE": "1"}, "set no local rank"),  # torchrun's variables missing
])
def test_scripts_outside_their_launcher_are_usage_errors(script, env, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in (
        "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.run(["bash", str(ROOT / script), "1", "cpu", "x"], capture_output=True, text=True, timeout=60,
                       env=dict(clean, **env), cwd=ROOT)
    assert p.returncode == 2 and message in p.stderr, p.stderr


# ------------------------------------------------------------------------------------------ fairseq logs
LOG = """2026-11-23 09:00:00 | INFO | fairseq_cli.train | loading checkpoint
Traceback (most recent call last):
  File "x.py", line 1, in <module>
    raise ValueError("inner")
ValueError: inner

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/bin/fairseq-train", line 8, in <module>
    sys.exit(cli_main())
  File "/repo/tupe_plugin/models/tupe_roberta.py", line 80, in upgrade_state_dict_named
    raise VariantMismatchError(
tupe_plugin.models.tupe_roberta.VariantMismatchError: the checkpoint was trained as 'tupe_r'
but this model is 'tupe_a'. Use --rel-pos

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/fairseq/trainer.py", line 597, in load_checkpoint
    raise Exception(
Exception: Cannot load model parameters from checkpoint ck.pt; please ensure that the architectures match.
"""


def test_last_error_of_a_log():
    assert last_error(LOG) == ("error: the checkpoint was trained as 'tupe_r' but this model is 'tupe_a'. "
                               "Use --rel-pos")
    other = "Traceback (most recent call last):\n  File \"a\", line 1\nRuntimeError: CUDA out of memory\n"
    assert last_error(LOG.split("During handling")[0]) == "error: inner"  # a ValueError: its message
    assert last_error(other) == "error: RuntimeError: CUDA out of memory"
    assert last_error("2026-11-23 | INFO | done\n") is None
    spawned = ("-- Process 0 terminated with the following error:\n" + other.replace("CUDA out of memory", "x")
               + "2026-11-23 09:00:01 | INFO | next\n")
    assert last_error(spawned) == "error: RuntimeError: x"


def test_check_dictionary_names_both_sizes_and_files(tmp_path):
    args = argparse.Namespace(data=f"{tmp_path}/RTE-bin", task="sentence_prediction", restore_file="checkpoint_last.pt",
                              save_dir=str(tmp_path / "ck"), finetune_from_model=None)
    state = {"encoder.sentence_encoder.embed_tokens.weight": torch.zeros(300, 8)}
    check_dictionary(state, "", 300, args)  # same size: nothing to say
    with pytest.raises(DictionaryMismatchError) as e:
        check_dictionary(state, "", 104, args)
    msg = str(e.value)
    assert "300" in msg and "104" in msg and "--srcdict" in msg
    assert f"{tmp_path}/ck/checkpoint_last.pt" in msg and f"{tmp_path}/RTE-bin/input0/dict.txt" in msg
    args = argparse.Namespace(data=f"{tmp_path}/s0:{tmp_path}/s1", task="masked_lm", restore_file="/x/model.pt")
    with pytest.raises(DictionaryMismatchError, match=f"/x/model.pt .* {tmp_path}/s0/dict.txt gives 99"):
        check_dictionary({"m." + "encoder.sentence_encoder.embed_tokens.weight": torch.zeros(98, 8)}, "m", 99, args)


def test_fairseq_train_with_another_dictionary_names_it(pretrained, cls_bin, spm_dir, tmp_path):
    """Fine-tuning data binarized with a smaller dict.txt than the checkpoint's: the log's last error names both."""
    small = write_lines(tmp_path / "small_dict.txt", (spm_dir / "dict.txt").read_text().splitlines()[:100])
    data = tmp_path / "data"
    write_lines(tmp_path / "train.txt", ["▁the ▁cat"] * 8)
    write_lines(tmp_path / "train.label", ["0", "1"] * 4)
    for field, text, vocab in (("input0", "train.txt", small), ("label", "train.label", cls_bin / "label" / "dict.txt")):
        run(["fairseq-preprocess", "--only-source", "--srcdict", str(vocab), "--trainpref", str(tmp_path / text),
             "--validpref", str(tmp_path / text), "--destdir", str(data / field), "--workers", "1"])
    p = run(["fairseq-train", str(data), "--user-dir", "tupe_plugin", "--task", "sentence_prediction",
             "--criterion", "sentence_prediction", "--num-classes", "2", "--arch", "tupe_roberta_tiny",
             "--max-positions", "64", "--optimizer", "adam", "--lr", "1e-4", "--batch-size", "4", "--max-update", "1",
             "--restore-file", str(pretrained / "checkpoint_last.pt"), "--reset-optimizer", "--reset-dataloader",
             "--reset-meters", "--cpu", "--num-workers", "0", "--save-dir", str(tmp_path / "ft")], check=False)
    assert p.returncode != 0
    log = write_lines(tmp_path / "train.log", (p.stdout + p.stderr).splitlines())
    line = run([sys.executable, "-m", "tupe_plugin_cli.errors", str(log)]).stdout.strip()
    vocab = len((spm_dir / "dict.txt").read_text().splitlines()) + 5  # 4 specials and <mask>
    assert line.startswith("error: the checkpoint ") and str(pretrained / "checkpoint_last.pt") in line, line
    assert f"vocabulary of {vocab} ids" in line and f"{data}/input0/dict.txt gives 105" in line, line
    assert "DictionaryMismatchError" in p.stderr  # raised by our check, not by torch
