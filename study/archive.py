"""A study's evidence: the files its report reads, without checkpoints or data, in a folder small enough to
publish, from which a later version of the report can be rendered again (new rules need no re-training)::

    study.sh --archive DEST       (with the study's settings, as for --report) writes DEST
    python -m study.archive DEST  renders DEST's report again: report.md, the CSVs and overview.png in DEST

What DEST holds (the layout of a study folder, ``study.runs``)::

    settings.env, timings.tsv                      as in the study
    c4/valid_blocks.json                           the held-out split's size (study.valid_se)
    pretrain/V/seedS/train.log, pretrain.done      the log's validation lines only (the curves the report reads)
    sweep/V/lr{LR}/seedS/train.log, pretrain.done  likewise, for the LR sweep (study.sweep)
    finetune/V/seedS/TASK/lr{LR}_seed{K}/          result.json, predictions.json, order.json
    locality/V/seedS.csv, longer/V/seedS.json      as in the study (and longer/V/seedS.blocks.json)
    report.json                                    the report's arguments, the unigram baseline among them (the
                                                   training data, which gives it, is not kept)

DEST must not exist: an archive is written whole (to DEST.partial, renamed at the end) and never overwritten.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import List, Optional, Sequence

from study.runs import is_validation_line
from tupe_common.io import atomic_dir, need, write_json

FINETUNE_FILES = ("result.json", "predictions.json", "order.json")


def _valid_lines(src: str, dst: str) -> int:
    """Copy the validation lines of the fairseq log ``src`` to ``dst``; their number."""
    with open(src, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if is_validation_line(line)]
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return len(lines)


def _copy(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)


def archive(out: str, dest: str, report_argv: Sequence[str], unigram_bits: Optional[float]) -> List[str]:
    """Write the evidence of the study ``out`` into ``dest`` (which must not exist), with ``report_argv`` (the
    report's arguments after the folder, ``study.stages.report_argv``) and the unigram baseline in report.json.
    Returns one line per kind of file kept, for the caller to print."""
    need(out, "folder")
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest}: already exists; an archive is never overwritten (choose another DEST or "
                              "remove it)")
    counts = {"pre-training logs": 0, "validation lines": 0, "fine-tuning files": 0, "locality and longer-input "
              "files": 0}
    with atomic_dir(dest) as tmp:
        for name in ("settings.env", "timings.tsv", os.path.join("c4", "valid_blocks.json")):
            if os.path.isfile(os.path.join(out, name)):
                _copy(os.path.join(out, name), os.path.join(tmp, name))
        for root, _dirs, files in sorted(os.walk(out)):
            rel = os.path.relpath(root, out)
            top = rel.split(os.sep)[0]
            if top in ("pretrain", "sweep") and "train.log" in files:
                os.makedirs(os.path.join(tmp, rel), exist_ok=True)
                counts["validation lines"] += _valid_lines(os.path.join(root, "train.log"),
                                                           os.path.join(tmp, rel, "train.log"))
                counts["pre-training logs"] += 1
                if "pretrain.done" in files:
                    _copy(os.path.join(root, "pretrain.done"), os.path.join(tmp, rel, "pretrain.done"))
            elif top == "finetune":
                for name in FINETUNE_FILES:
                    if name in files:
                        _copy(os.path.join(root, name), os.path.join(tmp, rel, name))
                        counts["fine-tuning files"] += 1
            elif top in ("locality", "longer") and rel.count(os.sep) == 1:
                for name in files:
                    if name.endswith((".csv", ".json")):
                        _copy(os.path.join(root, name), os.path.join(tmp, rel, name))
                        counts["locality and longer-input files"] += 1
        argv = list(report_argv) + ([] if unigram_bits is None else ["--unigram-bits", repr(unigram_bits)])
        write_json(os.path.join(tmp, "report.json"), {"argv": argv})
    return [f"{n} {what}" for what, n in counts.items()]


def render(dest: str) -> int:
    """Render the report of the archive ``dest`` again, with its recorded arguments (study.report's exit status)."""
    from study.report import main as report

    need(dest, "folder")
    need(os.path.join(dest, "report.json"))
    with open(os.path.join(dest, "report.json"), encoding="utf-8") as f:
        try:
            argv = json.load(f)["argv"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{dest}/report.json: not an archive's report.json ({e}); write it with "
                             "study.sh --archive") from None
    return report([dest] + [str(a) for a in argv])


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__.split("\n\n")[0] + "\n\nUsage: python -m study.archive DEST (an archive written by "
              "study.sh --archive DEST)", file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    try:
        return render(args[0])
    except ValueError as e:
        print(f"study.archive: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    from tupe_common.errors import exit_main

    exit_main(main, "python -m study.archive")
