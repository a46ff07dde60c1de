"""The check's sections, declared once: ``SECTIONS`` is the table the driver runs in order (each in its own process
on a GPU) and ``--sections`` chooses from. A section is its name, the function that runs it (``run(result,
settings, args)``, in its own module), the most seconds it may take on a GPU and whether ``--quick`` runs it.
Adding a section is one module and one table row."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

from . import attention, cuda_tests, environment, sdpa, sync, throughput, timing, train, verdict


@dataclass(frozen=True)
class Section:
    name: str
    run: Callable[..., None]  # run(result, settings, args)
    limit_s: int  # on a GPU; the whole check keeps to --budget-s, and timing, last, takes what is left
    quick: bool = False  # run by --quick (make gpu-check QUICK=1)
    quick_s: int = 0  # its estimated seconds on an H100 under --quick (docs/gpu.md), for quick_estimate_s


# What the driver keeps back for a section's process besides its work: the 15 s it reserves before each one
# (driver.drive) cover the process's start (torch, fairseq: about 5 s on the GPU machine) and its report.
SECTION_RESERVE_S = 15


SECTIONS: Tuple[Section, ...] = (
    Section(name="environment", run=environment.run, limit_s=60, quick=True, quick_s=7),
    Section(name="cuda_tests", run=cuda_tests.run, limit_s=120),
    Section(name="sdpa", run=sdpa.run, limit_s=120),
    Section(name="attention", run=attention.run, limit_s=150, quick=True, quick_s=40),
    Section(name="verdict", run=verdict.run, limit_s=90, quick=True, quick_s=35),
    Section(name="train", run=train.run, limit_s=120),
    Section(name="throughput", run=throughput.run, limit_s=150, quick=True, quick_s=45),
    Section(name="sync", run=sync.run, limit_s=60),
    Section(name="timing", run=timing.run, limit_s=420, quick=True, quick_s=35),
)
BY_NAME = {section.name: section for section in SECTIONS}
NAMES = tuple(BY_NAME)
QUICK_SECTIONS = tuple(section.name for section in SECTIONS if section.quick)


def quick_estimate_s() -> int:
    """The quick check's estimated seconds on an H100: its sections' ``quick_s`` and each one's reserve."""
    return sum(section.quick_s + SECTION_RESERVE_S for section in SECTIONS if section.quick)
