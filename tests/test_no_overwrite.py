"""No command replaces a user's output silently: every command that writes a file or folder the user names, run
onto one that exists (a file of the user's, not the command's own finished work), exits 2 and leaves it as it
was, unless ``--force``. Each case puts "user data" where the command writes and checks it is still there."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

from conftest import BIN, ROOT, command_in_process, write_lines

pytestmark = pytest.mark.usefixtures("starts_process")
USER = "user data\n"


def case_argv(name: str, out: Path, tmp: Path, checkpoint: Path, spm_dir: Path) -> List[str]:
    """The command of case ``name`` writing to ``out``; its other inputs made in ``tmp``."""
    ckpt = str(checkpoint)
    if name == "labelled_to_tsv":
        write_lines(tmp / "in.jsonl", [f'{{"text": "a b c {i}", "label": {i % 2}}}' for i in range(40)])
    if name in ("text_to_c4", "c4 spm", "c4 binarize"):
        write_lines(tmp / "text.txt", ["one document", "", "another one"])
    return {
        "tupe-pos-maps": [str(BIN / "tupe-pos-maps"), ckpt, "--out-dir", str(out)],
        "tupe-locality": [str(BIN / "tupe-locality"), ckpt, "--length", "8", "--out-csv", str(out)],
        "tupe-probe": [str(BIN / "tupe-probe"), ckpt, "--sets-dir", str(tmp), "--data", str(tmp), "--spm-model",
                       str(spm_dir / "spm.model"), "--out-csv", str(out)],
        "tupe-export-hf": [str(BIN / "tupe-export-hf"), ckpt, str(out)],
        "tupe-convert-original": [str(BIN / "tupe-convert-original"), ckpt, str(out)],
        "tupe_glue.collect": [sys.executable, "-m", "tupe_glue.collect", str(tmp), "--out-csv", str(out)],
        "probing_sets": [sys.executable, "-m", "tupe_preprocess.probing_sets", "--input",
                         str(ROOT / "tests/data/snli_sample.jsonl"), "--out-dir", str(out)],
        "labelled_to_tsv": [sys.executable, "-m", "tupe_preprocess.labelled_to_tsv", str(tmp / "in.jsonl"), "--out-dir",
                            str(out)],
        "glue_binarize": [sys.executable, "-m", "tupe_preprocess.glue_binarize", "--glue-dir", str(ROOT / "tests/data/glue"),
                          "--tasks", "RTE", "--spm-model", str(spm_dir / "spm.model"), "--dict",
                          str(spm_dir / "dict.txt"), "--out-dir", str(out)],
        "text_to_c4": [sys.executable, "-m", "tupe_preprocess.text_to_c4", "--out-dir", str(out), str(tmp / "text.txt")],
        "c4 extract": [sys.executable, "-m", "tupe_preprocess.c4", "extract",
                       str(ROOT / "preprocess/samples/c4/c4-train.00000-of-01024.json.gz"), str(out)],
        "c4 spm": [sys.executable, "-m", "tupe_preprocess.c4", "spm", str(tmp / "text.txt"), "--out-dir", str(out)],
        "c4 binarize": [sys.executable, "-m", "tupe_preprocess.c4", "binarize", str(tmp / "text.txt"), "--out",
                        str(out / "train"), "--spm-model", str(spm_dir / "spm.model"), "--dict", str(spm_dir / "dict.txt")],
    }[name]


# case -> the user's file inside the output folder (None: the output is that file itself)
INSIDE: dict = {"tupe-pos-maps": "pos_maps.png", "tupe-locality": None, "tupe-probe": None,
                "tupe-export-hf": "config.json", "tupe-convert-original": None, "tupe_glue.collect": None,
                "probing_sets": "original.jsonl", "labelled_to_tsv": "train.tsv", "glue_binarize": "RTE-bin/x",
                "text_to_c4": "c4-train.00000-of-00001.json.gz", "c4 extract": None, "c4 spm": "dict.txt",
                "c4 binarize": "train.bin"}


@pytest.mark.parametrize("name", list(INSIDE))
def test_an_existing_user_output_is_kept_with_exit_2(name, pretrained, spm_dir, tmp_path):
    inside: Optional[str] = INSIDE[name]
    out = tmp_path / "out"
    user = out / inside if inside else out
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(USER)
    work = tmp_path / "work"
    work.mkdir()
    argv = case_argv(name, out, work, pretrained / "checkpoint_last.pt", spm_dir)
    if name.startswith("tupe-"):
        p = command_in_process(argv, check=False)
    else:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    last = (p.stderr.strip().splitlines() or [""])[-1]
    assert p.returncode == 2 and "error" in last and str(out) in last, p.stderr[-2000:]
    assert "--force" in last or "move it away" in last, last
    assert user.read_text() == USER
