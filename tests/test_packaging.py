"""What ``pip install -e .`` puts on the path: only this project's names (no site-wide ``glue``/``preprocess``),
while the documented ``python -m preprocess.X`` / ``python -m glue.X`` commands still run from the repository."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

import tupe_plugin_cli.commands
from conftest import ROOT, run
from tupe_plugin_cli.commands import COMMANDS, CONSOLE_SCRIPTS

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process


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


def test_setup_py_installs_every_command_from_the_commands_table():
    """setup.py's console scripts are CONSOLE_SCRIPTS (read, not installed), and every one resolves to a
    function that runs the command of that name."""
    code = ("import distutils.core, json\n"
            "dist = distutils.core.run_setup('setup.py', stop_after='init')\n"
            "print(json.dumps(dist.entry_points['console_scripts']))")
    p = run([sys.executable, "-c", code], cwd=ROOT)
    scripts = json.loads(p.stdout.strip().splitlines()[-1])
    assert scripts == CONSOLE_SCRIPTS
    assert [s.partition("=")[0] for s in scripts] == [*COMMANDS, "tupe-last-error"]
    for script in scripts:
        name, _, target = script.partition("=")
        module, _, function = target.partition(":")
        entry = getattr(importlib.import_module(module), function)
        with pytest.raises(SystemExit) as stop:  # --help: the command's own parser answers
            entry(["--help"])
        assert stop.value.code == 0, name
    with pytest.raises(AttributeError):
        tupe_plugin_cli.commands.no_such_command  # noqa: B018
