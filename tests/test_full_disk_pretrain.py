"""A full disk while pre-training saves a checkpoint (tupe_plugin/full_disk.py), with the disk's error injected where
the OS would raise it (ENOSPC, after part of the file was written): one line naming the file being written, exit 1,
no partial file left, the earlier checkpoints and checkpoint_last.pt as they were; the rerun resumes from them (in
one process to the parameters of an uninterrupted run, bit for bit)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PRETRAIN_ARGS, ROOT, run
from process_tree import assert_none_left, marked

# torch.save into a file whose name ends with FULL_SAVE, or shutil.copyfile to a name holding FULL_COPY (the file
# itself or a temporary name of it) from a source ending with FULL_FROM, writes a little and fails as a full disk does;
# a text file opened for writing whose name ends with FULL_LOG fails at the first write holding FULL_LOG_AT
SITECUSTOMIZE = """
import builtins, errno, os, shutil
import torch

def full(f):
    f.write(b"x" * 1000)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

_save, _copyfile = torch.save, shutil.copyfile

def save(obj, f, *args, **kwargs):
    if os.environ.get("FULL_SAVE") and str(getattr(f, "name", f)).endswith(os.environ["FULL_SAVE"]):
        full(f)
    return _save(obj, f, *args, **kwargs)

def copyfile(src, dst, *args, **kwargs):
    if os.environ.get("FULL_COPY") and os.environ["FULL_COPY"] in str(dst) and str(src).endswith(os.environ["FULL_FROM"]):
        with open(dst, "wb") as f:
            full(f)
    return _copyfile(src, dst, *args, **kwargs)

torch.save, shutil.copyfile = save, copyfile

class Filling:
    def __init__(self, f):
        self._f, self._full = f, False

    def write(self, text):
        self._full = self._full or os.environ["FULL_LOG_AT"] in text
        if self._full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._f.write(text)

    def __getattr__(self, name):
        return getattr(self._f, name)

_open = builtins.open

def open_(file, mode="r", *args, **kwargs):
    f = _open(file, mode, *args, **kwargs)
    if os.environ.get("FULL_LOG") and str(file).endswith(os.environ["FULL_LOG"]) and mode[:1] in "wa" and "b" not in mode:
        return Filling(f)
    return f

builtins.open = open_
"""

TRAIN = ["fairseq-train", *PRETRAIN_ARGS, "--arch", "tupe_roberta_tiny", "--data-buffer-size", "0", "--no-progress-bar",
         "--save-interval-updates", "2", "--max-update", "6"]


def updates(path: Path) -> int:
    from tupe_pretrain.check_resume import num_updates

    return num_updates(str(path))


@pytest.mark.parametrize("where", ["save", "copy"])
def test_a_full_disk_while_saving_is_one_line_and_keeps_the_last_checkpoint(lm_bin, tmp_path, starts_process, where):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    save = tmp_path / "ckpt"
    full = {"FULL_SAVE": "_4.pt.tmp"} if where == "save" else {"FULL_COPY": "checkpoint_last.pt", "FULL_FROM": "_4.pt"}
    env = marked({**os.environ, "PYTHONPATH": str(hooks), **full})
    cmd = [*TRAIN, str(lm_bin), "--save-dir", str(save)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert_none_left(env)
    written = save / ("checkpoint_1_4.pt" if where == "save" else "checkpoint_last.pt")
    assert p.returncode == 1, p.stderr[-3000:]
    assert p.stderr.strip().splitlines()[-1] == (
        f"fairseq-train: error: {written}: no space left on its disk while writing it (the half-written file is "
        "removed); free space there, or write to a folder on another disk; rerun the same command to resume from the "
        "last checkpoint saved whole"), p.stderr[-3000:]
    assert not list(save.glob("*.tmp"))  # the partial file removed
    assert updates(save / "checkpoint_last.pt") == 2 and updates(save / "checkpoint_1_2.pt") == 2  # kept whole
    if where == "copy":
        assert updates(save / "checkpoint_1_4.pt") == 4  # saved whole before its copy failed
    if where == "save":  # the rerun (the copy's resumes from the same checkpoint the same way)
        again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)  # the disk has room again
        assert again.returncode == 0, again.stderr[-3000:]
        assert updates(save / "checkpoint_last.pt") == 6
        # as an uninterrupted run: the same parameters at update 6, bit for bit
        whole = run([*TRAIN, str(lm_bin), "--save-dir", str(tmp_path / "whole")], cwd=ROOT)
        assert whole.returncode == 0
        import torch

        resumed, uninterrupted = (torch.load(d / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
                                  for d in (save, tmp_path / "whole"))
        assert resumed.keys() == uninterrupted.keys()
        assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_a_process_that_does_not_train_keeps_fairseqs_own_writers(tmp_path, starts_process):
    """Importing the plugin outside training (an HF export, an analysis) changes none of fairseq's writers nor the
    interpreter's excepthook; fairseq-train's, above, has them replaced."""
    script = tmp_path / "imports_the_plugin.py"
    script.write_text("import sys\nfrom fairseq import checkpoint_utils\nfrom fairseq.file_io import PathManager\n"
                      "import tupe_plugin\nfrom tupe_plugin import full_disk\n"
                      "print(checkpoint_utils.torch_persistent_save is full_disk.torch_persistent_save,\n"
                      "      PathManager.copy is full_disk.copy, sys.excepthook is sys.__excepthook__)\n")
    p = run([sys.executable, str(script)], cwd=ROOT)
    assert p.stdout.split()[-3:] == ["False", "False", "True"], p.stdout + p.stderr[-2000:]


def test_a_full_disk_with_several_processes_ends_with_the_ranks_line_and_the_rerun_resumes(lm_bin, tmp_path,
                                                                                          starts_process):
    """pretrain.sh with 2 processes (torchrun): rank 0, which saves, meets a full disk at update 6; torchrun ends the
    other rank and says which rank failed in one line (no ChildFailedError traceback), pretrain.sh's last line repeats
    the rank's reason (the file being written) and where the rerun resumes, exit 1; no process is left, SAVE_DIR's
    lock is released, the checkpoint of update 3 kept whole. The same command with room again resumes from it."""
    import re
    import threading
    import time

    from process_tree import assert_gone, start, tree
    from test_stop_signals import TINY, free_port, script_env

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    save = tmp_path / "ckpt"
    env = script_env(**dict(TINY, SAVE_INTERVAL_UPDATES="3", MAX_SENTENCES="4", TOTAL_UPDATES="9"), DATA=str(lm_bin),
                     SAVE_DIR=str(save), NPROC_PER_NODE="2", MASTER_PORT=str(free_port()))
    p = start([ROOT / "train_scripts" / "pretrain.sh"], {**env, "FULL_SAVE": "_6.pt.tmp", "PYTHONPATH": os.pathsep.join(
        [str(hooks), os.environ.get("PYTHONPATH", "")])}, cwd=ROOT)
    procs: list = []

    def watch() -> None:  # every process of its tree while it runs (they are gone once it ended)
        while p.poll() is None:
            procs.extend(c for c in tree(p.pid) if c.pid not in {q.pid for q in procs})
            time.sleep(0.2)
    threading.Thread(target=watch, daemon=True).start()
    out, err = p.communicate(timeout=300)
    lines = err.rstrip().splitlines()
    assert p.returncode == 1, err[-3000:]
    assert lines[-1] == (f"pretrain.sh: error: {save}/checkpoint_1_6.pt: no space left on its disk while writing it (the "
                         "half-written file is removed); free space there, or write to a folder on another disk; rerun "
                         f"the same command to resume from {save}/checkpoint_last.pt at update 3"), err[-3000:]
    assert re.fullmatch(r"torchrun: error: rank 0 failed \(exit 1, pid \d+ on \S+\); torchrun ended the others "
                        r"\(rank 1 exit -?\d+\)", lines[-2]), lines[-2]
    assert "ChildFailedError" not in err
    assert len(procs) >= 4  # torchrun and the ranks' wrappers and trainers were seen, and none is left:
    assert_gone(procs)
    assert not list(save.glob("*.tmp")) and not (save / ".run.lock").exists()
    assert updates(save / "checkpoint_last.pt") == 3 and updates(save / "checkpoint_1_3.pt") == 3
    again = subprocess.run([str(ROOT / "train_scripts" / "pretrain.sh")], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)  # the disk has room again
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Loaded checkpoint" in again.stdout + again.stderr and updates(save / "checkpoint_last.pt") == 9


def test_a_save_retried_after_a_failed_write_is_a_checkpoint_that_loads(tmp_path, monkeypatch):
    """fairseq tries a failed save again (3 attempts, 2.5 s apart) into the same open file, after the bytes the failed
    attempt wrote: a retry that succeeds gives a file torch cannot load, renamed as whole. The plugin's save writes
    each attempt afresh (the file loads); a full disk is not tried again (one attempt, no wait)."""
    import errno

    import torch

    from tupe_common.io import DiskFullError
    from tupe_plugin import full_disk

    calls = []
    real_save = torch.save

    def flaky(obj, f, *args, **kwargs):  # the first attempt writes part of the file, then fails as a network FS may
        calls.append(1)
        if len(calls) == 1 or kind == errno.ENOSPC:
            f.write(b"x" * 1000)
            raise OSError(kind, os.strerror(kind))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", flaky)
    monkeypatch.setattr(full_disk, "RETRY_S", 0.01)
    kind, target = errno.EIO, tmp_path / "checkpoint_1_2.pt"
    full_disk.torch_persistent_save({"w": torch.arange(5)}, str(target))
    assert len(calls) == 2 and not (tmp_path / "checkpoint_1_2.pt.tmp").exists()
    assert torch.equal(torch.load(target, weights_only=False)["w"], torch.arange(5))  # fairseq's own: UnpicklingError
    calls.clear()
    kind = errno.ENOSPC
    with pytest.raises(DiskFullError):
        full_disk.torch_persistent_save({"w": torch.arange(5)}, str(tmp_path / "checkpoint_1_4.pt"))
    assert len(calls) == 1 and not list(tmp_path.glob("checkpoint_1_4.pt*"))
