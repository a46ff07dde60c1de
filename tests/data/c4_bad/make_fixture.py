"""Write ``c4-train.00000-of-01024.json.gz``: C4-format lines, some deliberately bad.

Expected by tests/test_c4_pipeline.py (keep in sync with ``EXPECTED``): 6 good documents and the
skip counts below. Good documents also exercise the whitespace rules (``\\r\\n``, tabs, NBSP,
U+2028, control characters, non-ASCII). Run: ``python tests/data/c4_bad/make_fixture.py``.
"""
from __future__ import annotations

import gzip
import json
import os

EXPECTED = {
    "documents": 6,
    "input_lines": 19,
    "skipped_by_reason": {
        "non_utf8": 3,
        "malformed_json": 3,
        "not_object": 1,
        "missing_text": 2,
        "non_string_text": 2,
        "empty_text": 2,
    },
}


def rec(text: object, i: int) -> bytes:
    obj = {"text": text, "timestamp": f"2019-04-2{i % 10}T12:57:54Z", "url": f"https://example.org/{i}"}
    return json.dumps(obj, separators=(",", ":")).encode()


def lines() -> list:
    good = [
        "Beginners BBQ Class Taking Place in Missoula!\nDo you want to get better at making delicious BBQ?",
        "Windows line ends\r\nsecond paragraph\r\n\r\n  indented   with   spaces  ",
        "Tabs\tand\u00a0non-breaking spaces\u2028after a line separator\x00 with a NUL",
        "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u2014 na\u00efve r\u00e9sum\u00e9 \U0001F600 \u65e5\u672c\u8a9e",
        "One line only",
        "\n\n\nLeading and trailing blank paragraphs\n\n\n",
    ]
    out = [rec(good[0], 0)]
    out.append(b'{"text":"caf\xe9 au lait","timestamp":"2019-04-21T00:00:00Z","url":"x"}')  # latin-1
    out.append(b'{"text":"truncated json')  # malformed
    out.append(rec(good[1], 1))
    out.append(b'{"timestamp":"2019-04-21T00:00:00Z","url":"https://example.org/no-text"}')  # missing
    out.append(rec(12345, 2))  # non-string
    out.append(b"")  # empty line: malformed JSON
    out.append(rec(good[2], 3))
    out.append(rec("", 4))  # empty
    out.append(b"\xff\xfe\x00garbage")  # non-UTF-8
    out.append(b"[1, 2, 3]")  # not an object
    out.append(rec(good[3], 5))
    out.append(rec(None, 6))  # non-string (null)
    out.append(b'{"text":"lone surrogate \\ud800 here","timestamp":"2019-04-21T00:00:00Z","url":"y"}')
    out.append(rec(" \t\n \u00a0\r\n", 7))  # whitespace only
    out.append(rec(good[4], 8))
    out.append(b"this is not json at all")  # malformed
    out.append(b'{"url":"https://example.org/also-no-text","timestamp":"2019-04-21T00:00:00Z"}')  # missing
    out.append(rec(good[5], 9))
    return out


def main() -> None:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c4-train.00000-of-01024.json.gz")
    data = b"\n".join(lines()) + b"\n"
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(data)
    print(path)


if __name__ == "__main__":
    main()
