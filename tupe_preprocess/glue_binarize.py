"""Raw GLUE TSVs -> fairseq ``sentence_prediction`` binaries.

Output per task, the layout of fairseq's ``examples/roberta/preprocess_GLUE_tasks.sh``::

    OUT/TASK-bin/input0/{train,valid,test}.{bin,idx} + dict.txt   (first text column)
    OUT/TASK-bin/input1/...                                        (pair tasks only)
    OUT/TASK-bin/label/{train,valid}.{bin,idx} + dict.txt         (classification)
    OUT/TASK-bin/label/{train,valid}.label                         (STS-B: score / 5, one float a line)

MNLI's dev_matched/dev_mismatched become ``valid``/``valid1`` and its test files ``test``/``test1``.
Text is tokenized by a replaceable ``text -> token strings`` function (:data:`TOKENIZERS`; default
sentencepiece), mapped through the pre-training ``dict.txt`` (``tupe_preprocess.spm_dict`` convention) and
ended with ``</s>``, exactly what ``fairseq-preprocess --srcdict`` writes. The label dictionary is built
from the train labels as ``fairseq-preprocess`` builds one (count order, padded to a multiple of 8).

Every file of a task is read and checked before anything is written; a task is built under
``TASK-bin.partial`` and renamed when complete, so a finished-looking folder is a finished one. One run per
``--out-dir``: the run holds its lock (``OUT/.run.lock``, tupe_common.lock) and a second run into it is refused at
once (exit 2). A stop (SIGTERM, Ctrl-C, SIGHUP) or an error (a full disk: one line naming ``OUT/TASK-bin``) ends the
tokenizer processes at once, removes the ``.partial`` of the task under way and keeps the finished tasks; a rerun of
the same command builds the rest.

Test hook (environment): ``GLUE_BINARIZE_TEST_SLEEP`` seconds a tokenizer process (``--workers`` 2 or more)
sleeps before each chunk of lines.

    python -m tupe_preprocess.glue_binarize --glue-dir glue_data --tasks RTE,CoLA \\
        --spm-model spm.model --dict dict.txt --out-dir glue-bin [--workers 8] [--force]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from tupe_glue.tasks import CUSTOM_MARK, TASKS, GlueTask, Split, custom_task_names, get_task, is_unlabelled_mark
from tupe_preprocess.fairseq_dict import FairseqDict, write_binaries
from tupe_preprocess.moses_bpe import moses_bpe_tokenizer
from tupe_preprocess.spm_dict import check_dict, load_spm
from tupe_common.errors import command_name, exit_main
from tupe_common.io import PARTIAL, atomic_dir, file_hash, need
from tupe_common.lock import LockHeld, folder_lock, hold
from tupe_common.log import get_logger
from tupe_common.ordered_pool import OrderedPool

# Task facts (files, columns, header, labels) come from the registry ``tupe_glue.tasks``; see
# docs/glue_protocol.md §1 for the raw formats and §9 for custom single-sentence tasks.
STSB_SCALE = 5.0  # fairseq's GLUE script writes STS-B scores divided by 5 (range [0, 1])
BAD_FIELD_COUNT = "wrong number of fields"
log = get_logger("glue_binarize")


class GlueInputError(Exception):
    """Bad raw input; the message names the file and line and says what to do (exit 1)."""


class GlueUsageError(GlueInputError):
    """A wrong option or setting (an unknown task, an output this tool must not replace): exit 2."""


# --------------------------------------------------------------------------------------------
# Reading and checking raw TSVs (no fairseq import: errors come before any slow work)
# --------------------------------------------------------------------------------------------


@dataclass
class SplitData:
    spec: Split
    path: str
    texts: List[List[str]]  # one list per input column
    labels: List[str] = field(default_factory=list)
    label_lines: List[int] = field(default_factory=list)
    read: int = 0  # data lines, header excluded
    skipped: Counter = field(default_factory=Counter)  # reason -> count

    @property
    def written(self) -> int:
        return len(self.texts[0])


def iter_tsv(path: str) -> Iterator[Tuple[int, List[str]]]:
    """Yield ``(line_number, fields)``; quoting off, ``\\n`` ends a line, a trailing ``\\r`` is dropped."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            raw = raw.rstrip(b"\n")
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise GlueInputError(
                    f"{path}, line {lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the line). "
                    "Re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or fix the line."
                ) from None
            if lineno == 1:
                line = line.lstrip("\ufeff")  # a byte-order mark on MRPC's header is common
            yield lineno, line.split("\t")


def _check_label(task: GlueTask, path: str, lineno: int, value: str) -> str:
    if is_unlabelled_mark(value):  # never a class: a custom task would get a class of unlabelled rows
        rename = (" If -1 is a class of your data, give it another name in the files (tupe-labelled-to-tsv: "
                  "--label-map=-1=NAME)."
                  if task.custom else "")
        raise GlueInputError(
            f"{path}, line {lineno}: label {value!r} marks an unlabelled example (Hugging Face datasets write -1 "
            f"for every example of a test split), which a {task.name} train or dev file cannot hold. Remove the "
            f"unlabelled lines (or use the labelled file).{rename}"
        )
    if not task.regression and task.classes is None:  # custom task: any label, but not an empty one
        if not value:
            raise GlueInputError(f"{path}, line {lineno}: empty label. Fix or remove the line.")
        return value
    if not task.regression:
        if value not in task.classes:
            raise GlueInputError(
                f"{path}, line {lineno}: unknown label {value!r} for {task.name}; expected one of "
                f"{', '.join(task.classes)}. Fix or remove the line (is the label column right?)."
            )
        return value
    try:
        score = float(value)
    except ValueError:
        score = math.nan
    if not (0.0 <= score <= 5.0):  # also false for NaN
        raise GlueInputError(
            f"{path}, line {lineno}: STS-B score {value!r} is not a number in [0, 5]. "
            "Fix or remove the line."
        )
    return value


def read_split(task: GlueTask, spec: Split, path: str) -> SplitData:
    """Read one raw file, checking field counts and labels."""
    data = SplitData(spec, path, [[] for _ in spec.inputs])
    for lineno, fields in iter_tsv(path):
        if lineno == 1 and spec.header:
            if len(fields) != spec.n_fields:
                raise GlueInputError(
                    f"{path}, line 1: header has {len(fields)} tab-separated fields, expected "
                    f"{spec.n_fields} for {task.name} {spec.file}. Is this the right file "
                    "(GLUE as distributed by the GLUE download script)?"
                )
            continue
        data.read += 1
        if len(fields) != spec.n_fields:
            if task.skip_bad_lines:
                data.skipped[BAD_FIELD_COUNT] += 1
                continue
            raise GlueInputError(
                f"{path}, line {lineno}: {len(fields)} tab-separated fields, expected {spec.n_fields} "
                f"for {task.name} {spec.file}. Fix or remove the line (a tab or newline inside a "
                "field breaks the record)."
            )
        for texts, col in zip(data.texts, spec.inputs):
            texts.append(fields[col - 1])
        if spec.label is not None:
            data.labels.append(_check_label(task, path, lineno, fields[spec.label - 1].strip()))
            data.label_lines.append(lineno)
    if data.read == 0:
        raise GlueInputError(f"{path}: empty {task.name} split (no data lines"
                             f"{' after the header' if spec.header else ''}). Is the file complete?")
    if not data.texts[0]:  # every line skipped for its field count: a file of another layout, not a few bad records
        raise GlueInputError(f"{path}: none of its {data.read} data lines has the {spec.n_fields} tab-separated "
                             f"fields of {task.name} {spec.file}, so nothing would be left of it. Is this the right "
                             "file (GLUE as distributed by the GLUE download script)?")
    return data


def read_task(task: GlueTask, task_dir: str) -> List[SplitData]:
    """Read and check every file of a task; test files are optional, train and dev are not."""
    if not os.path.isdir(task_dir):
        raise GlueInputError(f"task folder not found: {task_dir}")
    splits = []
    for spec in task.splits:
        path = os.path.join(task_dir, spec.file)
        if not os.path.isfile(path):
            if spec.label is None:
                log.info(f"[{task.name}] {spec.file}: not found, no {spec.out} split written")
                continue
            raise GlueInputError(f"{path}: file not found ({task.name} needs {spec.file}).")
        splits.append(read_split(task, spec, path))
    if not task.regression:
        train_labels = set(splits[0].labels)
        for split in splits[1:]:
            for value, lineno in zip(split.labels, split.label_lines):
                if value not in train_labels:
                    raise GlueInputError(
                        f"{split.path}, line {lineno}: label {value!r} never occurs in "
                        f"{splits[0].path}, so the label dictionary (built from train, as "
                        "fairseq-preprocess does) has no entry for it. Check the train file."
                    )
    return splits


# --------------------------------------------------------------------------------------------
# Tokenizers: the replaceable "text -> list of token strings" step
# --------------------------------------------------------------------------------------------

Tokenize = Callable[[str], List[str]]


def spm_tokenizer(opts: Dict[str, str]) -> Tokenize:
    """Sentencepiece pieces; unknown pieces come out as ``<unk>`` (fairseq id 3)."""
    sp = load_spm(opts["spm_model"])

    def tokenize(text: str) -> List[str]:
        return sp.id_to_piece(sp.encode(text))

    return tokenize


# name -> factory(options) -> tokenize. Another tokenizer registers here and needs no other change.
# moses_bpe: the original TUPE release's units (its GLUE cleanup, Moses, lower-case, fastBPE codes).
TOKENIZERS: Dict[str, Callable[[Dict[str, str]], Tokenize]] = {
    "spm": spm_tokenizer,
    "moses_bpe": moses_bpe_tokenizer,
}


class TextEncoder:
    """text -> fairseq ids (tokens looked up in dict.txt, ``</s>`` appended)."""

    def __init__(self, tokenize: Tokenize, indices: Dict[str, int], unk: int, eos: int):
        self.tokenize, self.indices, self.unk, self.eos = tokenize, indices, unk, eos

    def __call__(self, text: str) -> np.ndarray:
        get = self.indices.get
        ids = [get(tok, self.unk) for tok in self.tokenize(text)]
        ids.append(self.eos)
        return np.asarray(ids, dtype=np.int64)


_worker_encoder: Optional[TextEncoder] = None


def _init_worker(tokenizer: str, opts: Dict[str, str], indices: Dict[str, int], unk: int, eos: int):
    global _worker_encoder
    _worker_encoder = TextEncoder(TOKENIZERS[tokenizer](opts), indices, unk, eos)


def _encode_chunk(texts: List[str]) -> List[np.ndarray]:
    time.sleep(float(os.environ.get("GLUE_BINARIZE_TEST_SLEEP") or 0))  # test hook: a run long enough to stop
    return [_worker_encoder(t) for t in texts]


# --------------------------------------------------------------------------------------------
# Writing one task
# --------------------------------------------------------------------------------------------

CHUNK = 2000
PROGRESS_EVERY = 100_000
MANIFEST = "glue_binarize.json"


def _chunks(items: List[str], size: int) -> Iterator[List[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _with_progress(items: Iterable[np.ndarray], what: str, every: int = PROGRESS_EVERY):
    for n, item in enumerate(items, 1):
        if n % every == 0:
            log.info(f"{what}: {n} lines encoded")
        yield item


def build_label_dict(train_labels: List[str]) -> FairseqDict:
    """The dictionary ``fairseq-preprocess --only-source`` builds from the train label file."""
    d = FairseqDict()
    for value in train_labels:
        d.add_symbol(value)
    d.finalize(padding_factor=8)
    return d


def write_task(task: GlueTask, splits: List[SplitData], dictionary, encode_many, tmp: str) -> None:
    """Write inputs and labels of all splits of ``task`` under ``tmp``."""
    for k in range(task.n_inputs):
        sub = os.path.join(tmp, f"input{k}")
        os.makedirs(sub)
        dictionary.save(os.path.join(sub, "dict.txt"))
        for split in splits:
            texts = split.texts[k]
            log.info(f"[{task.name}] encoding {split.spec.file} column {split.spec.inputs[k]} "
                     f"-> input{k}/{split.spec.out} ({len(texts)} lines)")
            arrays = _with_progress(encode_many(texts), f"[{task.name}] input{k}/{split.spec.out}")
            write_binaries(os.path.join(sub, split.spec.out), arrays, len(dictionary))
    label_dir = os.path.join(tmp, "label")
    os.makedirs(label_dir)
    labelled = [s for s in splits if s.spec.label is not None]
    if task.regression:
        for split in labelled:
            with open(os.path.join(label_dir, split.spec.out + ".label"), "w", encoding="utf-8") as f:
                for value in split.labels:
                    f.write(f"{float(value) / STSB_SCALE:.6g}\n")
        return
    label_dict = build_label_dict(labelled[0].labels)
    label_dict.save(os.path.join(label_dir, "dict.txt"))
    eos = label_dict.eos()
    for split in labelled:
        arrays = (np.array([label_dict.index(v), eos], dtype=np.int64) for v in split.labels)
        write_binaries(os.path.join(label_dir, split.spec.out), arrays, len(label_dict))


def _manifest(task: GlueTask, splits: List[SplitData], args: argparse.Namespace, dict_sha: str) -> dict:
    return {
        "task": task.name,
        "tokenizer": args.tokenizer,
        "spm_model": os.path.abspath(args.spm_model) if args.spm_model else None,
        "bpe_codes": os.path.abspath(args.bpe_codes) if args.bpe_codes else None,
        "dict": os.path.abspath(args.dict),
        "dict_sha256": dict_sha,
        "stsb_label_scale": STSB_SCALE if task.regression else None,
        CUSTOM_MARK: task.custom,
        "splits": {
            s.spec.out: {
                "file": s.path,
                "read": s.read,
                "written": s.written,
                "skipped": dict(s.skipped),
            }
            for s in splits
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def log_summary(task: GlueTask, splits: List[SplitData]) -> None:
    for s in splits:
        skipped = sum(s.skipped.values())
        why = "".join(f" ({reason}: {n})" for reason, n in sorted(s.skipped.items()))
        log.info(f"[{task.name}] {s.spec.file} -> {s.spec.out}: read {s.read}, written {s.written}, "
                 f"skipped {skipped}{why}")


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def resolve_tasks(names: str, glue_dir: str) -> List[GlueTask]:
    """``ALL``: every GLUE task whose folder is in ``glue_dir`` plus its custom tasks (absent GLUE
    folders are skipped and named); otherwise the named tasks, GLUE or custom (SST-2's layout)."""
    if names.strip().upper() == "ALL":
        absent = [t for t in TASKS if not os.path.isdir(os.path.join(glue_dir, t))]
        if absent:
            log.info(f"--tasks ALL: no folder for {', '.join(absent)} in {glue_dir}, skipped")
        tasks = [t for name, t in TASKS.items() if name not in absent]
        tasks += [get_task(name, glue_dir) for name in custom_task_names(glue_dir)]
        if not tasks:
            raise GlueInputError(f"{glue_dir}: no GLUE task folder ({', '.join(TASKS)}) and no folder with "
                                 "SST-2's layout (train.tsv/dev.tsv with the header 'sentence<TAB>label')")
        return tasks
    out = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            out.append(get_task(name, glue_dir))
        except ValueError as e:
            raise GlueUsageError(f"{e}; or ALL") from None
    return out


def _existing_status(final: str, dict_sha: str) -> str:
    """'absent', 'done' (same dict), 'stale' (another dict), 'unreadable' (its manifest), or raise when the folder
    was not written by this tool."""
    if not os.path.exists(final):
        return "absent"
    manifest = os.path.join(final, MANIFEST)
    if not os.path.isfile(manifest):
        raise GlueUsageError(
            f"{final} exists but was not written by this tool (no {MANIFEST}); move it away first."
        )
    try:
        with open(manifest, encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return "unreadable"
    if not isinstance(recorded, dict) or recorded.get("dict_sha256") != dict_sha:
        return "stale"
    return "done"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=command_name("python -m tupe_preprocess.glue_binarize"),
        description="Binarize raw GLUE TSVs for fairseq's sentence_prediction task "
        "(layout of fairseq's preprocess_GLUE_tasks.sh).",
    )
    p.add_argument("--glue-dir", required=True, help="folder with one sub-folder per task (CoLA, SST-2, ...)")
    p.add_argument("--tasks", default="ALL", help=f"comma-separated from {','.join(TASKS)} or custom task folders (SST-2's "
                   "layout), or ALL (default: the GLUE tasks present and every custom task)")
    p.add_argument("--tokenizer", default="spm", choices=sorted(TOKENIZERS), help="text -> tokens step")
    p.add_argument("--spm-model", help="sentencepiece model of pre-training (for --tokenizer spm)")
    p.add_argument("--bpe-codes", help="fastBPE codes of the original TUPE release (for --tokenizer moses_bpe)")
    p.add_argument("--dict", required=True, help="fairseq dict.txt of pre-training")
    p.add_argument("--out-dir", required=True, help="writes OUT/TASK-bin/ per task")
    p.add_argument("--workers", type=int, default=1, help="tokenizer processes (default 1)")
    p.add_argument("--force", action="store_true", help="rebuild tasks whose output already exists")
    args = p.parse_args(argv)
    if args.tokenizer == "spm" and not args.spm_model:
        p.error("--spm-model is required with --tokenizer spm")
    if args.tokenizer == "moses_bpe" and not args.bpe_codes:
        p.error("--bpe-codes is required with --tokenizer moses_bpe")
    if args.workers < 1:
        p.error("--workers must be >= 1")
    return args


def run(args: argparse.Namespace) -> None:
    tasks = resolve_tasks(args.tasks, args.glue_dir)
    for path in [args.dict] + [p for p in (args.spm_model, args.bpe_codes) if p]:
        if not os.path.isfile(path):
            raise GlueInputError(f"file not found: {path}")
    dict_sha = file_hash(args.dict)

    todo = []
    for task in tasks:
        final = os.path.join(args.out_dir, f"{task.name}-bin")
        status = _existing_status(final, dict_sha)
        if status != "absent" and not args.force:
            if status == "stale":
                raise GlueUsageError(
                    f"{final} was built with a different dict.txt than {args.dict}; "
                    "pass --force to rebuild it or choose another --out-dir."
                )
            if status == "unreadable":
                raise GlueUsageError(f"{os.path.join(final, MANIFEST)} cannot be read (a damaged copy?); pass --force "
                                     "to rebuild the task or choose another --out-dir.")
            log.info(f"[{task.name}] {final} already complete, skipped (--force rebuilds it)")
            continue
        todo.append(task)
    # Read and check everything before any writing.
    data = {t.name: read_task(t, os.path.join(args.glue_dir, t.name)) for t in todo}
    if not todo:
        return

    try:  # each error names the file and the line
        dictionary = FairseqDict.load(args.dict)
        if args.tokenizer == "spm":
            check_dict(load_spm(args.spm_model), dictionary.symbols[dictionary.nspecial:], args.dict, args.spm_model)
    except ValueError as e:
        raise GlueInputError(str(e)) from None
    opts = {k: v for k, v in (("spm_model", args.spm_model), ("bpe_codes", args.bpe_codes)) if v}
    enc_args = (args.tokenizer, opts, dict(dictionary.indices), dictionary.unk(), dictionary.eos())

    # its own pipe per worker (tupe_common.ordered_pool): a stop to every process (Ctrl-C, scancel) ends it at once
    pool = OrderedPool(args.workers, _encode_chunk, _init_worker, enc_args) if args.workers > 1 else None
    if pool is None:
        _init_worker(*enc_args)

    def encode_many(texts: List[str]):
        if pool is None:
            return (_worker_encoder(t) for t in texts)
        return (arr for chunk in pool.imap(_chunks(texts, CHUNK)) for arr in chunk)

    with pool if pool is not None else contextlib.nullcontext():  # a stop or an error kills the workers at once
        for task in todo:
            splits = data[task.name]
            final = os.path.join(args.out_dir, f"{task.name}-bin")
            if os.path.exists(final + PARTIAL):
                log.info(f"[{task.name}] removing unfinished {final + PARTIAL} from an earlier run")
            if os.path.exists(final):
                log.info(f"[{task.name}] --force: replacing {final}")
            with atomic_dir(final) as tmp:
                write_task(task, splits, dictionary, encode_many, tmp)
                with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
                    json.dump(_manifest(task, splits, args, dict_sha), f, indent=1)
            log_summary(task, splits)
            log.info(f"[{task.name}] done: {final}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    need(args.glue_dir, "folder")  # missing, or a file: one line naming it, exit 1 (tupe_common.errors.exit_main)
    need(args.out_dir, "out")
    os.makedirs(args.out_dir, exist_ok=True)  # before its lock: a run that wrote nothing leaves the folder, as before
    try:
        with hold(folder_lock(args.out_dir), command_name("glue_binarize"), "--out-dir", log.info):
            run(args)
    except (GlueInputError, LockHeld) as e:
        log.error(str(e))
        return 2 if isinstance(e, (GlueUsageError, LockHeld)) else 1
    return 0


def cli() -> None:
    """The console script ``tupe-glue-binarize``."""
    exit_main(main, "tupe-glue-binarize")


if __name__ == "__main__":
    exit_main(main, "glue_binarize")
