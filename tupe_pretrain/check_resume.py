"""Before (re)starting pre-training: say where fairseq will resume, and repair a damaged last checkpoint.

fairseq resumes from ``SAVE_DIR/checkpoint_last.pt`` by default. It writes the newest checkpoint
atomically (temporary name, then rename) but then *copies* it to ``checkpoint_last.pt``, which is not
atomic: a job preempted or killed during that copy leaves a truncated ``checkpoint_last.pt`` and every
resubmission then dies loading it. This check, run by ``pretrain.sh`` before each launch:

* no ``checkpoint_last.pt`` and no other checkpoint: fresh start;
* ``checkpoint_last.pt`` loads: fairseq resumes from it (its update count is printed);
* ``checkpoint_last.pt`` is damaged: it is kept as ``checkpoint_last.pt.damaged`` and the newest intact
  ``checkpoint_E_U.pt`` / ``checkpointE.pt`` is copied (temporary name, then rename) to
  ``checkpoint_last.pt``; with no intact one, exit 1 (a damaged input);
* other checkpoints but no ``checkpoint_last.pt``: exit 2 rather than start from scratch over them.

* with ``--setting NAME=VALUE`` (and ``--dict``, whose SHA-256 is recorded too): the settings are kept
  in ``SAVE_DIR/settings.json``; when SAVE_DIR holds checkpoints of a run with other settings, exit 2
  naming each difference (``--on-change continue`` accepts them and records the new ones);
  ``--added-setting NAME=VALUE``: one recorded since a later version, so a record without it (an older run)
  is not compared on it, and gets it.

    python tupe_pretrain/check_resume.py SAVE_DIR [--dry-run] [--setting NAME=VALUE ...] [--added-setting ...]
        [--dict DICT]

``pretrain.py`` calls :func:`check` with its record (a :class:`RunRecord`), not through the command line.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Tuple

from tupe_common.io import atomic_path, file_hash, need, read_json, write_json
from tupe_common.log import setup_logging
from tupe_common.errors import exit_main
from tupe_common.numbers import same_number

LAST = "checkpoint_last.pt"
SETTINGS = "settings.json"
OTHER_RE = re.compile(r"^checkpoint(?:_\d+_\d+|\d+)\.pt$")


def num_updates(path: str) -> Optional[int]:
    """Update count stored in a fairseq checkpoint, or None if the file cannot be read."""
    import torch

    from tupe_common.checkpoint_file import allow_fairseq_objects

    allow_fairseq_objects()

    try:
        state = torch.load(path, map_location="cpu", mmap=True)  # tensors are not read
        return int(state["optimizer_history"][-1]["num_updates"])
    except Exception:  # truncated zip, bad pickle, not a fairseq checkpoint: all mean "cannot resume"
        return None


def candidates(save_dir: str) -> List[str]:
    return [os.path.join(save_dir, f) for f in os.listdir(save_dir) if OTHER_RE.match(f)]


def newest_intact(paths: List[str]) -> Optional[Tuple[int, str]]:
    readable = [(n, p) for p in paths for n in [num_updates(p)] if n is not None]
    return max(readable) if readable else None


@dataclass(frozen=True)
class RunRecord:
    """What ``SAVE_DIR/settings.json`` keeps of a run: its settings as the environment writes them (``added``: those
    recorded since a later version, which an older record is not compared on, and gets), and the training
    dictionary, recorded by its SHA-256."""

    settings: Mapping[str, str] = field(default_factory=dict)
    added: Mapping[str, str] = field(default_factory=dict)
    dictionary: Optional[str] = None  # the path of dict.txt

    def __bool__(self) -> bool:
        return bool(self.settings or self.added or self.dictionary)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("save_dir")
    p.add_argument("--dry-run", action="store_true", help="report only, change nothing")
    p.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE", help="a setting of the run")
    p.add_argument("--added-setting", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting recorded since a later version: a record without it is not compared on it")
    p.add_argument("--dict", help="the training dictionary (its SHA-256 is a setting)")
    p.add_argument("--on-change", choices=("refuse", "continue"), default="refuse",
                   help="checkpoints of a run with other settings: refuse (exit 2) or continue with the new ones")
    args = p.parse_args(argv)
    record = RunRecord(dict(s.split("=", 1) for s in args.setting), dict(s.split("=", 1) for s in args.added_setting),
                       args.dict)
    return check(args.save_dir, record, on_change=args.on_change, dry_run=args.dry_run)


def same_setting(recorded: object, now: object) -> bool:
    """One value, however spelt: ``LR=1e-3`` in the record and ``0.001`` now (``tupe_common.numbers.same_number``)."""
    return recorded == now or (isinstance(recorded, str) and isinstance(now, str) and same_number(recorded, now))


def check(save_dir: str, record: RunRecord = RunRecord(), on_change: str = "refuse", dry_run: bool = False) -> int:
    """The check of the module docstring on ``save_dir``, its ``record`` kept in ``SAVE_DIR/settings.json`` (an
    empty one: none kept); the exit status: 0 go on, 2 refused, 1 nothing intact to resume."""
    log = setup_logging("check_resume")
    need(save_dir, "out")  # a file where SAVE_DIR should be: one line naming it, exit 1
    last = os.path.join(save_dir, LAST)
    others = candidates(save_dir) if os.path.isdir(save_dir) else []
    if record:
        added = dict(record.added)
        settings = {**record.settings, **added}
        if record.dictionary:
            settings["DICTIONARY_SHA256"] = file_hash(record.dictionary)
        path = os.path.join(save_dir, SETTINGS)
        old = read_json(path)
        if old is not None and (os.path.exists(last) or others):
            diff = [f"{k}: {old.get(k)!r} in the run, {settings.get(k)!r} now"
                    for k in sorted(set(old) | set(settings)) if not same_setting(old.get(k), settings.get(k))
                    and not (k in added and k not in old)]
            if diff and on_change == "refuse":
                log.error(f"{save_dir} holds a run with other settings ({'; '.join(diff)}). Start fresh "
                          "with another SAVE_DIR (or remove this one), or continue this run with the new "
                          "settings: ON_SETTINGS_CHANGE=continue")
                return 2
            if diff:
                log.warning(f"continuing {save_dir} with changed settings: {'; '.join(diff)}")
        if not dry_run:
            write_json(path, settings)
    if not os.path.exists(last):
        if others:
            log.error(f"{save_dir} holds {len(others)} checkpoint(s) but no {LAST}; refusing to start "
                f"from scratch over them. Copy the one to resume from to {LAST}, or use another SAVE_DIR.")
            return 2
        log.info(f"no {last}: starting from scratch")
        return 0
    n = num_updates(last)
    if n is not None:
        log.info(f"resuming from {last} @ {n} updates")
        return 0
    best = newest_intact(others)
    if best is None:
        log.error(f"{last} cannot be read (truncated?) and no intact checkpoint_*.pt to fall back on")
        return 1  # a damaged input, not a usage error
    n, path = best
    if dry_run:
        log.info(f"{last} cannot be read; would resume from {path} @ {n} updates")
        return 0
    os.replace(last, last + ".damaged")
    with atomic_path(last) as tmp:
        shutil.copyfile(path, tmp)
    log.info(f"{last} could not be read (kept as {LAST}.damaged); resuming from a copy of {path} @ {n} updates")
    return 0


def last_checkpoint(save_dir: str) -> Tuple[str, bool, Optional[int]]:
    """SAVE_DIR/checkpoint_last.pt: its path, whether it exists, and its update count (None: absent or unreadable)."""
    path = os.path.join(save_dir, LAST)
    there = os.path.isfile(path)
    return path, there, num_updates(path) if there else None


def resume_from(save_dir: str) -> str:
    """How a rerun of a stopped pre-training resumes: from checkpoint_last.pt at its update, when there is one."""
    path, there, done = last_checkpoint(save_dir)
    if not there:
        return "no checkpoint was saved yet: rerun the same command to start the run again"
    if done is None:  # a save cut short: the rerun's check (resume_checkpoint) takes the newest intact checkpoint
        return f"rerun the same command to resume from the newest intact checkpoint in {save_dir}"
    return f"rerun the same command to resume from {path} at update {done}"


def cli() -> None:
    """The console script ``tupe-check-resume``."""
    exit_main(main, "tupe-check-resume")


if __name__ == "__main__":
    exit_main(main, "check_resume")
