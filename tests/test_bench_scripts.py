"""Every script of bench/ starts: ``--help`` answers with its usage and exit 0. Benchmarks are not tests, and
most are not run by any test; a script whose imports broke (a module moved: bench_locality_symmetry.py loaded
a file by a path that no longer existed) failed only when a user ran it."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

# One interpreter runs each script as `python bench/X.py --help` does: bench/ first on the path, run as __main__.
PROBE = """
import contextlib, io, json, runpy, sys
sys.path.insert(0, "bench")
found = {}
for path in sys.argv[1:]:
    sys.argv, out = [path, "--help"], io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
        found[path] = ["ran", out.getvalue()]
    except SystemExit as stop:
        found[path] = [stop.code, out.getvalue()]
    except Exception as error:
        found[path] = [type(error).__name__ + ": " + str(error), ""]
print(json.dumps(found))
"""


def test_every_bench_script_answers_help(starts_process):
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").glob("*.py")
                     if 'if __name__ == "__main__"' in p.read_text(encoding="utf-8"))
    assert "bench/bench_locality_symmetry.py" in scripts and len(scripts) >= 9, scripts
    p = subprocess.run([sys.executable, "-c", PROBE, *scripts], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    found = json.loads(p.stdout.splitlines()[-1])
    broken = {path: code for path, (code, _) in found.items() if code != 0}
    assert not broken, broken
    assert all(out.startswith("usage: ") for _, out in found.values()), found
