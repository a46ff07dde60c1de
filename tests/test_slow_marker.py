"""The `slow` marker (tests/conftest.py): a test is slow when its fixtures include `starts_process`, and a test
that is not cannot start a process, however it tries (here, through a helper: the rule it replaced read test
bodies for `run(` and missed those)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

TOY_SUITE = '''
import subprocess
import sys

import pytest


def start():  # a helper that starts a process
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.fixture(scope="module")
def made(starts_process):
    start()
    return 1


def test_pure():
    assert 1 + 1 == 2


def test_through_a_fixture(made):
    assert made == 1


def test_direct(starts_process):
    start()


def test_forgets_the_fixture():
    start()
'''


def test_an_unmarked_test_cannot_start_a_process():
    """This test is not slow: every way of starting a process is refused before the process exists."""
    with pytest.raises(RuntimeError, match=r"not marked slow: request the fixture `starts_process`"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(RuntimeError, match=r"\(os\.system\)"):
        os.system("true")


def test_not_slow_leaves_out_every_test_that_starts_a_process(tmp_path, starts_process):
    (tmp_path / "test_toy.py").write_text(TOY_SUITE)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'tests'}{os.pathsep}{ROOT}")

    def pytest_run(*args: str) -> subprocess.CompletedProcess:
        return starts_process([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                               "-rf", *args, str(tmp_path / "test_toy.py")], cwd=tmp_path, check=False, env=env)

    collected = pytest_run("--collect-only", "-m", "not slow").stdout
    assert re.findall(r"::(\w+)", collected) == ["test_pure", "test_forgets_the_fixture"]
    fast = pytest_run("-m", "not slow")
    assert fast.returncode == 1 and "1 failed, 1 passed, 2 deselected" in fast.stdout, fast.stdout
    assert "FAILED test_toy.py::test_forgets_the_fixture - RuntimeError" in fast.stdout
    assert ("RuntimeError: test_toy.py::test_forgets_the_fixture starts a process (subprocess.Popen) but is not "
            "marked slow: request the fixture `starts_process`") in fast.stdout
    slow = pytest_run("-m", "slow")
    assert slow.returncode == 0 and "2 passed, 2 deselected" in slow.stdout, slow.stdout
