"""One way for our commands to fail: the last line on the screen says what is wrong and what to do.

* ``run_command(run, args)``: runs a command, turns any exception into one ``error: ...`` line on
  stderr; the traceback only with ``TUPE_DEBUG=1``. Exit codes are the project's one convention (docs/troubleshooting.md,
  "Exit codes"; shell: train_scripts/lib.sh): 2 wrong usage or settings (argparse, ``UsageError``: nothing
  was changed; also a package the command needs that is not installed: the line gives the ``pip install``),
  1 the run failed (a missing, corrupt or foreign input named in the message; an unexpected error says it is
  a bug).
* ``python -m tupe_tools.errors LOG`` (``tupe-last-error LOG``): for scripts that run
  ``fairseq-train`` into a log, prints the log's final exception as that one line, e.g.

      fairseq-train ... > "$log" 2>&1 || { tail -n 30 "$log" >&2; tupe-last-error "$log" >&2; exit 1; }
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import traceback
from typing import Callable, List, Optional, Tuple

DEBUG_ENV = "TUPE_DEBUG"


from tupe_common.checkpoint_file import without_torch_advice  # noqa: E402
from tupe_common.errors import UsageError, stdout_reader_left  # noqa: E402  (the project's one usage error: exit 2)
from tupe_common.errors import message as os_message  # noqa: E402
from tupe_common.fairseq_exit import RESUME_TAIL, TRAIN_ERROR  # noqa: E402
# Errors a user can fix (bad file, bad setting); their message is the whole story. Our own error
# classes (ConversionError, VariantMismatchError, DictionaryMismatchError, ...) derive from ValueError.
USER_ERRORS = (OSError, ValueError)
USER_ERROR_NAMES = {"ValueError", "FileNotFoundError", "PermissionError", "IsADirectoryError", "OSError"}
# Packages of setup.py's optional extras, by import name (tests/test_cli_errors.py checks it against the
# installed metadata), and this project's own top-level modules: a missing one of those is a bug.
OPTIONAL = {"transformers": "hf", "safetensors": "hf", "accelerate": "hf", "huggingface_hub": "hf", "pyarrow": "hf"}
OWN = {"tupe_core", "tupe_plugin", "tupe_tools", "tupe_common", "preprocess", "glue", "study", "bench", "train_scripts"}


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")



def missing_package(error: BaseException) -> str:
    """The package a ``ModuleNotFoundError`` lacks when it is not one of ours (an install to fix), else ""."""
    top = (getattr(error, "name", None) or "").partition(".")[0] if isinstance(error, ModuleNotFoundError) else ""
    return "" if top in OWN else top


def install_advice(package: str) -> str:
    """What installs ``package``: its extra, the requirements, or torch first (docs/install.md)."""
    if package in OPTIONAL:
        extra = OPTIONAL[package]
        return f"it comes with the optional '{extra}' extra: pip install -c constraints.txt -e '.[{extra}]'"
    if package == "torch":
        return "install torch for your machine first (docs/install.md), then pip install -c constraints.txt -e ."
    return "it is a requirement of tupe_plugin: pip install -c constraints.txt -e ."


def require(*packages: str) -> None:
    """Raise ``ModuleNotFoundError`` for the first of ``packages`` that cannot be imported (a command checks its
    optional packages before it starts work; ``error_line`` says how to install it)."""
    for name in packages:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a finder that refuses the name
            found = False
        if not found:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def error_line(error: BaseException) -> str:
    """``error: <message>`` on one line; unexpected exceptions are named as such."""
    message = without_torch_advice(error)
    package = missing_package(error)
    if package:  # run from the repository, where constraints.txt is
        return f"error: {package} is not installed; {install_advice(package)} (in the repository)"
    if isinstance(error, USER_ERRORS):
        return f"error: {os_message(error) if isinstance(error, OSError) else message}"
    if type(error).__name__ == "UnpicklingError":  # torch.load of a file that is no (allowed) checkpoint
        return f"error: not a readable checkpoint ({message})"
    return (f"error: unexpected {type(error).__name__}: {message} (a bug: rerun with {DEBUG_ENV}=1 "
            "and report the traceback)")


def run_command(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``run(args)``, with any exception reported as the last line (see ``error_line``)."""
    try:
        code = run(args)
        sys.stdout.flush()  # buffered output (stdout a pipe) meets a reader that left here, not in Python's exit
        return code
    except KeyboardInterrupt:
        code, line = 130, "error: interrupted"
    except BrokenPipeError:  # the reader of the output left (``| head``): stop quietly, as a Unix tool does
        stdout_reader_left()
        return 141  # 128 + SIGPIPE: what a shell reports for a tool that SIGPIPE ended
    except Exception as e:  # noqa: BLE001  (every failure ends the same way)
        if debug():
            traceback.print_exc()
        code, line = (2 if isinstance(e, UsageError) or missing_package(e) else 1), error_line(e)
    sys.stdout.flush()
    print(line, file=sys.stderr, flush=True)
    return code


TRACEBACK = "Traceback (most recent call last):"
EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)|Exception))(?::\s?(.*))?$")
MESSAGE_END = re.compile(r"^(\d{4}-\d\d-\d\d|\[|Traceback|-- Process|During handling|The above exception)")


def _exceptions(log_text: str) -> List[Tuple[str, str, str]]:
    """(qualified class, class, message) of every traceback in the log, in order."""
    lines = log_text.splitlines()
    found = []
    for start in (i for i, line in enumerate(lines) if line.strip() == TRACEBACK):
        for i in range(start + 1, len(lines)):
            line = lines[i]
            if not line or line[:1].isspace():
                continue  # the frames
            match = EXCEPTION_LINE.match(line)
            if not match:
                break
            message = [match.group(3) or ""]
            for more in lines[i + 1:]:  # a multi-line message, up to the next blank or log line
                if not more.strip() or MESSAGE_END.match(more):
                    break
                message.append(more.strip())
            found.append((match.group(1), match.group(2), " ".join(" ".join(message).split())))
            break
    return found


def last_error(log_text: str) -> Optional[str]:
    """The error a log ends with, as one ``error: ...`` line: the last exception raised by
    ``tupe_plugin``, ``tupe_core`` or ``tupe_common`` (fairseq's trainer re-raises ours as "Cannot load model
    parameters ..."), else the log's final exception; None when the log holds no traceback."""
    found = _exceptions(log_text)
    if not found:
        return None
    ours = [e for e in found if e[0].startswith(("tupe_plugin", "tupe_core", "tupe_common"))]
    qualified, name, message = (ours or found)[-1]
    if ours or name in USER_ERROR_NAMES:
        return f"error: {message or name}"
    return f"error: {name}: {message}" if message else f"error: {name}"


def diverged(log_text: str) -> str:
    """fairseq's stop on a loss or gradient that is not finite, as its log says it (``FloatingPointError: gradients
    are Nan/Inf``; under fp16 ``Minimum loss scale reached ...``): the last such message, '' when none. Its NaN
    detector's re-run can end the log with another traceback, which hides it from :func:`last_error`."""
    found = re.findall(r"^FloatingPointError: (.*)$", log_text, re.M)
    return found[-1].strip() if found else ""


def fairseq_error(log_text: str) -> str:
    """Why fairseq-train failed, for the line of the runner that started it (finetune.sh, a study's pre-training):
    the plugin's own ``fairseq-train: error:`` line, the last in the log (a full disk names the file being written;
    a rank's, under torchrun), without its advice to resume (the runner gives its own); else a divergence
    (:func:`diverged`); else the log's last exception
    (:func:`last_error`: our plugin's error, a wrong variant, ...); '' when neither."""
    ours = re.findall(rf"^(?:\[rank\d+\]: )?{re.escape(TRAIN_ERROR)}(.*)$", log_text, re.M)  # torchrun: [rankN]:
    if ours:
        return ours[-1].split(RESUME_TAIL)[0]
    if diverged(log_text):
        return f"diverged (FloatingPointError: {diverged(log_text)})"
    return (last_error(log_text) or "").removeprefix("error: ")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="tupe-last-error",
        description="Print the final exception of a fairseq-train log as one 'error: ...' line "
        "(for scripts that run fairseq-train into a log file). Exit 0; 1 when the log cannot be read.",
    )
    p.add_argument("log", help="the log file (stdout and stderr of the failed command)")
    args = p.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as f:
            line = last_error(f.read())
    except OSError as e:  # a missing input: said on stderr, exit 1 (the caller's own error stays its exit status)
        from tupe_common.errors import message

        print(f"tupe-last-error: error: cannot read the log: {message(e)}", file=sys.stderr, flush=True)
        return 1
    print(line or f"error: the command failed without a Python traceback; see {args.log}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
