"""Files copied into an exported model folder (loaded there by transformers with trust_remote_code).

The model code here imports the plugin's own plain-torch modules as siblings (``from .positional_term import
...``): ``tupe-export-hf`` copies each file of :data:`SHIPPED` next to it, so the exported folder restates
nothing and runs without fairseq or tupe_plugin. Inside the plugin the same sibling names resolve to the
plugin's modules themselves (registered below under this package), so there is one copy of each.
"""
from __future__ import annotations

import importlib
import sys
from typing import Dict

# file name in the exported folder (without .py) -> the plugin module it is; each imports only torch and
# (with a single-dot relative import) the others
SHIPPED: Dict[str, str] = {
    "variants": "tupe_plugin.models.variants",
    "positional_term": "tupe_plugin.modules.positional_term",
    "masks": "tupe_plugin.modules.masks",
    "attend": "tupe_plugin.modules.attend",
    "attention": "tupe_plugin.modules.attention",
    "rotary": "tupe_plugin.modules.rotary",
    "take_columns": "tupe_plugin.modules.take_columns",
    "disentangled": "tupe_plugin.modules.disentangled",
    "pam": "tupe_plugin.modules.pam",
    "blocks": "tupe_plugin.modules.blocks",
}

for _name, _module in SHIPPED.items():
    sys.modules.setdefault(f"{__name__}.{_name}", importlib.import_module(_module))
