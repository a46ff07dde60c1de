"""The project's one usage error, for every command (the ``tupe-*`` console scripts and their shims).

``UsageError``: a wrong option value or setting, found before any work; the command says it in one line and
exits 2, as argparse does for its own usage errors (docs/troubleshooting.md, "Exit codes"). A ``ValueError``,
so the commands' ``except ValueError`` paths and ``tupe_tools.errors.USER_ERRORS`` keep treating it as
the user's to fix.

``stdout_reader_left()``: what a command does when the reader of its output leaves (``... | head``: a
BrokenPipeError) before it stops quietly, as a Unix tool does.

``exit_main(main, prog)``: a long command's ``python -m`` entry; a stop (SIGTERM, Ctrl-C's SIGINT, SIGHUP) ends it,
and every process it started, with one line and exit 128 + the signal's number (143, 130, 129).
``message(error)``: an exception's text for an ``error:`` line, an OS error's as the path and what was wrong
with it (not ``[Errno 21] Is a directory: 'x'``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Callable, NoReturn

def command_name(default: str) -> str:
    """The name a command's messages start with: its console script's (``tupe-pretrain``) when it was started as one,
    else ``default``, the shim's (``pretrain.sh``: what ``python -m`` and the shell entry points print, as before)."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("tupe-") else default


class UsageError(ValueError):
    """A wrong option value or setting (a --length beyond the checkpoint, an OUTPUT that exists without
    --force, an unknown --tasks name, a VARIANTS entry that is not registered): exit 2, nothing changed."""


def stdout_reader_left() -> None:
    """After a BrokenPipeError on stdout: point stdout at /dev/null, so that Python's flush at exit raises no second
    error. The caller then exits quietly (141, 128 + SIGPIPE, is what a shell reports for a tool SIGPIPE ended)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture)
        pass


RESUME = "rerun the same command to resume (finished outputs are kept)"
RESUME_RUNS = "rerun the same command to resume (finished runs are skipped)"  # the commands that run many runs


def stopped_line(prog: str, signal_name: str, resume: str = RESUME) -> str:
    """The last line of a command a signal stopped."""
    return f"{prog}: error: stopped by {signal_name}; {resume}"


def exit_main(main: Callable[[], int], prog: str, resume: str = RESUME) -> NoReturn:
    """``sys.exit(main())``, where a stop ends the command with the one line ``PROG: error: stopped by SIGTERM;
    RESUME`` and exit 128 + the signal's number, not a traceback: SIGTERM, SIGINT (Ctrl-C) and SIGHUP are passed on
    to every process the command started, which then has ``tupe_common.process.GRACE_S`` seconds to end before what
    is left of it is killed (``tupe_common.process``); every output is written under a partial name and renamed when
    complete, so what finished is kept and a rerun redoes only what was under way. An OS error that ``main`` left
    (a path missing or of the wrong kind) is one ``PROG: error:`` line (:func:`message`) and exit 1; TUPE_DEBUG=1
    shows its traceback."""
    from tupe_common import process

    process.install_stop_handlers()
    try:
        code = main()
        sys.stdout.flush()  # buffered output (stdout a pipe) meets a reader that left here, not in Python's exit
    except (process.Stopped, KeyboardInterrupt) as e:  # KeyboardInterrupt: a SIGINT before the handlers were set
        stopped = e if isinstance(e, process.Stopped) else process.Stopped(signal.SIGINT)
        if not isinstance(e, process.Stopped):  # the handler passes its signal on as it comes
            process.signal_children(stopped.signum)
        process.end_children()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        sys.stderr.write(stopped_line(prog, stopped.name, resume) + "\n")
        code = stopped.status
    except BrokenPipeError:  # `... | head`: the reader left; quiet, as a tool that SIGPIPE ended
        stdout_reader_left()
        code = 141
    except OSError as e:
        if os.environ.get("TUPE_DEBUG") == "1":
            raise
        sys.stdout.flush()
        sys.stderr.write(f"{prog}: error: {message(e)}\n")
        code = 1
    sys.exit(code)


OS_ERRORS = (  # (class, what the line says of its path), most specific first
    (IsADirectoryError, "is a folder, where a file is expected"),
    (NotADirectoryError, "is not a folder (it, or a folder above it, is a file), where a folder is expected"),
    (FileNotFoundError, "no such file or folder"),
    (FileExistsError, "exists already"),
    (PermissionError, "permission denied"),
)


def message(error: BaseException) -> str:
    """The text of ``error`` for an ``error:`` line: an OS error with a path says the path and what was wrong
    with it (a folder where a file is expected, and the reverse: errno's names read as riddles there); any
    other error its own message."""
    if isinstance(error, OSError) and error.filename is not None and not str(error).startswith(str(error.filename)):
        what = next((text for cls, text in OS_ERRORS if isinstance(error, cls)), error.strerror or str(error))
        return f"{error.filename}: {what}"
    return str(error)
