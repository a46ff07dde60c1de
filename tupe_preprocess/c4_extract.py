"""Step 1: one C4 ``.json.gz`` shard -> plain text, one paragraph per line, blank line after each document.

Output format (what fairseq's ``--sample-break-mode complete_doc`` expects): each document's
paragraphs, one per line, followed by one empty line. Paragraphs are C4's ``\\n``-separated lines
(other Unicode line breaks such as ``\\r\\n``, ``\\u2028`` count as paragraph breaks too); inside a
line, whitespace runs become one space and non-whitespace control characters are dropped; empty
paragraphs are dropped. sentencepiece would do the same normalisation, and it guarantees the only
whitespace left is ``' '`` and ``'\\n'``, which keeps step 3 byte-identical to ``fairseq-preprocess``.
The output is plain UTF-8 text, or gzip (level 1) if its name ends with ``.gz``.

Bad input lines are skipped and counted, never fatal: ``non_utf8`` (invalid UTF-8 bytes, or lone
surrogates in ``\\u`` escapes), ``malformed_json``, ``not_object``, ``missing_text``,
``non_string_text``, ``empty_text`` (empty or whitespace-only). The first ``--max-warnings`` of each
kind are reported as ``file:line``. A truncated/corrupt ``.gz`` is a file-level error: exit 1, no output.

A shard that yields no usable document (0 bytes, empty, or every line skipped) is an error naming
the file (exit 1, no output): it would otherwise pass every step and fail pre-training much later.

The output is written to ``OUT.partial`` and renamed when complete, then ``OUT.settings.json`` (the
input's name and size, ``--max-docs``, and the summary) marks it finished. A rerun skips a finished
OUT made with the same settings, refuses one made with other settings (exit 2, naming them; ``--force``
redoes it) and redoes an OUT without its record (interrupted). A run holds ``OUT.lock`` (:mod:`tupe_common.lock`)
while it looks at and writes OUT: a second run on the same OUT (an array task resubmitted while the first still runs)
is refused (exit 2, naming the lock), since both would write ``OUT.partial`` and one could rename the other's
half-written file onto OUT.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import zlib
from collections import Counter
from typing import Dict, List, Optional

from tupe_preprocess.c4_common import (Progress, SettingsMismatch, check_settings, claim, mb, open_binary,
                                        open_output)
from tupe_common.errors import command_name, exit_main
from tupe_common.io import atomic_path, need, read_json, write_json
from tupe_common.lock import LockHeld, hold
from tupe_common.log import get_logger

PROG = "c4_extract"
log = get_logger(PROG)
REASONS = ("non_utf8", "malformed_json", "not_object", "missing_text", "non_string_text", "empty_text")
# Control characters that str.split() does not treat as whitespace.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def clean_paragraphs(text: str) -> List[str]:
    """C4 document text -> its non-empty paragraphs with normalised whitespace."""
    out = []
    for line in text.splitlines():
        if _CONTROL.search(line):
            line = _CONTROL.sub("", line)
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


class Extractor:
    def __init__(self, path: str, max_warnings: int) -> None:
        self.path = path
        self.max_warnings = max_warnings
        self.skipped: Counter = Counter({r: 0 for r in REASONS})
        self.docs = self.lines = self.bytes = self.input_lines = 0

    def skip(self, lineno: int, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        n = self.skipped[reason]
        if n <= self.max_warnings:
            log.warning(f"{self.path}:{lineno}: skipped ({reason}): {detail}")
            if n == self.max_warnings:
                log.warning(f"only the first {n} '{reason}' lines are reported; any more are only counted")

    def document(self, lineno: int, raw: bytes) -> Optional[bytes]:
        """The output bytes for one JSON line, or None (counted) if it is skipped."""
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.skip(lineno, "non_utf8", str(e))
            return None
        try:
            obj = json.loads(line)
        except ValueError as e:
            self.skip(lineno, "malformed_json", str(e))
            return None
        if not isinstance(obj, dict):
            self.skip(lineno, "not_object", f"JSON {type(obj).__name__}, not an object")
            return None
        if "text" not in obj:
            self.skip(lineno, "missing_text", f"keys {sorted(obj)[:5]}")
            return None
        text = obj["text"]
        if not isinstance(text, str):
            self.skip(lineno, "non_string_text", f"text is {type(text).__name__}")
            return None
        paras = clean_paragraphs(text)
        if not paras:
            self.skip(lineno, "empty_text", "empty or whitespace-only text")
            return None
        try:
            out = ("\n".join(paras) + "\n\n").encode("utf-8")
        except UnicodeEncodeError as e:
            self.skip(lineno, "non_utf8", f"invalid code point in text ({e.reason})")
            return None
        self.docs += 1
        self.lines += len(paras)
        self.bytes += len(out)
        return out

    def summary(self, seconds: float) -> Dict[str, object]:
        return {
            "input": self.path,
            "input_lines": self.input_lines,
            "documents": self.docs,
            "lines": self.lines,
            "bytes": self.bytes,
            "skipped": sum(self.skipped.values()),
            "skipped_by_reason": dict(self.skipped),
            "seconds": round(seconds, 3),
        }


def format_summary(s: Dict[str, object]) -> str:
    reasons = " ".join(f"{k}={v}" for k, v in s["skipped_by_reason"].items())  # type: ignore[union-attr]
    return (
        f"summary: {s['input']}: documents={s['documents']} lines={s['lines']} bytes={s['bytes']} "
        f"input_lines={s['input_lines']} skipped={s['skipped']} ({reasons}) seconds={s['seconds']}"
    )


def extract(inp: str, out: str, max_docs: int = 0, progress_seconds: float = 30.0,
            max_warnings: int = 5) -> Dict[str, object]:
    ex = Extractor(inp, max_warnings)
    prog = Progress(PROG, progress_seconds)
    with atomic_path(out) as tmp:  # OUT.partial, renamed when complete, removed on any error
        try:
            with open_binary(inp) as f, open_output(tmp, out) as w:
                for lineno, raw in enumerate(f, 1):
                    ex.input_lines = lineno
                    doc = ex.document(lineno, raw.rstrip(b"\r\n"))
                    if doc is not None:
                        w.write(doc)
                        if max_docs and ex.docs >= max_docs:
                            break
                    prog.maybe(lambda t: f"{inp}: {ex.docs} documents, {mb(ex.bytes)} out, "
                                         f"{ex.input_lines / t:.0f} lines/s")
        except (EOFError, OSError, zlib.error) as e:
            raise RuntimeError(f"{inp}: corrupt or truncated input after line {ex.input_lines}: {e}") from e
        if ex.docs == 0:
            reasons = ", ".join(f"{k}={v}" for k, v in ex.skipped.items() if v) or "the file is empty"
            raise RuntimeError(f"{inp}: no usable document ({ex.input_lines} input lines; {reasons}): nothing to "
                               "train on. Replace the file (re-download it) or leave it out of the input folder")
    return ex.summary(prog.elapsed())


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m tupe_preprocess.c4 extract``; ``tupe_preprocess.c4.pipeline`` reads its defaults."""
    ap = argparse.ArgumentParser(prog=command_name("python -m tupe_preprocess.c4") + " extract", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="C4 shard, e.g. c4-train.00000-of-01024.json.gz")
    ap.add_argument("output", help="text output (.txt, or .txt.gz for gzip)")
    ap.add_argument("--max-docs", type=int, default=0, help="stop after N documents (0: all)")
    ap.add_argument("--progress-seconds", type=float, default=30.0, help="progress line interval (0: off)")
    ap.add_argument("--max-warnings", type=int, default=5, help="file:line warnings per skip reason")
    ap.add_argument("--stats-json", help="also write the summary as JSON here")
    ap.add_argument("--force", action="store_true", help="redo even if OUTPUT exists")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)

    need(args.input)  # missing, or a folder: one line naming it, exit 1 (tupe_common.errors.exit_main)
    settings = {"input": os.path.basename(args.input), "input_bytes": os.path.getsize(args.input),
                "max_docs": args.max_docs}
    try:
        with hold(args.output + ".lock", PROG, say=log.info):  # one run per OUTPUT, from its first look at OUTPUT
            return write_output(args, settings)
    except LockHeld as e:
        log.error(f"{e}")
        return 2


def write_output(args: argparse.Namespace, settings: Dict[str, object]) -> int:
    """``main``'s work, with OUTPUT's lock held: skip, refuse or (re)write OUTPUT and its record."""
    record = args.output + ".settings.json"
    if os.path.exists(args.output) and not args.force:
        done = read_json(record)
        if done is None:  # a run writes its record first, so this is no run of this command cut short
            log.error(f"{args.output} exists without its record {record} (a file this command did not write, or a "
                      "run before 2026-12-07 cut short): pass --force to rewrite it, or move it away")
            return 2
        if "summary" not in done:
            log.info(f"{args.output}: a run cut short ({record} has no summary); redoing")
        else:
            try:
                check_settings(args.output, done.get("settings"), settings)
            except SettingsMismatch as e:
                log.error(f"{e}")
                return 2
            log.info(f"skip: {args.output} is complete for these settings ({record}); --force redoes it")
            return 0
    try:
        with claim(record, settings, [args.output]):
            s = extract(args.input, args.output, args.max_docs, args.progress_seconds, args.max_warnings)
    except (RuntimeError, OSError) as e:
        log.error(f"{e}")
        return 1
    write_json(record, {"settings": settings, "summary": s})
    log.info(format_summary(s))
    if args.stats_json:
        write_json(args.stats_json, s)
    return 0


if __name__ == "__main__":
    exit_main(main, "c4_extract")
