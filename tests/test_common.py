"""tupe_common: the light I/O and logging modules. They import neither torch nor fairseq (nor do the commands
that only write files through them), a failed write leaves the old output and no temporary, and log lines
read ``PROG: message`` on stderr."""
from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run
from tupe_common.errors import exit_main, message
from tupe_common.io import DiskFullError, atomic_dir, atomic_open, atomic_path, file_hash, write_json
from tupe_common.log import setup_logging

# Modules that write files or print progress and have no reason to load torch or fairseq to do it.
LIGHT = ("tupe_common.io", "tupe_common.log", "tupe_common.mmap_index", "tupe_preprocess.text_to_c4", "tupe_preprocess.c4_extract", "tupe_preprocess.c4_layout",
         "tupe_preprocess.hub_files", "tupe_preprocess.glue_binarize", "tupe_preprocess.fairseq_dict",
         "tupe_preprocess.glue_download", "tupe_preprocess.snli_download", "tupe_preprocess.probing_sets",
         "tupe_glue.collect", "tupe_glue.grid", "tupe_glue.finetune_helper")


def test_light_modules_import_neither_torch_nor_fairseq(starts_process):
    code = ("import importlib, sys\n"
            f"for m in {LIGHT!r}: importlib.import_module(m)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'fairseq', 'tupe_plugin'}))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout  # importing tupe_plugin would import fairseq (and torch)


def test_a_preprocess_help_prints_no_fairseq_log_line(starts_process):
    p = run([sys.executable, "-m", "tupe_preprocess.text_to_c4", "--help"], fresh=True)  # what the start prints
    assert p.stdout.startswith("usage: ")
    assert "tensorboardX" not in p.stderr and "INFO" not in p.stderr and not p.stderr, p.stderr


def test_atomic_path_replaces_on_success_and_keeps_the_old_file_on_error(tmp_path):
    out = tmp_path / "sub" / "a.txt"
    with atomic_path(out) as tmp:
        assert tmp == f"{out}.partial" and not out.exists()
        with open(tmp, "w") as f:
            f.write("new")
    assert out.read_text() == "new"
    with pytest.raises(RuntimeError):
        with atomic_open(out) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert out.read_text() == "new" and os.listdir(out.parent) == ["a.txt"]


def test_atomic_dir_replaces_a_folder_whole_and_leaves_it_on_error(tmp_path):
    out = tmp_path / "task-bin"
    (tmp_path / "task-bin.partial").mkdir()  # left by a killed run
    (tmp_path / "task-bin.partial" / "stale").write_text("x")
    with atomic_dir(out) as tmp:
        assert os.listdir(tmp) == []  # the killed run's files are gone
        write_json(os.path.join(tmp, "m.json"), {"v": 1})
    assert sorted(os.listdir(tmp_path)) == ["task-bin"] and (out / "m.json").read_text() == '{\n "v": 1\n}\n'
    with atomic_dir(out) as tmp:  # a non-empty folder is replaced, not merged
        write_json(os.path.join(tmp, "n.json"), {"v": 2})
    assert os.listdir(out) == ["n.json"] and sorted(os.listdir(tmp_path)) == ["task-bin"]
    with pytest.raises(ValueError):
        with atomic_dir(out) as tmp:
            write_json(os.path.join(tmp, "o.json"), {"v": 3})
            raise ValueError("bad input")
    assert os.listdir(out) == ["n.json"] and sorted(os.listdir(tmp_path)) == ["task-bin"]


def test_atomic_dir_keeps_a_users_folder_named_like_its_old_one(tmp_path):
    """The replaced folder is put aside under a fresh name: a ``PATH.old`` the user made is not deleted."""
    out = tmp_path / "hf"
    out.mkdir()
    (out / "export.txt").write_text("old export")
    (tmp_path / "hf.old").mkdir()
    (tmp_path / "hf.old" / "notes.txt").write_text("user data")
    with atomic_dir(out) as tmp:
        write_json(os.path.join(tmp, "config.json"), {"v": 1})
    assert sorted(os.listdir(tmp_path)) == ["hf", "hf.old"] and os.listdir(out) == ["config.json"]
    assert (tmp_path / "hf.old" / "notes.txt").read_text() == "user data"
    with atomic_dir(str(out) + os.sep) as tmp:  # a trailing slash names the same folder
        write_json(os.path.join(tmp, "model.json"), {"v": 2})
    assert sorted(os.listdir(tmp_path)) == ["hf", "hf.old"] and os.listdir(out) == ["model.json"]
    assert os.listdir(tmp_path / "hf.old") == ["notes.txt"]


def full(code: int = errno.ENOSPC) -> None:
    """A write on a full disk (or quota), as the OS reports it: no path in the error."""
    raise OSError(code, os.strerror(code))


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on its disk"),
                                         (errno.EDQUOT, "the disk quota is used up")])
def test_a_full_disk_names_the_file_being_written_and_removes_only_its_partial(tmp_path, code, words):
    out = tmp_path / "a.json"
    write_json(out, {"v": 1})  # an earlier, finished output
    with pytest.raises(DiskFullError) as caught:
        with atomic_open(out) as f:
            f.write("half")
            full(code)
    line = message(caught.value)
    assert line.startswith(f"{out}: {words} while writing it") and "free space" in line and "[Errno" not in line
    assert os.listdir(tmp_path) == ["a.json"] and json.loads(out.read_text()) == {"v": 1}


def test_a_full_disk_in_a_folder_names_the_folder_whatever_the_writer_says(tmp_path):
    """shutil.copyfile's error names the source file; a file written atomically inside names itself; a library's
    (safetensors) is no OSError: the line names the folder being written, and the earlier one is kept whole."""
    out, source = tmp_path / "model", tmp_path / "spm.model"
    source.write_text("x")
    with atomic_dir(out) as tmp:
        write_json(os.path.join(tmp, "config.json"), {"v": 1})

    def copy(tmp: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(source), None, os.path.join(tmp, "spm.model"))

    def inner(tmp: str) -> None:
        with atomic_open(os.path.join(tmp, "big.json")):
            full()

    def library(tmp: str) -> None:
        raise RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                           'left on device" })')

    for fail in (copy, inner, library):
        with pytest.raises(DiskFullError) as caught:
            with atomic_dir(out) as tmp:
                fail(tmp)
        assert str(caught.value).startswith(f"{out}: no space left on its disk while writing it"), fail
        assert sorted(os.listdir(tmp_path)) == ["model", "spm.model"] and os.listdir(out) == ["config.json"]
    with pytest.raises(RuntimeError, match="unrelated"):  # any other error is left as it is
        with atomic_dir(out):
            raise RuntimeError("unrelated")


def test_a_full_disk_is_one_error_line_of_a_long_command(tmp_path, capsys):
    out = tmp_path / "x.txt"

    def main() -> int:
        with atomic_open(out) as f:
            f.write("half")
            full()
        return 0

    with pytest.raises(SystemExit) as exited:
        exit_main(main, "prog")
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err == (f"prog: error: {out}: no space left on its disk while writing it (the "
                                              "half-written file is removed); free space there, or write to a "
                                              "folder on another disk\n")
    assert os.listdir(tmp_path) == []


def test_file_hash_is_the_digest_of_the_bytes(tmp_path):
    data = os.urandom(3 << 20)
    (tmp_path / "f").write_bytes(data)
    assert file_hash(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    assert file_hash(str(tmp_path / "f"), "sha1") == hashlib.sha1(data).hexdigest()


def test_log_lines_name_the_program_and_the_level():
    stream = io.StringIO()
    log = setup_logging("tool", stream=stream)
    log.info("step 1 done")
    log.warning("2 lines skipped")
    log.error("no input")
    log.debug("hidden at INFO")
    assert stream.getvalue() == "tool: step 1 done\ntool: warning: 2 lines skipped\ntool: error: no input\n"


def test_call_logged_puts_a_commands_output_in_its_log_and_leaves_logging_as_it_was(tmp_path):
    """What a command prints and logs (its logging.basicConfig takes effect, as in a new process: bound to the
    stderr of the moment) lands in the log, not in a handler the caller had; its exit status comes back;
    afterwards the root logger has its old handlers and level, so a later record is not written to the log."""
    import logging

    from tupe_common.process import call_logged

    root, callers = logging.getLogger(), io.StringIO()
    caller = logging.StreamHandler(callers)
    root.addHandler(caller)
    before = (list(root.handlers), root.level)

    def command() -> int:
        print("| a | table |")
        logging.basicConfig(format="%(message)s", level=logging.INFO)  # a no-op if the root had handlers
        logging.getLogger("a.library").info("a library line")
        print("tupe-locality: error: it failed", file=sys.stderr)
        raise SystemExit(3)

    log = tmp_path / "part" / "seed1.log"
    try:
        assert call_logged(command, str(log)) == 3
        assert log.read_text(encoding="utf-8").splitlines() == ["| a | table |", "a library line",
                                                                "tupe-locality: error: it failed"]
        assert (list(root.handlers), root.level) == before and callers.getvalue() == ""
        logging.getLogger("a.library").warning("after the command")  # to the caller's handler, not to the log
        assert callers.getvalue() == "after the command\n" and "after" not in log.read_text(encoding="utf-8")
        assert call_logged(lambda: 0, str(log), append=True) == 0 and log.read_text(encoding="utf-8").count("\n") == 3
    finally:
        root.removeHandler(caller)


def test_os_errors_read_as_the_path_and_what_is_wrong(tmp_path):
    from tupe_common.errors import message

    (tmp_path / "a_file").write_text("x")
    cases = {
        lambda: open(tmp_path, encoding="utf-8"): f"{tmp_path}: is a folder, where a file is expected",
        lambda: os.listdir(tmp_path / "a_file"): f"{tmp_path / 'a_file'}: is not a folder (it, or a folder above "
                                                 "it, is a file), where a folder is expected",
        lambda: os.makedirs(tmp_path / "a_file"): f"{tmp_path / 'a_file'}: exists already",
        lambda: open(tmp_path / "none.txt", encoding="utf-8"): f"{tmp_path / 'none.txt'}: no such file or folder",
    }
    for make_error, expected in cases.items():
        with pytest.raises(OSError) as caught:
            make_error()
        assert message(caught.value) == expected
    assert message(ValueError("plain")) == "plain"
    assert message(OSError("no path here")) == "no path here"


def test_a_log_that_cannot_be_written_stops_the_run_and_says_so(tmp_path, monkeypatch, starts_process):
    """run_logged on a full disk: the child (20,000 lines, more than a pipe holds) is stopped, not left blocked on its
    output for ever; one error names the log and the fix; the log keeps what was written before the disk filled."""
    from tupe_common import process

    class FillsUp(io.StringIO):
        def __init__(self, path):
            super().__init__()
            self.path = path

        def write(self, text):
            if self.tell() > 2000:
                full()
            return super().write(text)

        def close(self):
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(self.getvalue())

    monkeypatch.setattr(process, "open", lambda path, *a, **k: FillsUp(path), raising=False)
    log = tmp_path / "train.log"
    child = [sys.executable, "-c", "import time\nfor i in range(20000): print('line', i)\ntime.sleep(60)"]
    with pytest.raises(process.LogUnwritable) as stopped:
        process.run_logged(child, str(log), dict(os.environ), echo=False)
    assert str(stopped.value) == (f"{log}: no space left on its disk while writing the run's log; the run was stopped "
                                  "and the log keeps what was written; free space there and rerun the same command to "
                                  "resume")
    assert log.read_text().startswith("line 0\nline 1\n") and 2000 < len(log.read_text()) < 2100
