"""The import structure of tupe_plugin: no cycle between its modules, and no import from a lower layer to a
higher one. Read from the source (ast), imports under ``if TYPE_CHECKING:`` excluded (they never run)."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

from conftest import ROOT

PACKAGE = ROOT / "tupe_plugin"
# Each part of tupe_plugin and its layer: a module may import its own part and lower layers only.
LAYERS = {
    "kernels": 0,  # the Triton/Flex attention kernels: torch and triton only
    "positional": 1,  # every encoding and the plain-torch model code: shipped by tupe-export-hf as it is
    "modules": 2,  # fairseq's side of the encoder and heads
    "models": 3, "tasks": 3, "criterions": 3, "optim": 3,  # what --user-dir registers
    "checkpoint_safety": 0, "quiet_warnings": 0, "clean_exit": 0, "build_task": 0,  # no tupe_plugin imports
    "original_release": 4, "checkpoint_info": 4,  # reading checkpoints
    "analysis": 5, "hf": 5, "convert_original": 5,  # the commands' code
    "__init__": 6,  # importing the package registers everything
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, modules: Set[str]) -> Set[str]:
    """The tupe_plugin modules ``path`` imports (a name imported from a package counts as its module when it is one)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and getattr(node.test, "id", "") ==
            "TYPE_CHECKING" for b in node.body for n in ast.walk(b)}
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
    return {m for m in found if m in modules and m != name}


def graph() -> Dict[str, Set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
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
        for w in g[v]:
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


def test_the_reader_finds_imports_and_cycles():
    """The checks can fail: a made-up cycle and the real edges the reader must see."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    g = graph()
    assert "tupe_plugin.positional.registry" in g["tupe_plugin.modules.encoder"]
    assert "tupe_plugin.positional.record" in g["tupe_plugin.positional.registry"]


def test_no_import_cycle_inside_tupe_plugin():
    assert cycles(graph()) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    g = graph()
    assert set(map(part, g)) <= set(LAYERS), f"parts without a layer: {set(map(part, g)) - set(LAYERS)}"
    upward = sorted(f"{a} -> {b}" for a, targets in g.items() for b in targets
                    if part(a) != part(b) and LAYERS[part(b)] > LAYERS[part(a)])
    assert upward == []


def test_the_shipped_package_imports_nothing_of_tupe_plugin_but_itself():
    """tupe-export-hf copies tupe_plugin/positional into a folder without tupe_plugin: single-dot imports only."""
    g = graph()
    outside = sorted(f"{a} -> {b}" for a, targets in g.items() if part(a) == "positional" for b in targets
                     if part(b) != "positional")
    assert outside == []
