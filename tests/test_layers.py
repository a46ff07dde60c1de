"""The import structure of the project's packages: no cycle between their modules, and no import from a lower
layer to a higher one. ``tupe_core`` (torch only) is the bottom: it imports nothing of the others, and fairseq
and transformers never; the fairseq adapter ``tupe_plugin`` and the launchers' ``tupe_tools`` stand on it.

Read from the source (ast): ``import`` and ``from ... import`` statements, and a module named by a string (a
constant ``"tupe_tools.hf.export"`` or ``"pkg.module:function"``, or an f-string that starts with one, e.g.
``f"tupe_tools.analysis.{name}"``: what ``importlib.import_module`` would load). Imports under
``if TYPE_CHECKING:`` (they never run) and ``if __name__ == "__main__":`` (a module run as a program, e.g.
``python -m tupe_tools.hf.export``, dispatches to the commands' front door) are left out."""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

from conftest import ROOT, run

PACKAGES = ("tupe_core", "tupe_common", "tupe_plugin", "tupe_tools", "tupe_preprocess", "tupe_pretrain", "tupe_glue",
            "tupe_study")
# Each part and its layer: a module may import its own part and lower layers only.
LAYERS = {
    "tupe_core.kernels": 0,  # the Triton/Flex attention kernels: torch and triton only
    "tupe_common": 0,  # the standard library and numpy (psutil, torch, omegaconf inside functions)
    "tupe_core": 1,  # every encoding, the attention core, the encoder's forward, the model's facts, checkpoint files
    "tupe_plugin.checkpoint_safety": 2, "tupe_plugin.quiet_warnings": 2, "tupe_plugin.clean_exit": 2,
    "tupe_plugin.graceful_stop": 2, "tupe_plugin.run_lock": 2,  # a run's stop and its lock: no import of the model
    "tupe_plugin.build_task": 2,  # no import of the rest of tupe_plugin
    "tupe_plugin.modules": 3,  # fairseq's side of the encoder and heads
    "tupe_plugin.models": 4, "tupe_plugin.tasks": 4, "tupe_plugin.criterions": 4, "tupe_plugin.optim": 4,
    "tupe_plugin": 5,  # the fairseq adapter (the user dir): importing the package registers everything with fairseq
    "tupe_tools": 6,  # the commands (analysis, HF export, converter, checkpoint info) and their front door
    "tupe_preprocess": 7, "tupe_pretrain": 7, "tupe_glue": 7,  # the pipelines: data, pre-training, fine-tuning
    "tupe_study": 8,  # the study runs every pipeline
}
# "pkg.module" or "pkg.module:function" (a bare package name is data: a logger's, the packages of a traceback)
NAMED = re.compile(rf"^((?:{'|'.join(PACKAGES)})(?:\.\w+)+(?::\w+)?|(?:{'|'.join(PACKAGES)}):\w+)$")
NAMED_PREFIX = re.compile(rf"^((?:{'|'.join(PACKAGES)})(?:\.\w+)*)\.$")  # f"pkg.module.{name}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part(module: str) -> str:
    """The part of the layering a module belongs to (the longest key of LAYERS it is, or is under)."""
    keys = [k for k in LAYERS if module == k or module.startswith(k + ".")]
    return max(keys, key=len)


def _skipped(tree: ast.AST) -> Set[int]:
    """The nodes under ``if TYPE_CHECKING:`` and ``if __name__ == "__main__":``."""
    def skips(test: ast.expr) -> bool:
        return getattr(test, "id", "") == "TYPE_CHECKING" or (
            isinstance(test, ast.Compare) and getattr(test.left, "id", "") == "__name__"
            and any(getattr(c, "value", None) == "__main__" for c in test.comparators))
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and skips(node.test)
            for b in node.body for n in ast.walk(b)}


def _known(name: str, modules: Set[str]) -> str:
    """``name``'s longest prefix that is one of ``modules`` ("" if none)."""
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), "")


def imports(path: Path, modules: Set[str], source: Optional[str] = None) -> Set[str]:
    """The project modules ``path`` (or ``source`` read as that file) imports, by statement or by a string naming
    them (a name imported from a package counts as its module when it is one)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    skip = _skipped(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED.match(node.value):
            found.add(_known(NAMED.match(node.value).group(1).split(":")[0], modules))
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            prefix = NAMED_PREFIX.match(str(node.values[0].value))
            if prefix:
                found.add(_known(prefix.group(1), modules) or prefix.group(1))
    return {m for m in found if m.split(".")[0] in PACKAGES and m != name}


def graph() -> Dict[str, Set[str]]:
    paths = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    return {name: imports(path, set(paths)) for name, path in paths.items()}


def cycles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_the_reader_finds_imports_strings_and_cycles():
    """The checks can fail: a made-up cycle, the real edges the reader must see, and imports by string."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    g = graph()
    assert "tupe_core.registry" in g["tupe_plugin.modules.encoder"]
    assert "tupe_core.record" in g["tupe_core.registry"]
    assert "tupe_core.kernels" in g["tupe_core.attend"]  # `from . import kernels`, inside a function
    assert "tupe_tools.hf.export" in g["tupe_tools.commands"]  # "tupe_tools.hf.export:run"
    assert "tupe_tools.commands" not in g["tupe_tools.hf.export"]  # under `if __name__ == "__main__":`
    # what attend.py did before tupe_core (an import by an f-string), a command table's entry, a logger's name
    source = ('import importlib\nimportlib.import_module(f"tupe_plugin.made_up.{name}")\n'
              'X = "tupe_tools.hf.export:run"\nlogging.getLogger("tupe_plugin")\n')
    found = imports(ROOT / "tupe_core" / "made_up.py", set(g) | {"tupe_plugin.made_up"}, source)
    assert found == {"tupe_plugin.made_up", "tupe_tools.hf.export"}


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    g = graph()
    assert all(part(m) for m in g), "every module has a part"
    upward = sorted(f"{a} -> {b}" for a, targets in g.items() for b in targets
                    if part(a) != part(b) and LAYERS[part(b)] > LAYERS[part(a)])
    assert upward == []


def test_tupe_core_imports_nothing_of_the_other_packages():
    """Nor by a string; and its modules import one another package-relatively (single dot), so the export can
    copy the ones its model code needs into a folder without tupe_core (tupe_tools/hf/remote)."""
    g = graph()
    outside = sorted(f"{a} -> {b}" for a, targets in g.items() if a.split(".")[0] == "tupe_core" for b in targets
                     if b.split(".")[0] != "tupe_core")
    assert outside == []
    absolute = []
    for path in (ROOT / "tupe_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            absolute += [f"{module_name(path)}: {n}" for n in names if n.split(".")[0] in PACKAGES]
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                absolute.append(f"{module_name(path)}: {'.' * node.level}{node.module or ''}")
    assert absolute == []


def test_tupe_core_imports_without_fairseq_in_a_fresh_process(starts_process):
    """Every module of tupe_core, kernels included, imported by a fresh interpreter: fairseq, transformers and
    the other packages of the project stay unloaded."""
    names = sorted(module_name(p) for p in (ROOT / "tupe_core").rglob("*.py"))
    code = ("import importlib, json, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps(sorted(m for m in ('fairseq', 'transformers', 'tupe_plugin', 'tupe_tools', "
            "'tupe_common') if m in sys.modules)))")
    assert json.loads(run([sys.executable, "-c", code], cwd=ROOT).stdout.splitlines()[-1]) == []
