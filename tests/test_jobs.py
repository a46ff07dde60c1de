"""The one job runner (tupe_common/jobs.py) that the C4 steps, the GLUE grid and the study share: lanes, readiness,
failures, GPU slots, a usage error that stops the rest, SLURM ranges. The commands are tiny Python processes."""
from __future__ import annotations

import os
import re
import sys

from conftest import ROOT
from tupe_common.jobs import Job, cores, progress, run_jobs, slurm_ranges, stderr_say, visible_gpus


def run_in_lanes(jobs, lanes, env, **kw):
    return run_jobs(jobs, lanes, env, say=stderr_say("runner"), **kw).failed


def test_slurm_ranges():
    assert slurm_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert slurm_ranges([3]) == "3" and slurm_ranges([]) == ""


def test_progress_of_a_stage():
    # 3 of 8 ended at 600 s each, 2 lanes: 5 left take 3 rounds of 10 min
    assert progress(3, 8, [600, 500, 700], 2) == "3 of 8 ended, about 30 min left in this stage at the pace so far"
    assert progress(8, 8, [60] * 8, 2) == "8 of 8 ended"


def test_lanes_run_at_once_and_name_what_failed(tmp_path, capsys, starts_process):
    """N lanes: N commands at a time (each of two waits for the other's file: only possible at once), with
    cores/N threads unless OMP_NUM_THREADS is set, each writing its own log; failures named, the rest go on."""
    def meet(me, other):
        return [sys.executable, "-c", "import os, pathlib, time\n"
                f"pathlib.Path({str(tmp_path / me)!r}).touch()\n"
                f"end = time.time() + 60\n"
                f"while not os.path.exists({str(tmp_path / other)!r}):\n"
                "    assert time.time() < end, 'ran alone'\n    time.sleep(0.05)\n"
                "print('threads', os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])"]

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    jobs = [Job("a", meet("a", "b"), str(tmp_path / "logs" / "a.log")), Job("b", meet("b", "a"), str(tmp_path / "logs" / "b.log")),
            Job("c", [sys.executable, "-c", "raise SystemExit(3)"], str(tmp_path / "logs" / "c.log"))]
    assert run_in_lanes(jobs, 2, env) == ["c"]
    said = capsys.readouterr().err
    assert f"error: c failed (exit 3): see {tmp_path / 'logs' / 'c.log'}; " in said
    ends = re.findall(r"(?:runner: (\w): finished in \d+ s|error: (\w) failed[^;]*); (\d) of 3 ended(, about \d+ min left)?",
                      said)
    assert sorted((a or c) for a, c, _, _ in ends) == ["a", "b", "c"]  # each once, counted in the order they ended
    assert [(int(k), bool(left)) for _, _, k, left in ends] == [(1, True), (2, True), (3, False)]
    n = max(1, cores() // 2)
    assert (tmp_path / "logs" / "a.log").read_text() == f"threads {n} {n}\n"
    assert run_in_lanes(jobs[:1] + [Job("d", meet("d", "a"), str(tmp_path / "logs" / "d.log"))], 2,
                        dict(env, OMP_NUM_THREADS="3")) == []
    assert (tmp_path / "logs" / "d.log").read_text() == "threads 3 3\n"


def test_lanes_start_a_job_once_what_it_needs_has_ended(tmp_path, capsys, starts_process):
    """A free lane takes the first ready job, not the next of the list: 'late' (needs 'first') waits while
    'other', after it in the list, runs beside 'first'; a job done meanwhile is dropped; a job whose need
    failed is named, never started; the progress line counts each group (stage) apart."""
    def touch(name, seconds=0.0, rc=0):
        return [sys.executable, "-c", f"import pathlib, time; time.sleep({seconds}); "
                f"pathlib.Path({str(tmp_path / name)!r}).write_text(str(time.time())); raise SystemExit({rc})"]

    def exists(name):
        return lambda: (tmp_path / name).exists()

    log = str(tmp_path / "logs" / "x.log")
    jobs = [Job("first", touch("first", 1.0), log, "a"),
            Job("late", touch("late"), log, "b", ready=exists("first")),
            Job("other", touch("other"), log, "b"),
            Job("dropped", touch("dropped"), log, "b", ready=exists("first"), done=exists("first")),
            Job("broken", touch("broken", rc=1), log, "c"),
            Job("orphan", touch("orphan"), log, "c", ready=exists("never"))]
    assert run_in_lanes(jobs, 2, dict(os.environ)) == ["broken", "orphan"]
    said = capsys.readouterr().err
    t = {n: float((tmp_path / n).read_text()) for n in ("first", "late", "other")}
    assert t["other"] < t["first"] < t["late"]  # 'other' did not wait behind 'late'
    assert not (tmp_path / "dropped").exists() and not (tmp_path / "orphan").exists()
    assert "error: orphan: not started: a job it needs did not finish" in said
    assert "late: finished in " in said and re.search(r"(late|other): finished in \d+ s; 2 of 2 ended", said)  # 'dropped' uncounted
    assert re.search(r"first: finished in \d+ s; 1 of 1 ended", said)


def test_lanes_run_in_the_callers_folder(tmp_path, monkeypatch, starts_process):
    """A lane's command runs where the study was started (a relative OUT means the same folder in every part:
    lanes once ran in the repository, so OUT=study wrote into the study package) and imports this study
    package, even beside a folder named study (a relative OUT=study)."""
    (tmp_path / "study").mkdir()
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-c", "import os, tupe_study; print(os.getcwd()); print(tupe_study.__file__)"]
    assert run_in_lanes([Job("a", cmd, str(tmp_path / "a.log"))], 2, env) == []
    assert (tmp_path / "a.log").read_text().splitlines() == [str(tmp_path), str(ROOT / "tupe_study" / "__init__.py")]


def test_lanes_are_bound_to_gpus_and_a_usage_error_stops_the_rest(tmp_path, capsys, starts_process):
    """Lane k runs on GPU gpus[k % n] (CUDA_VISIBLE_DEVICES; a lane freed is reused); a job that exits 2 with
    stop_on_usage_error leaves the jobs not yet started unstarted (named as failed), the running ones end."""
    def show(name, rc=0, wait_for=None, then_sleep=0.0):
        body = ("import os, pathlib, time\n"
                + (f"while not os.path.exists({str(tmp_path / wait_for)!r}): time.sleep(0.05)\n" if wait_for else "")
                + f"time.sleep({then_sleep})\n"
                + f"pathlib.Path({str(tmp_path / name)!r}).write_text(os.environ['CUDA_VISIBLE_DEVICES'])\n"
                f"raise SystemExit({rc})")
        return [sys.executable, "-c", body]

    log = str(tmp_path / "x.log")
    # 'a' is still running when 'b' has ended, so 'c' can only take b's lane
    ran = run_jobs([Job("a", show("a", wait_for="b", then_sleep=2.0), log), Job("b", show("b"), log), Job("c", show("c"), log)],
                   2, dict(os.environ), say=stderr_say("runner"), gpus=["4", "7"])
    assert ran.failed == [] and ran.usage_error is None
    seen = {n: (tmp_path / n).read_text() for n in "abc"}
    assert seen["a"] == "4" and seen["b"] == "7" and seen["c"] == "7"  # c took b's lane, a's was still busy
    said = capsys.readouterr().err
    assert "runner: a: started, GPU 4, " in said and "runner: b: started, GPU 7, " in said

    # 'slow' is still running when 'bad' has ended
    jobs = [Job("slow", show("slow", wait_for="bad", then_sleep=2.0), log), Job("bad", show("bad", rc=2), log),
            Job("next1", show("next1"), log), Job("next2", show("next2"), log)]
    ran = run_jobs(jobs, 2, dict(os.environ), say=stderr_say("runner"), gpus=["0"], stop_on_usage_error=True)
    assert ran.usage_error is jobs[1] and ran.failed == ["bad", "next1", "next2"]
    assert (tmp_path / "slow").exists() and not (tmp_path / "next1").exists() and not (tmp_path / "next2").exists()
    said = capsys.readouterr().err
    assert "error: bad failed with a usage error (exit 2): the other jobs would fail the same way, so 2 job(s) are " \
           "not started" in said
    # without stop_on_usage_error an exit 2 is one failure among others
    assert run_in_lanes([Job("bad", show("bad2", rc=2), log), Job("ok", show("ok"), log)], 1, dict(os.environ),
                        gpus=["0"]) == ["bad"]
    assert (tmp_path / "ok").exists()


def test_a_job_without_a_log_writes_to_stderr_and_not_stdout(tmp_path, capfd, starts_process):
    """log=None (the C4 steps): the command's stderr is the caller's, its stdout is dropped (only the caller
    writes stdout: the data path of the C4 pipeline)."""
    cmd = [sys.executable, "-c", "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"]
    assert run_in_lanes([Job("a", cmd)], 1, dict(os.environ)) == []
    out, err = capfd.readouterr()
    assert "to stdout" not in out and "to stderr" in err


def test_the_visible_gpus_are_cuda_visible_devices_or_what_torch_counts():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 5"}) == ["2", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == [] and visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    import torch

    assert visible_gpus({}) == [str(i) for i in range(torch.cuda.device_count())]  # none on a CPU machine
