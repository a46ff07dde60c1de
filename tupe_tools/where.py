"""``tupe-where``: the folders of the installed package that other tools take by path. fairseq imports the
plugin from a folder (``--user-dir``), fairseq-hydra-train reads its configs from one (``--config-dir``), and the
study's presets are files: ``fairseq-train --user-dir "$(tupe-where user-dir)" ...``."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional, Tuple

from tupe_common.installed import package_dir

# name -> (package, folder inside it)
FOLDERS: Dict[str, Tuple[str, str]] = {
    "user-dir": ("tupe_plugin", ""),  # fairseq's --user-dir
    "config-dir": ("tupe_pretrain", "config"),  # fairseq-hydra-train --config-dir (pretrain/, finetune/ under it)
    "presets": ("tupe_study", "presets"),  # the study's PRESET files (NAME.env)
}


def folder(name: str) -> str:
    package, inside = FOLDERS[name]
    return os.path.join(package_dir(package), inside) if inside else package_dir(package)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tupe-where", description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="?", default="user-dir", choices=list(FOLDERS),
                   help="user-dir: fairseq's --user-dir (default); config-dir: fairseq-hydra-train's --config-dir "
                   "root; presets: the study's preset files")
    print(folder(p.parse_args(argv).what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
