"""A command run with its output in a log file: ``run_logged`` (the study's parts, ``glue/finetune.py``'s runs)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Mapping, Sequence


def run_logged(cmd: Sequence[str], log: str, env: Mapping[str, str], echo: bool = True, append: bool = False) -> int:
    """Run ``cmd`` with its stdout and stderr in ``log`` (and on stderr when ``echo``); returns its exit status as
    the shell reports it (128 + N when signal N ended it: an abort at exit is 134)."""
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "a" if append else "w", encoding="utf-8") as f:
        p = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env), text=True,
                             errors="replace")
        for line in p.stdout:
            f.write(line)
            if echo:
                sys.stderr.write(line)
        status = p.wait()
    return 128 - status if status < 0 else status
