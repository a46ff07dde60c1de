"""The cuda_tests section: the tests of tests/ that need CUDA (``-k cuda`` in the files that ask for it); on a GPU
none may be skipped."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Dict, List

from .report import Result
from .settings import ROOT, Settings


def cuda_test_files() -> List[str]:
    """The test files that ask for CUDA (``torch.cuda.is_available()`` in a skip condition)."""
    asks = re.compile(r"skipif\(\s*not torch\.cuda\.is_available\(\)")
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if asks.search(p.read_text(encoding="utf-8")))


def pytest_counts(output: str) -> Dict[str, int]:
    """{"passed": n, "failed": n, "skipped": n, ...} from pytest's last summary line."""
    last = next((line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def run(r: Result, s: Settings, args) -> None:
    files = cuda_test_files()
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "cuda", *files]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, args.deadline - time.time()))
    counts = pytest_counts(p.stdout)
    r.record("cuda tests", " ".join(files), **counts)
    r.say(f"`pytest -k cuda {' '.join(files)}`: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "no summary"))
    if p.returncode != 0:
        r.fail(f"pytest exit status {p.returncode}")
        r.say("\n```\n" + (p.stdout + p.stderr)[-3000:] + "\n```")
    elif counts.get("skipped") and s.device == "cuda":
        r.fail("tests were skipped on a CUDA machine")
        r.say("\n```\n" + p.stdout[-2000:] + "\n```")
    elif not counts.get("passed") and s.device == "cuda":
        r.fail("no CUDA test ran")
    elif s.device != "cuda":
        r.say("(dry run: without CUDA these tests skip)")
