"""One rank of a multi-process fairseq-train, started by torchrun or srun (``tupe-pretrain`` does this).

    torchrun --nproc-per-node 8 --no-python python -m tupe_pretrain.rank 8 gpu DATA ... --distributed-world-size 8
    srun --ntasks 16 python -m tupe_pretrain.rank 16 gpu DATA ...   (MASTER_ADDR, MASTER_PORT exported)

Why: fairseq's own inference from the launcher's environment breaks on CPU (rank % cuda count -> division by
zero; with the default --distributed-world-size 1 every process silently trains alone into the same save dir).
This wrapper passes rank, device and init method explicitly, the same way for torchrun and srun, CPU (gloo) and
GPU (nccl), and refuses to start when the launcher's world size is not the one the command was built for.
fairseq-train runs as a child: the launcher's SIGTERM, SIGINT or SIGHUP is passed on to it as SIGTERM (it saves and
stops), and its status counts as tupe_common.fairseq_exit says (an abort at exit after a finished run is 0)."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, Mapping, Optional, Tuple

from tupe_common.fairseq_exit import DONE_FILE_ENV, finished_status
from tupe_common.jobs import stderr_say

PROG = "fairseq_rank"
say = stderr_say(PROG)  # "fairseq_rank: message" on stderr
USAGE = f"Usage: {PROG} EXPECTED_WORLD_SIZE gpu|cpu FAIRSEQ_TRAIN_ARGS..."


class RankError(ValueError):
    """The launcher's environment does not fit the command: exit 2 before fairseq-train starts."""


def rank_of(expected: str, device: str, env: Mapping[str, str]) -> Tuple[Dict[str, str], List[str]]:
    """The variables the rank exports (RANK, WORLD_SIZE, LOCAL_RANK: read by init_method env://) and the flags
    appended to fairseq-train's arguments, from torchrun's (RANK/LOCAL_RANK/WORLD_SIZE) or srun's
    (SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS) variables."""
    if env.get("WORLD_SIZE"):
        world, rank, local, launcher = env["WORLD_SIZE"], env.get("RANK", ""), env.get("LOCAL_RANK", ""), "torchrun"
    elif env.get("SLURM_NTASKS") and env.get("SLURM_PROCID"):
        world, rank, local, launcher = env["SLURM_NTASKS"], env["SLURM_PROCID"], env.get("SLURM_LOCALID", ""), "srun"
    else:
        raise RankError("not started by torchrun or srun (no WORLD_SIZE/RANK nor SLURM_NTASKS/SLURM_PROCID)")
    if world != expected:
        raise RankError(f"{launcher} started {world} processes but the command was built for world size {expected} "
                        f"(--distributed-world-size {expected}): refusing to train with a different batch size")
    if not rank or not local:
        raise RankError(f"{launcher} set no local rank (LOCAL_RANK / SLURM_LOCALID) or rank (RANK)")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            raise RankError(f"{name} is not set")
    if device == "gpu":  # one GPU per process: the local rank, unless the launcher bound one GPU to each task
        visible = env.get("CUDA_VISIBLE_DEVICES", "")
        device_id = "0" if visible and "," not in visible else local
    elif device == "cpu":
        device_id = "0"  # --device-id > 0 would call torch.cuda.set_device
    else:
        raise RankError(f"device must be gpu or cpu, not '{device}'")
    exported = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": local}
    return exported, ["--distributed-rank", rank, "--device-id", device_id, "--distributed-init-method", "env://",
                      "--distributed-no-spawn"]


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip() + "\n\n" + USAGE)
        return 0
    if len(argv) < 3:
        sys.stderr.write(USAGE + "\n")
        return 2
    (expected, device), args = argv[:2], argv[2:]
    try:
        exported, flags = rank_of(expected, device, os.environ)
    except RankError as e:
        say(f"error: {e}")
        return 2
    # FAIRSEQ_TRAIN: the command as shell-quoted words (fairseq-train, or BF16=1's python -m tupe_pretrain.fairseq_train)
    train = shlex.split(os.environ.get("FAIRSEQ_TRAIN", "fairseq-train"))
    fd, done_file = tempfile.mkstemp(prefix=f"fairseq_rank.{exported['RANK']}.")
    os.close(fd)
    try:
        child = subprocess.Popen([*train, *args, *flags], env={**os.environ, **exported, DONE_FILE_ENV: done_file})

        def pass_on(signum: int, frame: object) -> None:
            child.send_signal(signal.SIGTERM)  # fairseq-train (tupe_plugin.graceful_stop) saves and stops

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            if signal.getsignal(sig) != signal.SIG_IGN:  # an ignored one stays so (nohup's SIGHUP, a background SIGINT)
                signal.signal(sig, pass_on)
        status = child.wait()  # a handled signal interrupts the wait, which goes on (PEP 475) for the child's status
        return finished_status(128 - status if status < 0 else status, done_file, say)
    finally:
        os.unlink(done_file)


if __name__ == "__main__":
    sys.exit(main())
