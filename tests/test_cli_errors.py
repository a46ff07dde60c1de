"""Our commands fail clearly: one last ``error:`` line (traceback only with TUPE_DEBUG=1), instant and quiet
``--help``, out-of-range options refused, the fairseq-train log's error found, dictionary mismatches named, and
a user's plausible mistakes (a wrong file, a missing extra, a checkpoint of another kind) never called a bug."""
from __future__ import annotations

import argparse
import inspect
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

from conftest import PRETRAIN_ARGS, command_in_process, console_scripts, run, write_lines
from tupe_plugin.models.checkpoint_checks import DictionaryMismatchError, check_dictionary
from tupe_core.facts import VARIANT_KEY
from tupe_tools.commands import COMMANDS, NEEDS
from tupe_tools.errors import OPTIONAL, last_error, run_command

pytestmark = pytest.mark.usefixtures("starts_process")  # its tests start processes (real CLIs, scripts)

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
CONSOLE = [*COMMANDS, "tupe-last-error"]  # the tupe_tools commands: their --help imports no torch


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


@pytest.mark.parametrize("command", [[str(BIN / "tupe-checkpoint-info"), "--list-variants"],
                                     [str(ROOT / "train_scripts" / "study.sh"), "--help"]], ids=["console", "study.sh"])
def test_a_reader_that_leaves_early_ends_the_command_quietly(command):
    """``tupe-checkpoint-info --list-variants | head -1``: the pipe closed before the command writes. study.sh
    (its own ``__main__``) said 0 here, as if it had written everything."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a user's default: stdout buffered,
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # so the broken pipe
                         env={**env, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"})  # shows at the flush (was 120)
    p.stdout.close()  # long before the command has started (~3 s): its first write fails
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141 and err == ""  # 128 + SIGPIPE, as a shell reports `head` ending a tool


def test_parsing_imports_neither_torch_nor_fairseq():
    code = ("import sys\nfrom tupe_tools.commands import COMMANDS\n"
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
        assert f"{junk}: not a checkpoint (a text file" in last_line(p) and "weights_only" not in p.stderr
    p = run([str(BIN / "tupe-checkpoint-info"), str(tmp_path / "missing.pt")], check=False)
    assert p.returncode == 1 and last_line(p).startswith("error: ") and "missing.pt" in last_line(p)
    env = dict(os.environ, TUPE_DEBUG="1")
    p = subprocess.run([str(BIN / "tupe-checkpoint-info"), str(tmp_path / "missing.pt")], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr
    assert last_line(p).startswith("error: ") and "missing.pt" in last_line(p)


def test_python_m_runs_the_same_command(tmp_path):
    p = run([sys.executable, "-m", "tupe_tools.convert_original", str(tmp_path / "none.pt"),
             str(tmp_path / "out.pt")], check=False)
    assert p.returncode == 1 and last_line(p) == f"error: {tmp_path / 'none.pt'}: no such file; {ORIGINAL_FIX}"


def test_pos_maps_length_beyond_the_checkpoint_is_the_last_line(pretrained, tmp_path):
    p = command_in_process([str(BIN / "tupe-pos-maps"), str(pretrained / "checkpoint_last.pt"), "--out-dir",
                    str(tmp_path / "m"), "--length", "65"], check=False)
    assert p.returncode == 2 and last_line(p) == "error: --length 65 exceeds the checkpoint's 64 positions"
    (tmp_path / "file").write_text("mine\n")
    p = command_in_process([str(BIN / "tupe-pos-maps"), str(pretrained / "checkpoint_last.pt"), "--out-dir",
                    str(tmp_path / "file")], check=False)
    assert p.returncode == 2 and "is a file; pass a folder" in last_line(p)
    assert (tmp_path / "file").read_text() == "mine\n"


# ------------------------------------------------------------------------------------------ exit codes


def test_usage_errors_exit_2_and_bad_data_exits_1(tmp_path, capsys):
    """The convention of every command (README, "Exit codes"), where a command had it the other way round."""
    from tupe_glue.finetune_helper import facts_of
    from tupe_preprocess import c4_spm
    from tupe_common.errors import UsageError
    from tupe_tools.commands import checkpoint_info

    assert checkpoint_info([]) == 2 and last_line_of(capsys) == "error: give a CHECKPOINT (or --list-variants)"
    bins = tmp_path / "glue-bin"
    for task in ("RTE", "Notes"):  # a task's binaries: input0/ and label/ dictionaries
        for sub, lines in (("input0", ["a 1"]), ("label", ["0 1", "1 1"])):
            (bins / f"{task}-bin" / sub).mkdir(parents=True)
            write_lines(bins / f"{task}-bin" / sub / "dict.txt", lines)
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint\n")
    with pytest.raises(ValueError) as bad_checkpoint:  # a bad checkpoint: data (exit 1 where a command says it)
        facts_of("RTE", str(junk), str(bins))
    assert not isinstance(bad_checkpoint.value, UsageError)
    with pytest.raises(UsageError, match="unknown task 'Notes'"):  # no such task: usage (exit 2)
        facts_of("Notes", str(junk), str(bins))
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


def test_fairseq_error_is_the_plugins_last_line_or_the_last_exception():
    """Why fairseq-train failed, as its runner's line says it: the plugin's own line (also a rank's under torchrun,
    with torchrun's prefix and its lines after it), without the advice to resume; else the last exception."""
    from tupe_tools.errors import fairseq_error

    full = ("fairseq-train: error: /c/checkpoint_1_4.pt: no space left on its disk while writing it; rerun the same "
            "command to resume from the last checkpoint saved whole\n")
    assert fairseq_error("x | INFO | training\n" + full) == "/c/checkpoint_1_4.pt: no space left on its disk while writing it"
    assert fairseq_error(f"[rank0]: {full}torchrun: error: rank 0 failed (exit 1)\n") == (
        "/c/checkpoint_1_4.pt: no space left on its disk while writing it")
    assert fairseq_error("Traceback (most recent call last):\n  File \"a\", line 1\nRuntimeError: CUDA out of memory\n") \
        == "RuntimeError: CUDA out of memory"
    assert fairseq_error("x | INFO | done\n") == ""
    # a divergence, then fairseq's NaN detector's re-run failing on its own: the divergence is the reason
    nan = ("Traceback (most recent call last):\n  File \"t\", line 1\nFloatingPointError: gradients are Nan/Inf\n"
           "x | WARNING | fairseq.nan_detector | NaN detected\nTraceback (most recent call last):\n  File \"n\", "
           "line 2\nTypeError: 'NoneType' object is not subscriptable\n")
    assert fairseq_error(nan) == "diverged (FloatingPointError: gradients are Nan/Inf)"


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


def test_last_error_of_a_missing_log_is_exit_1(tmp_path, capsys):
    from tupe_tools.errors import main

    assert main([str(tmp_path / "none.log")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == f"tupe-last-error: error: cannot read the log: {tmp_path / 'none.log'}: no such file or folder"
    (tmp_path / "run.log").write_text(LOG)
    assert main([str(tmp_path / "run.log")]) == 0 and capsys.readouterr().out.startswith("error: the checkpoint")


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
    line = run([sys.executable, "-m", "tupe_tools.errors", str(log)]).stdout.strip()
    vocab = len((spm_dir / "dict.txt").read_text().splitlines()) + 5  # 4 specials and <mask>
    assert line.startswith("error: the checkpoint ") and str(pretrained / "checkpoint_last.pt") in line, line
    assert f"vocabulary of {vocab} ids" in line and f"{data}/input0/dict.txt gives 105" in line, line
    assert "DictionaryMismatchError" in p.stderr  # raised by our check, not by torch


# ------------------------------------------------------------------------------------------ a user's mistakes
# What a user passes by mistake (a wrong file, a command without its extra, a checkpoint of another kind) ends
# in one line naming the file and what to do, never "unexpected ... (a bug)". The lines are written out whole.
FAIRSEQ_FIX = "pass a checkpoint that fairseq-train wrote (SAVE_DIR/checkpoint_last.pt or checkpoint_best.pt)"
ORIGINAL_FIX = "pass the checkpoint.pt from the original release's tupe_ckp.tar.gz"
NO_HEAD = ("a pre-trained checkpoint, with no classification head; pass a fine-tuned one (glue/finetune.sh with "
           "KEEP_CHECKPOINTS=1 keeps its checkpoint_best.pt)")
OUTPUTS = ("maps", "locality.csv", "converted.pt", "hf")  # what the command lines below would write


def command_line(command: str, checkpoint: Path, tmp: Path) -> List[str]:
    """``command`` reading ``checkpoint``, its other arguments filled in."""
    rest = {
        "tupe-pos-maps": ["--out-dir", tmp / "maps"],
        "tupe-locality": ["--out-csv", tmp / "locality.csv"],
        "tupe-probe": ["--sets-dir", tmp, "--data", tmp, "--spm-model", tmp / "spm.model"],
        "tupe-convert-original": [tmp / "converted.pt"],
        "tupe-checkpoint-info": [],
        "tupe-export-hf": [tmp / "hf"],
    }[command]
    return [str(BIN / command), str(checkpoint), *map(str, rest)]


def wrong_file(kind: str, tmp: Path, fix: str) -> Tuple[Path, str]:
    """A file a user may pass instead of a checkpoint, and the line that must answer it."""
    path = tmp / {"missing": "checkpoint_lats.pt", "folder": "save", "empty": "empty.pt", "text": "notes.pt",
                  "safetensors": "model.safetensors"}[kind]
    if kind == "missing":
        return path, f"{path}: no such file; {fix}"
    if kind == "folder":
        path.mkdir()
        (path / "checkpoint_last.pt").write_bytes(b"")
        return path, f"{path} is a folder; pass a checkpoint file in it (e.g. {path / 'checkpoint_last.pt'})"
    if kind == "empty":
        path.write_bytes(b"")
        return path, f"{path}: empty file (0 bytes), not a checkpoint (a copy or save cut short?); {fix}"
    if kind == "text":
        write_lines(path, ["hello world,", "these are my notes"])
        return path, f"{path}: not a checkpoint (a text file: 'hello world, these are my note...'); {fix}"
    from safetensors.torch import save_file

    save_file({"embeddings.weight": torch.zeros(4, 2)}, str(path))
    return path, f"{path}: not a checkpoint (a safetensors file, e.g. a Hugging Face export); {fix}"


def test_every_command_has_a_command_line_here(tmp_path):
    for command in COMMANDS:
        assert command_line(command, tmp_path / "ck.pt", tmp_path)[1] == str(tmp_path / "ck.pt"), command


@pytest.mark.parametrize("kind", ["missing", "folder", "empty", "text", "safetensors"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_wrong_file_is_one_line_naming_it_and_what_to_pass(command, kind, tmp_path):
    path, message = wrong_file(kind, tmp_path, ORIGINAL_FIX if command == "tupe-convert-original" else FAIRSEQ_FIX)
    p = run(command_line(command, path, tmp_path), check=False)
    assert (p.returncode, p.stderr, p.stdout) == (1, f"error: {message}\n", "")  # before torch is imported
    assert not any((tmp_path / out).exists() for out in OUTPUTS)


def test_a_damaged_or_foreign_torch_file_is_named(pretrained, tmp_path):
    from tupe_tools.checkpoint_record import checkpoint_info
    from tupe_common.checkpoint_file import load as load_checkpoint

    whole = (pretrained / "checkpoint_last.pt").read_bytes()
    cut = tmp_path / "checkpoint_last.pt"
    cut.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    p = command_in_process(command_line("tupe-pos-maps", cut, tmp_path), check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr and not (tmp_path / "maps").exists()
    assert last_line(p) == f"error: {cut}: not a readable checkpoint (damaged or truncated: a copy cut short?); {FAIRSEQ_FIX}"
    torch.save({"encoder.weight": torch.zeros(2)}, tmp_path / "weights.pt")  # a bare state dict
    with pytest.raises(ValueError) as e:
        load_checkpoint(str(tmp_path / "weights.pt"))
    assert str(e.value) == (f"{tmp_path / 'weights.pt'}: not a fairseq checkpoint (it holds a dict with keys "
                            f"['encoder.weight'], no 'model' state); {FAIRSEQ_FIX}")
    torch.save({"model": {"encoder.weight": torch.zeros(2)}}, tmp_path / "other.pt")  # another fairseq model
    with pytest.raises(ValueError) as e:
        checkpoint_info(str(tmp_path / "other.pt"))
    assert str(e.value) == (f"{tmp_path / 'other.pt'}: no '{VARIANT_KEY}' in the model "
                            "state: not a tupe_roberta checkpoint (for the original TUPE release, run "
                            "tupe-convert-original first)")
    (tmp_path / "pickle.pt").write_bytes(pickle.dumps({"model": 1}, protocol=2))  # a pickle torch.save did not write
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 'pickle.pt'))}: not a readable checkpoint "
                                         rf"\(.+\); {re.escape(FAIRSEQ_FIX)}$"):
        load_checkpoint(str(tmp_path / "pickle.pt"))


@pytest.mark.parametrize("kind", ["missing", "folder", "empty", "text"])
def test_glue_settings_name_a_wrong_checkpoint(kind, tmp_path):
    """What glue/finetune.sh runs with its CHECKPOINT, before fine-tuning starts."""
    from tupe_glue.finetune_helper import facts_of
    from tupe_common.errors import UsageError

    bins = tmp_path / "glue-bin" / "RTE-bin"
    for sub, lines in (("input0", ["a 1"]), ("label", ["0 1", "1 1"])):
        (bins / sub).mkdir(parents=True)
        write_lines(bins / sub / "dict.txt", lines)
    path, message = wrong_file(kind, tmp_path, FAIRSEQ_FIX)
    with pytest.raises(ValueError) as e:  # one line naming it (finetune.sh: exit 1)
        facts_of("RTE", str(path), str(tmp_path / "glue-bin"))
    assert str(e.value) == message and not isinstance(e.value, UsageError)


def test_a_study_part_on_a_wrong_checkpoint_fails_naming_it(tmp_path):
    """The study's parts read the checkpoints it made; one cut short (a killed copy) fails its part, not the study."""
    from tupe_study.__main__ import run_part
    from tupe_study.stages import PartFailed, Stage
    from tupe_tools.checkpoint_record import checkpoint_info

    path, message = wrong_file("empty", tmp_path, FAIRSEQ_FIX)
    stage = Stage("longer", lambda plan: [()], lambda plan: False, lambda plan: checkpoint_info(str(path)))
    with pytest.raises(PartFailed) as e:
        run_part(None, stage, ())
    assert str(e.value) == message


@pytest.fixture(scope="module")
def electra_checkpoint(lm_bin, tmp_path_factory) -> Path:
    """A tiny TUPE-R pre-trained with ELECTRA for one update."""
    save = tmp_path_factory.mktemp("electra")
    args = ["electra" if a == "masked_lm" else a for a in PRETRAIN_ARGS]  # --task and --criterion
    run(["fairseq-train", str(lm_bin), *args, "--arch", "tupe_roberta_tiny", "--max-update", "1",
         "--save-dir", str(save)])
    return save / "checkpoint_last.pt"


def test_a_pre_trained_checkpoint_where_a_fine_tuned_one_is_needed(pretrained, electra_checkpoint, tmp_path):
    from tupe_study.dev_eval import Predictor

    ck = pretrained / "checkpoint_last.pt"
    p = command_in_process(command_line("tupe-probe", ck, tmp_path), check=False)
    assert (p.returncode, last_line(p)) == (1, f"error: {ck}: {NO_HEAD}") and "Traceback" not in p.stderr
    for checkpoint in (ck, electra_checkpoint):  # the study's dev-set predictions
        with pytest.raises(ValueError) as e:
            Predictor(str(checkpoint), str(tmp_path), str(tmp_path / "spm.model"))
        assert str(e.value) == f"{checkpoint}: {NO_HEAD}"


def test_a_converted_checkpoint_given_to_the_converter_again(pretrained, tmp_path):
    ck = pretrained / "checkpoint_last.pt"
    p = command_in_process(command_line("tupe-convert-original", ck, tmp_path), check=False)
    assert (p.returncode, last_line(p)) == (1, f"error: {ck}: already a tupe_roberta checkpoint (see tupe-checkpoint-info "
                                               f"{ck}); fine-tune, analyse or export it as it is; tupe-convert-original "
                                               "reads the original release")
    assert not (tmp_path / "converted.pt").exists()


def test_an_electra_checkpoint_where_an_mlm_one_is_needed(electra_checkpoint, lm_bin, tmp_path):
    """The study's longer-inputs part scores masked tokens with the MLM head, which an ELECTRA discriminator lacks."""
    from tupe_study.longer_inputs import measure

    given = {"checkpoint": str(electra_checkpoint), "shard": str(lm_bin), "lengths": [64, 128], "tokens": 256,
             "out": str(tmp_path / "longer.json")}  # by name: the arguments after ``lengths`` have changed before
    with pytest.raises(ValueError) as e:
        measure(**{k: v for k, v in given.items() if k in inspect.signature(measure).parameters})
    assert str(e.value) == (f"{electra_checkpoint}: an ELECTRA checkpoint where an MLM one is needed: its "
                            "discriminator has no trained MLM head; pass a checkpoint pre-trained with OBJECTIVE=mlm")
    assert not (tmp_path / "longer.json").exists()


# A site customisation that makes packages look uninstalled: their import fails as a missing package's does.
HIDE = """import sys


class Hide:
    names = {names!r}

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)


sys.meta_path.insert(0, Hide())
"""


def without(tmp: Path, *packages: str) -> Dict[str, str]:
    """The environment of a process in which ``packages`` are not installed."""
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE.format(names=set(packages)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), PATH=f"{BIN}:{os.environ['PATH']}")


@pytest.mark.parametrize("package", ["safetensors", "transformers"])
def test_export_hf_without_the_hf_extra_names_the_install(package, pretrained, tmp_path):
    p = subprocess.run(command_line("tupe-export-hf", pretrained / "checkpoint_last.pt", tmp_path),
                       capture_output=True, text=True, env=without(tmp_path, package), timeout=120)
    assert (p.returncode, p.stderr) == (2, f"error: {package} is not installed; it comes with the optional 'hf' "
                                           "extra: pip install -c constraints.txt -e '.[hf]' (in the repository)\n")
    assert not (tmp_path / "hf").exists()


def test_the_other_commands_need_no_extra(tmp_path):
    scripts = dict(s.split("=") for s in console_scripts())
    modules = [scripts[command].partition(":")[0] for command in COMMANDS if command not in NEEDS]
    code = ("import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
            "try:\n    import safetensors\nexcept ModuleNotFoundError as e:\n    print('hidden:', e.name)")
    p = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                       env=without(tmp_path, *OPTIONAL), timeout=300)
    assert p.returncode == 0 and p.stdout == "hidden: safetensors\n", p.stderr[-3000:]
    assert len(modules) == len(COMMANDS) - 1


def test_a_missing_package_anywhere_is_a_line_with_its_install(capsys):
    def fails(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    cases = {
        "pyarrow.parquet": (2, "error: pyarrow is not installed; it comes with the optional 'hf' extra: "
                               "pip install -c constraints.txt -e '.[hf]' (in the repository)"),
        "fairseq.models": (2, "error: fairseq is not installed; it is a requirement of tupe_plugin: "
                              "pip install -c constraints.txt -e . (in the repository)"),
        "torch": (2, "error: torch is not installed; install torch for your machine first (docs/install.md), then "
                     "pip install -c constraints.txt -e . (in the repository)"),
        "tupe_plugin.models.gone": (1, "error: unexpected ModuleNotFoundError: No module named "
                                       "'tupe_plugin.models.gone' (a bug: rerun with TUPE_DEBUG=1 and report the traceback)"),
    }
    for name, (code, line) in cases.items():
        assert run_command(lambda a, name=name: fails(name), argparse.Namespace()) == code, name
        assert last_line_of(capsys) == line


def test_the_extras_table_is_setup_pys():
    hf = re.search(r'"hf": \[([^\]]*)\]', (ROOT / "setup.py").read_text(encoding="utf-8")).group(1)
    names = {re.match(r'"([\w-]+)', r.strip()).group(1).replace("-", "_") for r in hf.split(",") if r.strip()}
    assert names == {name for name, extra in OPTIONAL.items() if extra == "hf"}
