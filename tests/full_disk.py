"""A command run with one module's writes failing as on a full disk: ``python -c full_disk_script(...) ARGS``.

The module's ``open`` is replaced: a file it opens whose path matches fails a write once ``FULL_AFTER`` bytes
(the environment) were written to it, as the OS reports it (ENOSPC, no path in the error: tests/test_common.py's
``full``); the command then runs as ``python -m COMMAND ARGS``."""
from __future__ import annotations

SCRIPT = """
import errno, os, runpy
import {writer} as writer

class FullDisk:
    def __init__(self, f):
        self.f, self.written = f, 0
    def write(self, data):
        self.written += len(data)
        if self.written > int(os.environ["FULL_AFTER"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.f.write(data)
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()

def full_open(path, mode="r", *args, **kwargs):
    f = open(path, mode, *args, **kwargs)
    path = str(path)
    return FullDisk(f) if ({matches}) else f

writer.open = full_open  # the module's `open`, before the builtin
runpy.run_module("{command}", run_name="__main__", alter_sys=True)
"""


def full_disk_script(writer: str, command: str, matches: str) -> str:
    """``writer``: the module whose files fill the disk; ``command``: the module run; ``matches``: a Python
    expression of ``path`` (a str) that picks the files."""
    return SCRIPT.format(writer=writer, command=command, matches=matches)
