"""Where the installed packages' folders are, found without importing them (importing ``tupe_plugin`` loads
fairseq): fairseq's ``--user-dir`` takes the plugin's folder, and a run records it in its command."""
from __future__ import annotations

import importlib.util


def package_dir(name: str) -> str:
    """The folder of the installed (or editable) package ``name``: ``package_dir("tupe_plugin")`` is what
    ``--user-dir`` takes."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the package {name!r} is not installed: run `pip install .` in the repository "
                                  "(docs/install.md)")
    return list(spec.submodule_search_locations)[0]


def user_dir() -> str:
    """fairseq's ``--user-dir`` for this project: the folder of ``tupe_plugin``."""
    return package_dir("tupe_plugin")
