"""Files copied into an exported model folder (loaded there by transformers with trust_remote_code).

The model code here imports the plugin's own plain-torch modules as siblings (``from .registry import ...``):
``tupe-export-hf`` copies every module of ``tupe_plugin/positional`` (:data:`SHIPPED`) next to it, so the
exported folder restates nothing and runs without fairseq or tupe_plugin. Inside the plugin the same sibling
names resolve to the plugin's modules themselves (registered below under this package), so there is one copy
of each.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Dict

from ... import positional

# file name in the exported folder (without .py) -> the plugin module it is: every module of the package
# tupe_plugin.positional, each importing only torch and (with single-dot relative imports) the others
SHIPPED: Dict[str, str] = {m.name: f"{positional.__name__}.{m.name}" for m in pkgutil.iter_modules(positional.__path__)}

for _name, _module in SHIPPED.items():
    sys.modules.setdefault(f"{__name__}.{_name}", importlib.import_module(_module))
