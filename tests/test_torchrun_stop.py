"""A stop sent to torchrun alone (``kill`` of its pid, not of pretrain.sh's): torchrun ends its ranks and exits
128 + N, and pretrain.py, which waits for it, says the last line as for a stop sent to itself."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

CODE = """
import sys
from tupe_pretrain.pretrain import say_to_stderr
from tupe_pretrain.torchrun import supervise
cmd = ["torchrun", "--standalone", "--nproc-per-node", "1", "--no-python", "sleep", "120"]
sys.exit(supervise(sys.argv[1], cmd, dict(__import__("os").environ), say_to_stderr))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_of_torchrun_alone_ends_with_the_line_and_128_plus_n(tmp_path, starts_process, sig):
    p = subprocess.Popen([sys.executable, "-c", CODE, str(tmp_path)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    torchrun = rank = None
    while time.monotonic() < deadline and rank is None:  # torchrun, and its rank (sleep), started
        time.sleep(0.2)
        tree = psutil.Process(p.pid).children(recursive=True)
        torchrun = next((c for c in tree if "tupe_pretrain.torchrun" in " ".join(c.cmdline())), None)
        rank = next((c for c in tree if c.name() == "sleep"), None)
    assert rank is not None, "torchrun did not start its rank"
    torchrun.send_signal(sig)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 128 + sig, err[-3000:]
    assert err.strip().splitlines()[-1] == (f"pretrain.sh: error: stopped by {sig.name} (sent to torchrun); no checkpoint "
                                            "was saved yet: rerun the same command to start the run again"), err[-3000:]
    assert not rank.is_running() or rank.status() == psutil.STATUS_ZOMBIE  # no rank left training
