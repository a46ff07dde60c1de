"""Every entry point against the paths a careless user gives: a missing file, a folder where a file belongs, a file
where a folder belongs, and a file that is not UTF-8 (or not of its kind at all). Each must end with one
``error:`` line that names the path, no traceback, and the documented exit status (docs/troubleshooting.md,
"Exit codes": 1 for a bad input, 2 for a wrong setting; nothing written either way).

The table ``ENTRIES`` names each command's path arguments; a test checks it covers every console script and every
``python -m`` entry point, so a new command joins the walk (or fails it)."""
from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from conftest import BIN, ROOT

pytestmark = pytest.mark.usefixtures("starts_process")

LATIN1 = "caf\xe9 au lait\nna\xefve\n".encode("latin-1")  # not UTF-8: byte 3 of line 1 is b'\xe9'


@dataclass(frozen=True)
class Entry:
    """A command (``argv``, ``{P}`` where the bad path goes, ``{T}`` a fresh folder, ``{D}`` a good dict.txt,
    ``{C}`` a good C4 folder) and what its ``{P}`` is: ``file`` (read), ``text`` (a file read as UTF-8 text),
    ``folder`` (read) or ``out`` (a folder it writes). ``env``: settings, with the same placeholders."""

    name: str
    argv: Tuple[str, ...]
    kind: str
    env: Tuple[Tuple[str, str], ...] = ()


def m(module: str, *args: str, kind: str) -> Entry:
    return Entry(f"python -m {module} {args[0] if module == 'tupe_preprocess.c4' else ''}".strip(),
                 (sys.executable, "-m", module, *args), kind)


def console(name: str, *args: str, kind: str) -> Entry:
    return Entry(name, (str(BIN / name), *args), kind)


def script(path: str, kind: str, *args: str, **env: str) -> Entry:
    return Entry(f"{path} {' '.join(f'{k}=' for k in env)}".strip(), (str(ROOT / path), *args), kind,
                 tuple(env.items()))


ENTRIES: List[Entry] = [
    console("tupe-pos-maps", "{P}", "--out-dir", "{T}/maps", kind="file"),
    console("tupe-locality", "{P}", kind="file"),
    console("tupe-probe", "{P}", "--sets-dir", "{T}", "--data", "{T}", "--spm-model", "{T}/spm.model", kind="file"),
    console("tupe-convert-original", "{P}", "{T}/out.pt", kind="file"),
    console("tupe-checkpoint-info", "{P}", kind="file"),
    console("tupe-export-hf", "{P}", "{T}/hf", kind="file"),
    console("tupe-last-error", "{P}", kind="file"),
    m("tupe_preprocess.c4", "extract", "{P}", "{T}/out.txt", kind="file"),
    m("tupe_preprocess.c4", "spm", "--out-dir", "{T}/spm", "{P}", kind="text"),
    m("tupe_preprocess.c4", "binarize", "--out", "{T}/bin/train", "--spm-model", "{P}", "--dict", "{D}", "{D}",
      kind="file"),
    m("tupe_preprocess.c4", "layout", "--data-bin", "{T}/data-bin", "--dict", "{P}", "--valid", "{T}/valid",
      "{T}/train", kind="file"),
    m("tupe_preprocess.c4", "run", "{P}", kind="folder"),
    Entry("python -m tupe_preprocess.c4 run OUT_DIR=", (sys.executable, "-m", "tupe_preprocess.c4", "run", "{C}"), "out",
          (("OUT_DIR", "{P}"), ("MAX_DOCS", "20"), ("VOCAB_SIZE", "100"), ("HARD_VOCAB_LIMIT", "0"))),
    m("tupe_preprocess.c4_data", "{P}", kind="folder"),
    m("tupe_preprocess.glue_binarize", "--glue-dir", "{P}", "--spm-model", "{D}", "--dict", "{D}", "--out-dir",
      "{T}/glue-bin", kind="folder"),
    m("tupe_preprocess.text_to_c4", "--out-dir", "{T}/c4", "{P}", kind="file"),
    m("tupe_preprocess.text_to_c4", "--out-dir", "{P}", "{D}", kind="out"),
    m("tupe_preprocess.probing_sets", "--input", "{P}", "--out-dir", "{T}/sets", kind="text"),
    m("tupe_preprocess.moses_bpe", "--bpe-codes", "{P}", kind="text"),
    m("tupe_preprocess.labelled_to_tsv", "--out-dir", "{T}/task", "{P}", kind="file"),
    m("tupe_preprocess.snli_download", "--from-dir", "{P}", "--out-dir", "{T}/snli", kind="folder"),
    m("tupe_preprocess.glue_download", "--from-dir", "{P}", "--out-dir", "{T}/glue", kind="folder"),
    m("tupe_preprocess.c4_download", "--from-dir", "{P}", "--out-dir", "{T}/c4", kind="folder"),
    m("tupe_glue.collect", "{P}", kind="folder"),
    m("tupe_glue.tasks", "list", "--tasks-dir", "{P}", kind="folder"),
    m("tupe_study.report", "{P}", "--variants", "bert-a", "--total-updates", "10", kind="folder"),
    m("tupe_study.archive", "{P}", kind="folder"),
    m("tupe_pretrain.check_resume", "{P}", kind="out"),
    script("glue/finetune.sh", "file", "SST-2", "1e-5", "1", CHECKPOINT="{P}", GLUE_BIN="{T}", RUNS="{T}/runs"),
    script("glue/grid.sh", "file", CHECKPOINT="{P}", GLUE_BIN="{T}", RUNS="{T}/runs", TASKS="SST-2"),
    script("train_scripts/pretrain.sh", "folder", DATA="{P}", GPUS="0"),
    script("train_scripts/study.sh", "folder", "--report", OUT="{P}", C4_DIR="{C}", TASKS="none", PRESET="tiny"),
]

# the ways a path of each kind is made wrong (bad_path); SAYS: what the error line must say of each
CASES: Dict[str, Tuple[str, ...]] = {
    "file": ("missing", "folder"),
    "text": ("missing", "folder", "latin1"),
    "folder": ("missing", "file"),
    "out": ("file",),
}


def bad_path(tmp: Path, case: str) -> Path:
    p = tmp / "given"
    if case == "folder":
        p.mkdir()
        (p / "inside.txt").write_text("x\n")
    elif case == "file":
        p.write_text("a file\n")
    elif case == "latin1":
        p.write_bytes(LATIN1)
    return p


def run_case(entry: Entry, case: str, tmp: Path, good: Dict[str, str]) -> Tuple[str, str, subprocess.CompletedProcess]:
    tmp.mkdir(parents=True)
    work = tmp / "work"
    for sub in ("input0", "label"):  # a task's binaries, for the commands that read them before their {P}
        (work / "RTE-bin" / sub).mkdir(parents=True)
        (work / "RTE-bin" / sub / "dict.txt").write_text("a 1\n" if sub == "input0" else "entailment 1\nnot_entailment 1\n")
    given = bad_path(tmp, case)

    def fill(s: str) -> str:
        return s.replace("{P}", str(given)).replace("{T}", str(work)).replace("{D}", good["D"]).replace("{C}", good["C"])

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TUPE_"))}
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               **{k: fill(v) for k, v in entry.env})
    before = {str(f.relative_to(tmp)) for f in tmp.rglob("*")}
    p = subprocess.run([fill(a) for a in entry.argv], cwd=work, env=env, capture_output=True, text=True,
                       timeout=300)
    after = {str(f.relative_to(tmp)) for f in tmp.rglob("*") if "__pycache__" not in str(f)}
    return str(given), "\n".join(sorted(after - before)), p


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> Dict[Tuple[str, str], Tuple[str, str, subprocess.CompletedProcess]]:
    root = tmp_path_factory.mktemp("bad_paths")
    (root / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(10)))
    c4 = root / "c4"
    c4.mkdir()
    for name in ("c4-train.00000-of-00001.json.gz", "c4-validation.00000-of-00001.json.gz"):
        with gzip.open(c4 / name, "wt", encoding="utf-8") as f:
            f.write('{"text": "a b c", "url": "u", "timestamp": "t"}\n')
    good = {"D": str(root / "dict.txt"), "C": str(c4)}
    jobs = [(e, case) for e in ENTRIES for case in CASES[e.kind]]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(lambda j: run_case(j[0], j[1], root / f"case{jobs.index(j)}", good), jobs)
        return {(e.name, case): r for (e, case), r in zip(jobs, done)}


EXIT = {"missing": 1, "folder": 1, "latin1": 1, "file": 1}
SAYS = {"missing": r"(no such file|does not exist)",
        "folder": r"(is a folder|a folder, where a file)",
        "file": r"(is not a folder|not a folder|is a file)",
        "latin1": r"(not UTF-8|UTF-8)"}


@pytest.mark.parametrize("entry,case", [(e, c) for e in ENTRIES for c in CASES[e.kind]],
                         ids=[f"{e.name}-{c}" for e in ENTRIES for c in CASES[e.kind]])
def test_a_bad_path_ends_in_one_error_line_naming_it(outcomes, entry, case):
    given, written, p = outcomes[(entry.name, case)]
    said = p.stdout + p.stderr
    last = (p.stderr.strip().splitlines() or [""])[-1]
    assert "Traceback" not in said, said[-3000:]
    assert "error" in last and given in last, said[-3000:]
    assert re.search(SAYS[case], last), last
    assert p.returncode == EXIT[case], (p.returncode, said[-2000:])
    assert written == "", f"a failed command left: {written}"


def test_the_walk_covers_every_entry_point():
    from conftest import console_scripts

    walked = {e.argv[0].rsplit("/", 1)[-1] for e in ENTRIES} | {e.argv[2] for e in ENTRIES if e.argv[1:2] == ("-m",)}
    mains = set()
    for package in ("tupe_preprocess", "tupe_glue", "tupe_study", "tupe_pretrain"):
        for f in sorted((ROOT / package).rglob("*.py")):
            text = f.read_text(encoding="utf-8")
            if 'if __name__ == "__main__"' in text and "samples" not in f.parts:
                module = ".".join(f.relative_to(ROOT).with_suffix("").parts)
                mains.add(module[:-len(".__main__")] if module.endswith(".__main__") else module)
    through = {"tupe_preprocess.c4_extract", "tupe_preprocess.c4_spm", "tupe_preprocess.c4_binarize", "tupe_preprocess.c4_layout",
               "tupe_preprocess.c4_download"}  # steps of python -m tupe_preprocess.c4
    fronts = {"tupe_pretrain.pretrain": "pretrain.sh", "tupe_glue.finetune": "finetune.sh", "tupe_glue.grid": "grid.sh",
              "tupe_study": "study.sh", "tupe_pretrain.fairseq_train": "", "tupe_glue.fairseq_train": "",
              "tupe_pretrain.torchrun": "", "tupe_pretrain.rank": ""}  # "": a wrapper the front starts with the arguments it built
    assert len(mains) > 15, mains  # the scan finds the modules
    for entry in console_scripts():  # each console script walked by its name, or by its module run as python -m
        name, _, target = entry.partition("=")
        module = target.partition(":")[0].removesuffix(".__main__")
        assert (name in walked or module in walked or module in through or fronts.get(module, "-") in walked
                or name == "tupe-where"), entry  # tupe-where takes no path
    missing = sorted(mains - walked - through - {m for m, s in fronts.items() if s in walked or not s})
    assert not missing, f"entry points without a bad-path walk: {missing}"
