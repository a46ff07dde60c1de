"""The project's one job runner: the C4 steps (``python -m tupe_preprocess.c4``), the GLUE grid (``tupe_glue.grid``) and
the study (``tupe-study``) all hand it their commands.

A :class:`Job` is a command with its log, its group (a stage: the progress line counts each group apart), when it
may start (``ready``: what it needs has ended) and when it has nothing left to do (``done``: dropped, not run).
:func:`run_jobs` runs them ``lanes`` at a time: a free lane takes the first job that is ready, so no job waits
for a whole stage. Lane k runs on GPU ``gpus[k % len(gpus)]`` (``CUDA_VISIBLE_DEVICES``) when GPUs are given;
each job gets cores/lanes CPU threads unless the environment sets ``OMP_NUM_THREADS``. A job that exits 2 (a
usage error: every other job would repeat it) can stop the run: nothing new starts, the running jobs end. A stop
of this process (``tupe_common.process.Stopped``: SIGTERM, SIGINT, SIGHUP) reaches every running job's process
group; nothing new starts, and the stop is raised once the jobs ended (or were killed after the grace period).
:func:`slurm_ranges` writes the indices still to do as a SLURM ``--array``.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, List, Mapping, Optional, Sequence

from tupe_common import process

Say = Callable[[str], None]



@dataclass(frozen=True)
class Job:
    """A command of :func:`run_jobs`. ``log``: its stdout and stderr (None: stderr of this process, stdout
    dropped)."""
    label: str
    cmd: List[str]
    log: Optional[str] = None
    group: str = ""
    ready: Callable[[], bool] = lambda: True
    done: Callable[[], bool] = lambda: False


@dataclass
class Ran:
    """What :func:`run_jobs` did: the labels of the jobs that failed or could never start (job order), and the
    job whose usage error stopped the run (``stop_on_usage_error``)."""
    failed: List[str] = field(default_factory=list)
    usage_error: Optional[Job] = None


def cores() -> int:
    """The CPU cores this process may use (SLURM, taskset, cgroups)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cuda_device_count() -> int:
    """The CUDA devices torch sees (CUDA_VISIBLE_DEVICES respected); 0 without torch. Imports torch (seconds)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


def visible_gpus(environ: Mapping[str, str]) -> List[str]:
    """The GPU ids a child may be given: ``CUDA_VISIBLE_DEVICES`` as set (``""`` or ``-1``: none), else every GPU
    torch counts when torch is already imported (this module never imports it), else none."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        ids = [g.strip() for g in environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
        return [] if ids[:1] == ["-1"] else ids
    torch = sys.modules.get("torch")
    count = torch.cuda.device_count() if torch is not None and hasattr(torch, "cuda") else 0
    return [str(i) for i in range(count)]


def progress(ended: int, total: int, took: Sequence[float], lanes: int) -> str:
    """'k of n ended, about m min left': the jobs left at the mean time of the ended ones, ``lanes`` at once."""
    left = total - ended
    if not left:
        return f"{ended} of {total} ended"
    minutes = sum(took) / len(took) * math.ceil(left / lanes) / 60
    return f"{ended} of {total} ended, about {minutes:.0f} min left in this stage at the pace so far"


def slurm_ranges(indices: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'"""
    parts: List[str] = []
    start: Optional[int] = None
    for i, x in enumerate(indices):
        if start is None:
            start = x
        if i + 1 == len(indices) or indices[i + 1] != x + 1:
            parts.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return ",".join(parts)


def stderr_say(prefix: str) -> Say:
    """``say`` writing ``PREFIX: message`` lines to stderr in one write (lanes' lines do not interleave)."""
    def say(msg: str) -> None:
        sys.stderr.write(f"{prefix}: {msg}\n")
        sys.stderr.flush()
    return say


def run_jobs(jobs: Sequence[Job], lanes: int, env: Mapping[str, str], say: Say, gpus: Sequence[str] = (),
             stop_on_usage_error: bool = False) -> Ran:
    """Run ``jobs``, at most ``lanes`` at once, in the caller's folder (the installed packages: no PYTHONPATH)."""
    threads = str(max(1, cores() // lanes))
    base = dict(env)
    base.setdefault("OMP_NUM_THREADS", threads)
    base.setdefault("MKL_NUM_THREADS", base["OMP_NUM_THREADS"])
    lock, took = threading.Lock(), defaultdict(list)  # seconds of each ended job per group, for the progress line
    total = Counter(job.group for job in jobs)
    ran, failed = Ran(), set()

    def one(job: Job, lane: int) -> int:
        job_env = dict(base)
        where = ""
        if gpus:
            job_env["CUDA_VISIBLE_DEVICES"] = gpus[lane % len(gpus)]
            where = f", GPU {job_env['CUDA_VISIBLE_DEVICES']}"
        say(f"{job.label}: started{where}, {job_env['OMP_NUM_THREADS']} thread(s)"
            + (f", log {job.log}" if job.log else ""))
        start = time.monotonic()
        if job.log:
            os.makedirs(os.path.dirname(job.log) or ".", exist_ok=True)
            with open(job.log, "a", encoding="utf-8") as f:
                rc = process.run(job.cmd, stdout=f, stderr=subprocess.STDOUT, env=job_env)
        else:
            rc = process.run(job.cmd, stdout=subprocess.DEVNULL, env=job_env)
        seconds = time.monotonic() - start
        if process.stopping() is not None:
            say(f"{job.label}: stopped (exit {rc})" + (f", log {job.log}" if job.log else ""))
            return rc
        with lock:
            took[job.group].append(seconds)
            count = progress(len(took[job.group]), total[job.group], took[job.group], lanes)
            see = f": see {job.log}" if job.log else ""
            say(f"error: {job.label} failed (exit {rc}){see}; {count}" if rc
                else f"{job.label}: finished in {seconds:.0f} s; {count}")
        return rc

    pending, running, free = list(range(len(jobs))), {}, list(range(lanes))
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        try:
            while pending or running:
                for i in list(pending):
                    if len(running) == lanes or ran.usage_error:
                        break
                    if jobs[i].done():
                        pending.remove(i)
                        with lock:
                            total[jobs[i].group] -= 1
                    elif jobs[i].ready():
                        pending.remove(i)
                        lane = free.pop(0)
                        running[pool.submit(one, jobs[i], lane)] = (i, lane)
                if ran.usage_error and pending:
                    say(f"error: {ran.usage_error.label} failed with a usage error (exit 2): the other jobs would fail "
                        f"the same way, so {len(pending)} job(s) are not started; fix the setting and rerun")
                    failed.update(pending)
                    pending = []
                if not running:
                    if pending:  # what the rest needs failed
                        for i in pending:
                            say(f"error: {jobs[i].label}: not started: a job it needs did not finish")
                        failed.update(pending)
                    break
                ended = set()
                while not ended:  # in steps: a stop signal that a lane's thread received runs its handler here
                    ended, _ = wait(running, timeout=process.WAKE_S, return_when=FIRST_COMPLETED)
                for future in ended:
                    i, lane = running.pop(future)
                    free.append(lane)
                    free.sort()
                    rc = future.result()
                    if rc:
                        failed.add(i)
                        if rc == 2 and stop_on_usage_error and not ran.usage_error:
                            ran.usage_error = jobs[i]
        except BaseException:  # a stop (or a bug): no job outlives the runner; the pool's threads end with their jobs
            process.end_children()
            raise
    ran.failed = [jobs[i].label for i in sorted(failed)]
    return ran
