"""Labelled sentences (JSON, JSON lines or CSV) -> a single-sentence task in SST-2's layout.

Writes ``OUT_DIR/train.tsv`` and ``OUT_DIR/dev.tsv`` with the header ``sentence<TAB>label``, which
``tupe_preprocess.glue_binarize``, ``glue/finetune.sh`` and ``train_scripts/study.sh`` treat as a custom task
scored like SST-2 (accuracy). Inputs (any number):

* ``*.json``: a JSON array of objects, or one object per line (JSON lines); ``*.jsonl`` likewise;
* ``*.csv``: a header row naming the columns.

Each example takes its text from ``--text-field`` and its label from ``--label-field`` (``--label-map
0=negative,1=positive`` renames labels). Tabs and line breaks inside a text become spaces. Examples with
an empty text or a missing label (absent, null, NaN, empty) are skipped and counted (``file:line`` of the first few is
printed), and so are those whose label is a ``--skip-label``; malformed JSON, or a CSV header without the two fields,
stops with an error naming the file. A label -1, Hugging Face datasets' mark of an unlabelled example (a test split
has only these), stops with an error naming the first and counting them unless ``--skip-label=-1`` skips them or
``--label-map=-1=NAME`` makes it a class: taken as it is, -1 would be a class of unlabelled examples. The examples
are shuffled with ``--seed``, cut to ``--max-examples`` (0: all), and the first ``--dev-fraction`` go to
``dev.tsv``. The same inputs and
options give the same bytes; ``labelled_to_tsv.json`` records them, a rerun with the same settings skips
and one with others refuses (exit 2) unless ``--force``. Files are written under a temporary name.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import random
from collections import Counter
from typing import Dict, Iterator, List, Optional, Tuple

from tupe_glue.tasks import is_unlabelled_mark
from tupe_preprocess.c4_common import SettingsMismatch, outputs_done, read_text
from tupe_common.io import atomic_open, write_json
from tupe_common.log import get_logger
from tupe_common.errors import command_name, exit_main, message
from tupe_common.io import need

PROG = "labelled_to_tsv"
log = get_logger(PROG)
RECORD = "labelled_to_tsv.json"
Example = Tuple[str, str]  # (sentence, label)


def records(path: str, fallback: Optional[str], fields: Tuple[str, str] = ("text", "label")
            ) -> Iterator[Tuple[int, Dict[str, object]]]:
    """(line number, record) of one input file; a CSV's header must name ``fields``. Records break at line feeds
    only (and a CSV's quoted ones stay in the field): str.splitlines would also break at U+2028, U+0085 (a latin-1
    text's cp1252 ellipsis) or a form feed inside a text, which JSON and csv write as they are."""
    text = read_text(path, fallback, log)
    text = text[1:] if text.startswith("\ufeff") else text  # a byte-order mark (a spreadsheet's CSV) is no text
    if path.endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text, newline=""))
        lacking = [f for f in fields if f not in (reader.fieldnames or [])]
        if lacking:
            raise ValueError(f"{path}:1: the header has no column {', '.join(map(repr, lacking))} (it has "
                             f"{', '.join(reader.fieldnames or []) or 'none'}); name them with --text-field and "
                             "--label-field")
        for row in reader:
            yield reader.line_num, row
        return
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: malformed JSON ({e.msg}); fix the file or drop it") from None
        for item in items:
            yield 0, item if isinstance(item, dict) else {}
        return
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: malformed JSON line ({e.msg}); fix or remove the line") from None
            yield n, item if isinstance(item, dict) else {}


def same_label(a: str, b: str) -> bool:
    """``-1`` is ``-1.0`` (a CSV written from a float column), ``x`` only ``x``."""
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def read_examples(args: argparse.Namespace) -> Tuple[List[Example], Counter]:
    label_map = dict(kv.split("=", 1) for kv in args.label_map.split(",")) if args.label_map else {}
    examples: List[Example] = []
    skipped: Counter = Counter()
    unlabelled: List[Tuple[str, str]] = []  # (file:line, label) of each -1 that no option names
    for path in args.inputs:
        for i, (line, rec) in enumerate(records(path, args.fallback_encoding, (args.text_field, args.label_field)), 1):
            text, label = rec.get(args.text_field), rec.get(args.label_field)
            text = " ".join(str(text).split()) if text is not None else ""
            missing = label is None or (isinstance(label, float) and math.isnan(label))  # JSON's NaN is no label
            label = "" if missing else str(label).strip()
            where = f"{path}:{line or f'record {i}'}"
            if not text or not label:
                skipped["empty text or no label"] += 1
                if sum(skipped.values()) <= 5:
                    log.warning("%s: skipped (empty %s or no %s)", where, args.text_field, args.label_field)
                continue
            skip = next((s for s in args.skip_label if same_label(label, s)), None)
            if skip is not None:
                skipped[f"label {skip} (--skip-label)"] += 1
                continue
            if label not in label_map and is_unlabelled_mark(label):
                unlabelled.append((where, label))
                continue
            examples.append((text, label_map.get(label, label)))
    if unlabelled:
        (where, label), n = unlabelled[0], len(unlabelled)
        raise ValueError(
            f"{where}: label {label} marks an unlabelled example in Hugging Face datasets (a test split has only "
            f"these); {n} of the {n + len(examples)} examples with a text and a label have it. As a class it would be "
            f"trained on and counted in dev accuracy: pass --skip-label={label} to skip and count them, or "
            f"--label-map={label}=NAME if it is a class of your data")
    return examples, skipped


def write_tsv(path: str, examples: List[Example]) -> None:
    with atomic_open(path) as f:
        f.write("sentence\tlabel\n")
        for text, label in examples:
            f.write(f"{text}\t{label}\n")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog=command_name(f"python -m tupe_preprocess.{PROG}"), description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", help="JSON / JSON-lines / CSV files of labelled texts")
    p.add_argument("--out-dir", required=True, help="the task's folder (TASKS_DIR/NAME)")
    p.add_argument("--text-field", default="text")
    p.add_argument("--label-field", default="label")
    p.add_argument("--label-map", default="", help="renames, e.g. 0=negative,1=positive (--label-map=-1=... for -1)")
    p.add_argument("--skip-label", action="append", default=[], metavar="LABEL",
                   help="skip and count the examples with this label as the input spells it (repeatable), e.g. "
                   "--skip-label=-1: Hugging Face's unlabelled examples")
    p.add_argument("--dev-fraction", type=float, default=0.2)
    p.add_argument("--max-examples", type=int, default=0, help="keep this many after shuffling (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fallback-encoding", default=None, help="decode non-UTF-8 files with this (e.g. latin-1)")
    p.add_argument("--force", action="store_true", help="rewrite a task made with other settings")
    args = p.parse_args(argv)
    if not 0 < args.dev_fraction < 1:
        p.error(f"--dev-fraction must be between 0 and 1, not {args.dev_fraction}")
    try:  # a missing input: 1, as every data step (2 is a wrong option)
        for path in args.inputs:
            need(path)
        need(args.out_dir, "out")
    except OSError as e:
        log.error(message(e))
        return 1
    settings = {k: v for k, v in vars(args).items() if k not in ("force", "out_dir", "inputs")}
    if not args.skip_label:  # a task made before the option matches its record (the same examples)
        del settings["skip_label"]
    settings["inputs"] = [{"name": os.path.basename(x), "bytes": os.path.getsize(x)} for x in args.inputs]
    record = os.path.join(args.out_dir, RECORD)
    try:
        if outputs_done(record, settings, [os.path.join(args.out_dir, n) for n in ("train.tsv", "dev.tsv")],
                        f"{args.out_dir} ({PROG} outputs)", args.force):
            log.info("skip: %s is complete for these settings (%s); --force rewrites it", args.out_dir, record)
            return 0
    except SettingsMismatch as e:
        log.error("%s", e)
        return 2
    try:
        examples, skipped = read_examples(args)
    except (ValueError, OSError) as e:
        log.error("%s", e)
        return 1
    random.Random(args.seed).shuffle(examples)
    if args.max_examples:
        examples = examples[: args.max_examples]
    n_dev = max(1, round(len(examples) * args.dev_fraction))
    if len(examples) - n_dev < 1:
        log.error("only %d usable example(s) in %s: need at least 2", len(examples), " ".join(args.inputs))
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    write_tsv(os.path.join(args.out_dir, "dev.tsv"), examples[:n_dev])
    write_tsv(os.path.join(args.out_dir, "train.tsv"), examples[n_dev:])
    counts = {"train": len(examples) - n_dev, "dev": n_dev, "skipped": dict(skipped),
              "labels": dict(sorted(Counter(label for _, label in examples).items()))}
    write_json(record, {"settings": settings, "counts": counts})
    log.info("%s: %d train, %d dev, labels %s, skipped %d%s", args.out_dir, counts["train"], n_dev,
             counts["labels"], sum(skipped.values()), f" {dict(skipped)}" if skipped else "")
    return 0


def cli() -> None:
    """The console script ``tupe-labelled-to-tsv``."""
    exit_main(main, "tupe-labelled-to-tsv")


if __name__ == "__main__":
    exit_main(main, "labelled_to_tsv")
