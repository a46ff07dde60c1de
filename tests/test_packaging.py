"""What ``pip install -e .`` puts on the path: only this project's names (no site-wide ``glue``/``preprocess``),
while the documented ``python -m preprocess.X`` / ``python -m glue.X`` commands still run from the repository."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, run


def test_only_project_names_are_importable_outside_the_repository(tmp_path):
    code = ("import importlib.util as u\n"
            "print([n for n in ('glue', 'preprocess', 'tupe_common', 'tupe_plugin', 'tupe_plugin_cli') if u.find_spec(n)])")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "['tupe_common', 'tupe_plugin', 'tupe_plugin_cli']", p.stdout + p.stderr


def test_documented_module_commands_run_from_the_repository_root():
    for module in ("preprocess.glue_binarize", "preprocess.probing_sets", "glue.collect"):
        p = run([sys.executable, "-m", module, "--help"], cwd=ROOT)
        assert p.stdout.startswith("usage: "), module
