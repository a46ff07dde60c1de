"""How a fairseq-train child's exit status is counted (the one rule, for fine-tuning and each pre-training rank).

An abort at interpreter exit (status 134: SIGABRT, "terminate called without an active exception" from a thread)
after the run finished is a finished run: ``tupe_plugin.clean_exit`` writes one line to the file named by
``TUPE_DONE_FILE`` when the run ends normally (training done, final checkpoint saved, all ranks past fairseq's last
barrier). Any other status, and a 134 before that line, counts as it is."""
from __future__ import annotations

import os
from typing import Callable

DONE_FILE_ENV = "TUPE_DONE_FILE"
# The plugin's one error line of a fairseq-train child (tupe_plugin/full_disk.py writes it, the fine-tuning runner
# reads it back): TRAIN_ERROR, the reason, then advice starting with RESUME_TAIL (a pre-training's: a fine-tuning
# starts over instead, so its runner leaves the advice out).
TRAIN_PROG = "fairseq-train"  # the name a training process's own lines start with (also its stop line)
TRAIN_ERROR = f"{TRAIN_PROG}: error: "
RESUME_TAIL = "; rerun the same command to resume"
# The file the full-disk line is also written to (appended, when the variable names one): a supervisor that does not
# read the rank's output (pretrain.py under torchrun) repeats it as its own last line.
ERROR_FILE_ENV = "TUPE_ERROR_FILE"


def finished_status(status: int, done_file: str, say: Callable[[str], None]) -> int:
    """0 for a 134 after the run finished (``done_file`` holds the line), with a warning; ``status`` otherwise."""
    if status == 134 and os.path.isfile(done_file) and os.path.getsize(done_file):
        with open(done_file, encoding="utf-8") as f:
            say(f"warning: fairseq-train aborted at exit (status 134) after the run finished ({f.readline().strip()}): "
                "counted as done")
        return 0
    return status
