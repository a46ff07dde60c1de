"""The positional package for what never builds a model: the launchers (``pretrain.sh``, the study's plan) and
the checkpoint record (``checkpoint_record.py``: ``tupe-checkpoint-info``, ``finetune.sh``).

``import tupe_plugin.positional`` first runs ``tupe_plugin/__init__``, which imports fairseq to register the
model with it: 4-5 s of CPU, and all a launcher wants is the variants' names. ``tupe_plugin/positional`` is plain
torch with package-relative imports only (``tupe-export-hf`` ships it as it is), so it also loads by itself: here
under its own module name, once per process. Where ``tupe_plugin`` is already loaded its own registry is used, so
a variant registered there (a ``--user-dir`` of the user's) is not missed.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List

ALIAS = "tupe_plugin_cli._positional"  # the package loaded by itself, under this name


def positional_module(name: str) -> ModuleType:
    """``tupe_plugin.positional.<name>`` (e.g. ``registry``, ``record``), without ``tupe_plugin/__init__`` unless
    that is already loaded."""
    if "tupe_plugin" in sys.modules:
        return importlib.import_module(f"tupe_plugin.positional.{name}")
    if ALIAS not in sys.modules:
        spec = importlib.util.find_spec("tupe_plugin")  # finds the folder; runs nothing
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("tupe_plugin is not installed: pip install -e . in the repository")
        folder = Path(next(iter(spec.submodule_search_locations))) / "positional"
        package = importlib.util.spec_from_file_location(ALIAS, folder / "__init__.py",
                                                         submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(package)
        sys.modules[ALIAS] = module
        try:
            package.loader.exec_module(module)
        except BaseException:
            for loaded in [n for n in sys.modules if n == ALIAS or n.startswith(ALIAS + ".")]:
                del sys.modules[loaded]
            raise
    return importlib.import_module(f"{ALIAS}.{name}")


def positional_registry() -> ModuleType:
    """``tupe_plugin.positional.registry``: :func:`positional_module`."""
    return positional_module("registry")


def variant_names() -> List[str]:
    """The registered variants' names with dashes (``tupe-r``), in registry order."""
    return positional_registry().names()


def variant_about() -> Dict[str, str]:
    """Registered variant (dashes) -> its one-line description, in registry order."""
    registry = positional_registry()
    return dict(zip(registry.names(), registry.ABOUT.values()))  # names(): the one spelling (dashes)
