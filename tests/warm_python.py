"""A warm interpreter for the tests: a console script of this environment (fairseq-train, fairseq-preprocess,
tupe-*, ...), ``python script.py`` or ``python -m module`` started by ``conftest.run`` runs in a process forked
from one that has imported torch and fairseq already, instead of a fresh interpreter that imports them again
(~6-7 s of CPU per start on this machine: torch 2 s, scikit-learn and scipy 1.5 s, which fairseq imports at
start, the rest of fairseq 2.5 s; a fork takes ~0.1 s).

The child is a real process running the real entry point (the console script's function, or the script or module
through ``runpy``) with the command's arguments, working directory, environment, stdout, stderr and exit status.
What differs from a fresh start is only what happened before the fork: torch and fairseq are imported, so their
import-time output (log lines, warnings) is not in the child's, and the settings read at import (OMP_NUM_THREADS,
LOGLEVEL, PYTHON*) are the server's. A command is served only where those agree (``WarmPython.can_run``); a
test about a fresh start (import-time output, what a command imports, its time) passes ``fresh=True`` to
``conftest.run``, and ``TESTS_FRESH_PROCESSES=1`` turns the server off.

Protocol (one request at a time, over two pipes): the client writes one JSON line
``{"argv", "cwd", "env", "stdout", "stderr"}``; the server forks, answers ``{"pid"}``, waits for the child and
answers ``{"status"}`` (negative: killed by that signal, as subprocess reports it).
``python tests/warm_python.py REQUEST_FD REPLY_FD`` is the server; ``WarmPython`` starts and talks to it.
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

# Read at import by the server's modules (or by Python itself): a command is served only where its environment
# has the server's values of these (PYTHONPATH apart: its folders are put on the child's sys.path).
IMPORT_TIME_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LOGLEVEL", "PYTHONHASHSEED", "PYTHONWARNINGS",
                        "PYTHONDONTWRITEBYTECODE", "PYTHONSAFEPATH", "PYTHONSTARTUP", "TRITON_INTERPRET")


def console_scripts() -> Dict[str, str]:
    """The console scripts of this environment (fairseq's, this project's): name -> ``module:function``."""
    from importlib.metadata import entry_points

    return {e.name: e.value for e in entry_points(group="console_scripts")}


# ---- the server ----------------------------------------------------------------------------------------------


def _child(request: dict) -> None:
    """In the forked child: become the requested command, then exit with its status (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own process group: a timeout kills it and whatever it started
        stdin = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        import logging

        root = logging.getLogger()  # as a fresh interpreter has it: no handler, level WARNING (fairseq's import
        for handler in list(root.handlers):  # logged through the root logger, which set a default one up)
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if os.environ.get("PYTHONUNBUFFERED"):  # each line reaches the file as it is written
            sys.stdout.reconfigure(line_buffering=True)
            sys.stderr.reconfigure(line_buffering=True)
        argv: List[str] = request["argv"]
        if argv[0] != sys.executable:  # a console script: what its generated file does
            module, function = console_scripts()[os.path.basename(argv[0])].split(":")
            sys.argv, sys.path[0] = list(argv), os.path.dirname(argv[0])
            call = lambda: sys.exit(getattr(importlib.import_module(module), function)())  # noqa: E731
        elif argv[1] == "-m":  # python -m module args...
            sys.argv, sys.path[0] = argv[2:], os.getcwd()
            call = lambda: runpy.run_module(argv[2], run_name="__main__", alter_sys=True)  # noqa: E731
        else:  # python script.py args...
            sys.argv, sys.path[0] = argv[1:], os.path.dirname(os.path.abspath(argv[1]))
            call = lambda: runpy.run_path(argv[1], run_name="__main__")  # noqa: E731
        # PYTHONPATH's folders where a fresh interpreter puts them: after the script's (the server's are there)
        sys.path[1:1] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        code = _status(call)
        import atexit

        atexit._run_exitfuncs()  # what the interpreter does at exit
    except BaseException:  # noqa: BLE001 - the setup itself failed: say so in the child's stderr
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def _status(call) -> int:
    """``call()``'s exit status as the interpreter makes it: 0, SystemExit's code, or 1 after a traceback."""
    try:
        call()
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the interpreter prints it, then ends by the signal itself
        import traceback

        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        return 1


def serve(request_fd: int, reply_fd: int) -> None:
    # The slow imports every served command makes; not fairseq_cli's modules, whose first lines set up logging
    # (in the child, as in a fresh process).
    import torch  # noqa: F401
    import fairseq  # noqa: F401
    import fairseq.options  # noqa: F401

    requests = os.fdopen(request_fd, "r")
    replies = os.fdopen(reply_fd, "w")

    def reply(**message) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    reply(ready=True, modules=sorted({name.split(".")[0] for name in sys.modules}))
    for line in requests:  # EOF: the client is gone
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            _child(request)
        reply(pid=pid)
        _, status = os.waitpid(pid, 0)
        reply(status=os.waitstatus_to_exitcode(status))


# ---- the client ------------------------------------------------------------------------------------------------


class WarmPython:
    """The server of this test process (started at the first request, ended with this process)."""

    _instance: Optional["WarmPython"] = None

    @classmethod
    def get(cls) -> "WarmPython":
        if cls._instance is None or cls._instance.server.poll() is not None:
            cls._instance = cls()
        return cls._instance

    def __init__(self) -> None:
        request_r, self.request_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        self.env = dict(os.environ)
        log = open(Path(tempfile.gettempdir()) / f"warm_python.{os.getpid()}.log", "w")  # what the server printed
        self.server = subprocess.Popen([sys.executable, __file__, str(request_r), str(reply_w)], pass_fds=(request_r, reply_w),
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        os.close(request_r)
        os.close(reply_w)
        self.buffer = b""
        self.lock = threading.Lock()
        hello = self._read(timeout=300)
        if hello.get("ready") is not True:
            raise RuntimeError(f"the warm Python server did not start: see {log.name}")
        self.modules = set(hello["modules"])  # imported before any fork: a PYTHONPATH may not shadow them

    _scripts: Optional[Dict[str, str]] = None

    @classmethod
    def can_run(cls, cmd: List[str], env: Dict[str, str]) -> bool:
        """Whether ``cmd`` is a console script of this environment, ``python script.py ...`` or ``python -m module
        ...`` with this interpreter, and ``env`` agrees with the server's import-time settings (the server's
        environment is this process's at its start) and starts nothing of its own (a sitecustomize on PYTHONPATH)."""
        if cls._scripts is None:
            cls._scripts = console_scripts()
        bin_dir = os.path.dirname(sys.executable)
        if cmd[0] == sys.executable:
            served = len(cmd) > 1 and (cmd[1].endswith(".py") or (cmd[1] == "-m" and len(cmd) > 2))
        else:
            served = os.path.dirname(cmd[0]) == bin_dir and os.path.basename(cmd[0]) in cls._scripts
        server = cls.get() if served else None
        return served and all(env.get(k) == server.env.get(k) for k in IMPORT_TIME_SETTINGS) and not server.shadowed(
            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path])

    def shadowed(self, folders: List[str]) -> bool:
        """Whether ``folders`` (a command's PYTHONPATH) hold a module the server imported already, or a
        sitecustomize that a fresh start would run."""
        for folder in folders:
            names = {n[:-3] if n.endswith(".py") else n for n in (os.listdir(folder) if os.path.isdir(folder) else [])}
            if names & (self.modules | {"sitecustomize", "usercustomize"}):
                return True
        return False

    def _read(self, timeout: float) -> dict:
        """The server's next reply line (raw reads: a buffered reader could hold a line that select cannot see)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.reply_r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise subprocess.TimeoutExpired("warm python", timeout)
            chunk = os.read(self.reply_r, 65536)
            if not chunk:
                raise RuntimeError("the warm Python server ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def completed(self, cmd: List[str], cwd: Path, env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """``cmd`` run as ``subprocess.run(..., capture_output=True, text=True)`` would: status and output."""
        with tempfile.TemporaryDirectory(prefix="warm-") as d:
            status = self.run(cmd, cwd, env, timeout, Path(d) / "stdout", Path(d) / "stderr")
            out, err = ((Path(d) / name).read_text(encoding="utf-8") for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(cmd, status, out, err)

    def run(self, cmd: List[str], cwd: Path, env: Dict[str, str], timeout: float, stdout: Path, stderr: Path) -> int:
        """Run ``cmd`` in a forked child; its exit status (``subprocess.TimeoutExpired`` after killing it)."""
        sys.audit("subprocess.Popen", cmd[0], cmd, str(cwd), env)  # a process starts (tests/conftest.py's audit)
        with self.lock:
            request = {"argv": [str(c) for c in cmd], "cwd": str(cwd), "env": env, "stdout": str(stdout),
                       "stderr": str(stderr)}
            os.write(self.request_w, (json.dumps(request) + "\n").encode())
            pid = self._read(timeout=60)["pid"]
            start = time.monotonic()
            try:
                return self._read(timeout=timeout)["status"]
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._read(timeout=60)
                raise subprocess.TimeoutExpired(cmd, time.monotonic() - start) from None


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
