"""Plain text or JSON lines -> C4's file format, so the C4 steps (``preprocess/c4/``) run on it unchanged.

Inputs (any number, ``.gz`` allowed):

* ``*.jsonl`` / ``*.json`` (``.gz``): one JSON object per line, the document in ``--text-field``
  (default ``text``); malformed lines, non-objects and missing/non-string/blank fields are skipped,
  counted and reported as ``file:line``;
* anything else is UTF-8 plain text, cut into documents by ``--doc-split``: ``file`` (one document
  per file, the default), ``blank`` (a blank line ends a document) or ``regex`` (lines matching
  ``--doc-regex`` separate documents and are dropped).

Inside a document, paragraphs are blocks separated by blank lines; the lines of a block are joined
with spaces (hard-wrapped books become one line per paragraph; ``--keep-lines`` keeps every line).
C4 separates paragraphs with ``\\n``, which is what step 1 reads. Empty documents are skipped (counted).

Outputs in ``--out-dir``: ``c4-train.NNNNN-of-NNNNN.json.gz`` (``--shards`` files) and
``c4-validation.00000-of-00001.json.gz``, records ``{"text", "timestamp", "url"}`` as C4's (``url`` is
``FILE#N``, the N-th document of that input). The documents are shuffled with ``--seed``; the first
``--valid-fraction`` (> 0) of them (at least one; the C4 steps need validation documents) are held out,
the rest are dealt into the train shards in contiguous runs. ``--valid-seed`` draws the held-out documents
with a seed of their own (the first of another shuffle; the train documents keep ``--seed``'s order without
them); by default it is ``--seed``, which is the draw above, so the shard files of corpora made before it existed
are made again byte for byte. The same inputs, options and seeds give byte-identical files. ``text_to_c4.json``
records the settings, counts and files written: a rerun with the same settings skips, with other settings refuses
(exit 2) unless ``--force``, which first removes the earlier run's files that this one does not write (those its
record lists; every ``c4-train.*``/``c4-validation.*`` file of the folder for a record from before the list), since
the C4 steps read every such file; C4 files that no record vouches for are never removed (exit 2, naming them). Files are written under a temporary name and renamed. All documents are held in memory (fine
for corpora of a few GB).
"""
from __future__ import annotations

import argparse
import fnmatch
import glob
import gzip
import json
import os
import random
import re
from collections import Counter
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from tupe_preprocess.c4_common import SettingsMismatch, open_binary, outputs_done, read_text
from tupe_common.errors import UsageError, command_name, exit_main
from tupe_common.io import atomic_path, read_json, remove_if_exists, write_json
from tupe_common.log import get_logger
from tupe_common.io import need

PROG = "text_to_c4"
log = get_logger(PROG)
RECORD = "text_to_c4.json"
# the files of C4's format (the C4 steps read those that match TRAIN_GLOB/VALID_GLOB, tupe_preprocess/c4/pipeline.py)
SHARD_GLOBS = ("c4-train.*-of-*.json.gz", "c4-validation.*-of-*.json.gz")
Doc = Tuple[str, str]  # (url, text)
SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: a str may hold one, UTF-8 text cannot


def paragraphs(text: str, keep_lines: bool) -> str:
    """Blank-line separated blocks -> one paragraph per line (lines of a block joined with spaces)."""
    out = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n")):
        lines = [" ".join(line.split()) for line in block.split("\n")]
        lines = [line for line in lines if line]
        if lines:
            out += lines if keep_lines else [" ".join(lines)]
    return "\n".join(out)


def is_jsonl(path: str) -> bool:
    name = path[:-3] if path.endswith(".gz") else path
    return name.endswith((".jsonl", ".json"))


def jsonl_docs(path: str, field: str, skipped: Counter, max_warnings: int) -> Iterator[Tuple[int, str]]:
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except ValueError as e:  # includes UnicodeDecodeError
                reason, detail = "malformed_json", str(e)
            else:
                text = obj.get(field) if isinstance(obj, dict) else None
                if not (isinstance(text, str) and text.strip()):
                    reason, detail = "no_text_field", f"no non-empty string field {field!r}"
                elif SURROGATE.search(text):  # valid JSON ("\\ud800"), but no UTF-8 can encode it
                    reason, detail = "not_utf8", "a lone surrogate (an escape \\ud800-\\udfff without its pair)"
                else:
                    yield lineno, text
                    continue
            skipped[reason] += 1
            if skipped[reason] <= max_warnings:
                log.warning(f"{path}:{lineno}: skipped ({reason}): {detail}")


def text_docs(path: str, split: str, regex: Optional[str], fallback: Optional[str] = None) -> Iterator[str]:
    text = read_text(path, fallback, log)
    if split == "file":
        yield text
    elif split == "blank":
        yield from re.split(r"\n\s*\n", text.replace("\r\n", "\n"))
    else:
        pattern = re.compile(regex or "")
        doc: List[str] = []
        for line in text.replace("\r\n", "\n").split("\n"):
            if pattern.search(line):
                yield "\n".join(doc)
                doc = []
            else:
                doc.append(line)
        yield "\n".join(doc)


def read_documents(inputs: Sequence[str], args: argparse.Namespace) -> Tuple[List[Doc], Dict[str, object]]:
    docs: List[Doc] = []
    skipped: Counter = Counter()
    per_input = {}
    for path in inputs:
        name = os.path.basename(path)
        n0 = len(docs)
        if is_jsonl(path):
            raw = ((f"{name}#{lineno}", t) for lineno, t in jsonl_docs(path, args.text_field, skipped,
                                                                        args.max_warnings))
        else:
            raw = ((f"{name}#{k}", t) for k, t in enumerate(text_docs(path, args.doc_split, args.doc_regex,
                                                                              args.fallback_encoding)))
        for url, text in raw:
            text = paragraphs(text, args.keep_lines)
            if len(text) < max(args.min_chars, 1):
                skipped["empty_or_short"] += 1
                continue
            docs.append((url, text))
        per_input[name] = len(docs) - n0
    return docs, {"documents_per_input": per_input, "skipped": dict(skipped)}


def write_shard(path: str, docs: Sequence[Doc]) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:  # mtime 0: reproducible bytes
        for url, text in docs:
            f.write((json.dumps({"text": text, "timestamp": "", "url": url}, ensure_ascii=False) + "\n").encode())


def split_docs(docs: List[Doc], valid_fraction: float, shards: int, seed: int,
               valid_seed: Optional[int] = None) -> Tuple[List[Doc], List[List[Doc]]]:
    """Shuffle (``seed``), hold out the validation documents (the first of a shuffle with ``valid_seed``, by default
    ``seed``'s own), deal the rest into contiguous shards in ``seed``'s order."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_valid = int(round(valid_fraction * len(docs)))
    if valid_fraction > 0 and len(docs) >= 2:
        n_valid = min(max(n_valid, 1), len(docs) - 1)
    drawn = order
    if valid_seed is not None and valid_seed != seed:
        drawn = list(range(len(docs)))
        random.Random(valid_seed).shuffle(drawn)
    held = set(drawn[:n_valid])
    valid = [docs[i] for i in drawn[:n_valid]]
    train = [docs[i] for i in order if i not in held]  # with valid_seed == seed: order[n_valid:]
    bounds = [len(train) * k // shards for k in range(shards + 1)]
    return valid, [train[bounds[k]:bounds[k + 1]] for k in range(shards)]


def remove_earlier_output(out_dir: str, names: Sequence[str]) -> None:
    """``--force``, before writing ``names`` into ``out_dir``: remove its record and the shard files of the earlier run
    that this run does not write (the record's ``files``; every ``SHARD_GLOBS`` file where a record from before the
    file list has none): the C4 steps read every file of the folder that matches their globs, so another
    ``--shards`` would add its files beside. Files of C4's names that no record vouches for (a download?) are never
    removed: a UsageError names them."""
    record = os.path.join(out_dir, RECORD)
    found = {os.path.basename(p) for g in SHARD_GLOBS for p in glob.glob(os.path.join(glob.escape(out_dir), g))}
    data = read_json(record) if os.path.isfile(record) else None
    listed = data.get("files") if isinstance(data, dict) else None
    earlier = set(found) if isinstance(data, dict) and listed is None else set(listed or [])
    unknown = sorted(found - earlier - set(names))
    if unknown:
        raise UsageError(f"{out_dir} holds C4 files that no run of {PROG} recorded ({', '.join(unknown[:4])}"
                         f"{' ...' if len(unknown) > 4 else ''}): the C4 steps would read them too; move them away "
                         "or choose another --out-dir")
    stale = sorted(n for n in earlier - set(names) if any(fnmatch.fnmatchcase(n, g) for g in SHARD_GLOBS))
    for name in stale:  # before the record: a run cut short here leaves files its record still vouches for
        remove_if_exists(os.path.join(out_dir, name))
    remove_if_exists(record)  # then: the files written next are vouched for by the record written after them
    if stale:
        log.warning(f"--force: removed {len(stale)} shard file(s) of the earlier run in {out_dir}: "
                    f"{', '.join(stale[:4])}{' ...' if len(stale) > 4 else ''}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog=command_name("python -m tupe_preprocess.text_to_c4"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="plain-text or JSON-lines files (.gz allowed)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--doc-split", choices=("file", "blank", "regex"), default="file",
                    help="plain text: one document per file (default), per blank-line block, or per --doc-regex")
    ap.add_argument("--doc-regex", help="with --doc-split regex: lines matching it separate documents")
    ap.add_argument("--fallback-encoding", help="plain text that is not UTF-8 is read with this encoding "
                    "(e.g. latin-1; a warning names the file) instead of stopping")
    ap.add_argument("--text-field", default="text", help="JSON lines: the field holding the document")
    ap.add_argument("--keep-lines", action="store_true", help="keep every line (default: unwrap paragraphs)")
    ap.add_argument("--min-chars", type=int, default=1, help="skip documents shorter than this")
    ap.add_argument("--shards", type=int, default=1, help="number of train files")
    ap.add_argument("--valid-fraction", type=float, default=0.01, help="documents held out for validation")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--valid-seed", type=int, help="draw the held-out documents with this seed (default: --seed, "
                    "the draw of corpora made before this option)")
    ap.add_argument("--max-warnings", type=int, default=5, help="file:line warnings per skip reason")
    ap.add_argument("--force", action="store_true", help="rewrite outputs made with other settings (the earlier "
                    "run's c4-train/c4-validation files in --out-dir are removed)")
    args = ap.parse_args(argv)
    if args.doc_split == "regex" and not args.doc_regex:
        ap.error("--doc-split regex needs --doc-regex PATTERN")
    if args.shards < 1:
        ap.error("--shards must be >= 1")
    if not 0 < args.valid_fraction < 1:  # the C4 steps need a validation file with documents in it
        ap.error(f"--valid-fraction must be in (0, 1), not {args.valid_fraction}: the pipeline needs validation "
                 "documents")
    for p in args.inputs:
        need(p)  # missing, or a folder: one line naming it, exit 1 (tupe_common.errors.exit_main)
    need(args.out_dir, "out")

    settings = {k: getattr(args, k) for k in ("doc_split", "doc_regex", "fallback_encoding", "text_field", "keep_lines", "min_chars",
                                              "shards", "valid_fraction", "seed")}
    if args.valid_seed is not None and args.valid_seed != args.seed:  # recorded only when it changes the draw, so
        settings["valid_seed"] = args.valid_seed  # an earlier corpus's record still matches (its rerun skips)
    settings["inputs"] = [{"name": os.path.basename(p), "bytes": os.path.getsize(p)} for p in args.inputs]
    names = [f"c4-train.{k:05d}-of-{args.shards:05d}.json.gz" for k in range(args.shards)]
    names.append("c4-validation.00000-of-00001.json.gz")
    record = os.path.join(args.out_dir, RECORD)
    try:
        if outputs_done(record, settings, [os.path.join(args.out_dir, n) for n in names],
                        f"{args.out_dir} (text_to_c4 outputs)", args.force):
            log.info(f"skip: {args.out_dir} is complete for these settings ({record}); --force rewrites it")
            return 0
    except SettingsMismatch as e:
        log.error(f"{e}")
        return 2
    try:
        docs, stats = read_documents(args.inputs, args)
    except (ValueError, OSError) as e:
        log.error(f"{e}")
        return 1
    if not docs:
        log.error(f"no usable document in {', '.join(args.inputs)} (skipped: {stats['skipped']})")
        return 1
    valid, shards = split_docs(docs, args.valid_fraction, args.shards, args.seed, args.valid_seed)
    if not valid:
        log.error(f"{len(docs)} document(s) leave no validation document at --valid-fraction {args.valid_fraction} "
                  "(the pipeline needs one): give more documents or a larger --valid-fraction")
        return 2
    if any(not s for s in shards):
        log.error(f"{len(docs) - len(valid)} train documents cannot fill --shards {args.shards}: use fewer shards")
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    if args.force:  # without it, a record here has these settings, so these names
        try:
            remove_earlier_output(args.out_dir, names)
        except UsageError as e:
            log.error(str(e))
            return 2
    for name, part in zip(names, [*shards, valid]):
        write_shard(os.path.join(args.out_dir, name), part)
    counts = {"documents": len(docs), "train": [len(s) for s in shards], "valid": len(valid), **stats}
    write_json(record, {"settings": settings, "counts": counts, "files": names})
    log.info(f"summary: {len(docs)} documents from {len(args.inputs)} file(s) -> {args.out_dir}: "
             f"train {counts['train']}, valid {len(valid)}, skipped {stats['skipped'] or 0}")
    return 0


def cli() -> None:
    """The console script ``tupe-text-to-c4``."""
    exit_main(main, "tupe-text-to-c4")


if __name__ == "__main__":
    exit_main(main, "text_to_c4")
