"""Build the bundled C4-format sample from the docstrings of Python's standard library.

Each stdlib module becomes one or more "web documents": its module, class and function docstrings,
one paragraph per line (C4 separates paragraphs with ``\\n``), split into documents of about
``--doc-chars`` characters. Documents are dealt round-robin into C4's file names: 9 of every 10 go to
the two train shards (alternating), 1 of 10 to the validation shard. The JSON lines have C4's keys
in C4's order (``text``, ``timestamp``, ``url``) and the files are gzip'ed with ``mtime=0``, so
the output is byte-for-byte reproducible for a given Python version (the bundled one: 3.11.7).

    python preprocess/samples/make_c4_sample.py --out preprocess/samples/c4
"""
from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import sys
import sysconfig
from datetime import datetime, timedelta, timezone
from typing import Iterator, List, Tuple

SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "lib2to3", "__pycache__", "turtledemo"}
TRAIN_NAMES = ["c4-train.00000-of-01024.json.gz", "c4-train.00001-of-01024.json.gz"]
VALID_NAME = "c4-validation.00000-of-00008.json.gz"


def stdlib_modules(root: str) -> Iterator[Tuple[str, str]]:
    """(dotted module name, path) of every stdlib ``.py`` file, in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                yield rel.removesuffix(".__init__"), path


def paragraphs(docstring: str) -> List[str]:
    """Split a cleaned docstring at blank lines; join each paragraph's lines with a space."""
    out, cur = [], []
    for line in docstring.splitlines():
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


def module_paragraphs(path: str) -> List[str]:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    paras: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                if not isinstance(node, ast.Module):
                    paras.append(f"{node.name}")
                paras.extend(paragraphs(doc))
    return paras


def documents(root: str, doc_chars: int) -> Iterator[Tuple[str, str]]:
    """(url, text) documents of about ``doc_chars`` characters each."""
    for module, path in stdlib_modules(root):
        paras = module_paragraphs(path)
        part, cur, size = 0, [], 0
        for p in paras + [None]:
            if p is not None:
                cur.append(p)
                size += len(p) + 1
            if (p is None or size >= doc_chars) and cur:
                # Skip fragments that are only a bare function name.
                if size > 80:
                    anchor = f"#part-{part}" if part else ""
                    yield f"https://docs.python.org/3.11/library/{module}.html{anchor}", "\n".join(cur)
                    part += 1
                cur, size = [], 0


def timestamp(url: str) -> str:
    """A deterministic C4-style crawl time in April 2019."""
    h = int.from_bytes(hashlib.sha1(url.encode()).digest()[:4], "big")
    t = datetime(2019, 4, 18, tzinfo=timezone.utc) + timedelta(seconds=h % (9 * 86400))
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def write_gz(path: str, lines: List[str]) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        for line in lines:
            gz.write(line.encode("utf-8") + b"\n")


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "c4"))
    ap.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="stdlib folder to read")
    ap.add_argument("--doc-chars", type=int, default=3000, help="target characters per document")
    ap.add_argument("--max-chars", type=int, default=1_700_000, help="stop after this much text")
    args = ap.parse_args(argv)

    shards: List[List[str]] = [[], [], []]
    total, n_train = 0, 0
    for i, (url, text) in enumerate(documents(args.stdlib, args.doc_chars)):
        if total >= args.max_chars:
            break
        record = json.dumps(
            {"text": text, "timestamp": timestamp(url), "url": url},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        if i % 10 == 9:
            shards[2].append(record)
        else:
            shards[n_train % 2].append(record)
            n_train += 1
        total += len(text)
    os.makedirs(args.out, exist_ok=True)
    for name, lines in zip(TRAIN_NAMES + [VALID_NAME], shards):
        write_gz(os.path.join(args.out, name), lines)
        print(f"{name}: {len(lines)} documents", file=sys.stderr)
    print(f"total {total} characters from {args.stdlib} (Python {sys.version.split()[0]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
