"""The model code of an exported folder (loaded there by transformers with ``trust_remote_code=True``):
``configuration_tupe.py``, ``modeling_tupe.py`` and ``tokenization_tupe.py``.

The model code imports the core as the rest of the plugin does (``from tupe_core.registry import build``), so
inside the plugin it runs on ``tupe_core`` itself, one copy of each module. ``tupe-export-hf`` writes it into the
folder with those lines made package-relative (:func:`exported_source`: ``from .registry import build``) and
copies next to it, unchanged, every module of ``tupe_core`` it needs (:data:`SHIPPED`: the modules its lines
name and, through their own ``from .<name> import`` lines, theirs). The folder is then the package: it runs
without fairseq, tupe_plugin and tupe_core. ``tupe_core/kernels`` is reached by ``from . import kernels``, which
neither this walk nor transformers follows: the exported model runs without the fused kernels.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set

import tupe_core

REMOTE = Path(__file__).resolve().parent
CORE = Path(tupe_core.__file__).resolve().parent
MODEL_FILES = ("configuration_tupe.py", "modeling_tupe.py")
CORE_IMPORT = re.compile(r"^from tupe_core\.(\w+) import ", re.MULTILINE)


def _imports(path: Path) -> List[ast.ImportFrom]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ImportFrom)]


def core_modules(files=MODEL_FILES) -> List[str]:
    """The ``tupe_core`` modules the model code ``files`` needs, by name (``registry``, ``base``, ...), sorted."""
    remote = [REMOTE / f for f in files]
    found: Set[str] = set()
    while remote:  # the model files: `from tupe_core.<name> import`, and their siblings `from .<name> import`
        for node in _imports(remote.pop()):
            if node.level == 0 and (node.module or "").startswith("tupe_core."):
                found.add(node.module.split(".", 1)[1])
            elif node.level == 1 and node.module and (REMOTE / f"{node.module}.py").is_file():
                remote.append(REMOTE / f"{node.module}.py")
    todo = sorted(found)
    while todo:  # the core's modules: `from .<name> import`, as transformers copies them
        for node in _imports(CORE / f"{todo.pop()}.py"):
            if node.level == 1 and node.module and node.module not in found:
                found.add(node.module)
                todo.append(node.module)
    return sorted(found)


def exported_source(name: str) -> str:
    """The model file ``name`` as the exported folder holds it: ``from tupe_core.<module> import`` lines become
    ``from .<module> import`` (the module copied next to it); any other import of tupe_core is refused."""
    text = CORE_IMPORT.sub(r"from .\1 import ", (REMOTE / name).read_text(encoding="utf-8"))
    left = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            left += [a.name for a in node.names if a.name.split(".")[0] == "tupe_core"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "tupe_core":
            left.append(node.module)
    if left:
        raise ValueError(f"{name}: imports tupe_core other than by `from tupe_core.<module> import` lines: {left}")
    return text


# file name in the exported folder (without .py) -> the tupe_core module it is a copy of
SHIPPED: Dict[str, str] = {name: f"tupe_core.{name}" for name in core_modules()}
