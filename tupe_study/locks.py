"""The lock each study part holds while it runs (tupe_common.lock), and the whole study's.

``study.sh`` (every part, in lanes or not) holds OUT's lock for the whole run: a second ``study.sh`` on the same OUT
is refused at once. Each part holds the lock of the folder it writes, whether it runs in the whole study's process,
in a lane (``study.sh --part``, a process of its own) or on SLURM (study.sbatch): a pre-training or a sweep run its
SAVE_DIR's (the very lock ``pretrain.sh`` takes: ``tupe_pretrain.pretrain.save_dir_lock``), a fine-tuning run and its
word-order part the run's (``tupe_glue.finetune.run_lock``), the prep OUT/c4's (the C4 pipeline's OUT_DIR), locality and
longer inputs one beside their output file. The report, ``--list``, ``--slurm``, ``--archive`` and ``--plan`` take
none: they read, beside any live lock. Whatever this process then runs into the same folder (pretrain.prepare,
finetune.finetune, pipeline.run) holds the same lock again, which nests (a process never refuses itself).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

from tupe_study.plan import Plan
from tupe_study.settings import PROG
from tupe_common.lock import RunLock, folder_lock, hold


def part_lock(plan: Plan, stage: str, part: Tuple) -> Optional[str]:
    """The lock file of ``stage``'s ``part``, or None (the report: it only reads and rewrites its own files; a part
    not of the table's shape, as tests make)."""
    from tupe_study import stages

    if len(part) != {"prep": 0, "pretrain": 2, "sweep": 3, "finetune": 5, "order": 5, "locality": 2,
                     "longer": 2}.get(stage, -1):
        return None
    if stage == "prep":
        return folder_lock(plan.path("c4"))
    if stage == "pretrain":
        return folder_lock(plan.pretrain_dir(*part))
    if stage == "sweep":
        from tupe_study.sweep import sweep_dir

        label, lr, seed = part
        return folder_lock(sweep_dir(plan.out, label, float(lr), seed))
    if stage in ("finetune", "order"):
        from tupe_glue.finetune import run_lock

        label, seed, task, lr, k = part
        return run_lock(plan.path("finetune", label, f"seed{seed}"), task, float(lr), k)
    if stage == "locality":
        return stages.locality_csv(plan, *part) + ".lock"
    if stage == "longer":
        return stages.longer_json(plan, *part) + ".lock"
    return None


def hold_part(plan: Plan, stage: str, part: Tuple) -> Optional[RunLock]:
    path = part_lock(plan, stage, part)
    return None if path is None else hold(path, PROG, "OUT")


def hold_study(plan: Plan) -> RunLock:
    os.makedirs(plan.out, exist_ok=True)
    return hold(folder_lock(plan.out), PROG, "OUT")
