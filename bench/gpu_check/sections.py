"""The check's sections, declared once: ``SECTIONS`` is the table the driver runs in order (each in its own process
on a GPU) and ``--sections`` chooses from. A section is its name, the function that runs it (``run(result,
settings, args)``, in its own module), the most seconds it may take on a GPU and whether ``--quick`` runs it.
Adding a section is one module and one table row."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

from . import attention, cuda_tests, environment, sdpa, sync, throughput, timing, train


@dataclass(frozen=True)
class Section:
    name: str
    run: Callable[..., None]  # run(result, settings, args)
    limit_s: int  # on a GPU; the whole check keeps to --budget-s, and timing, last, takes what is left
    quick: bool = False  # run by --quick (make gpu-check QUICK=1)


SECTIONS: Tuple[Section, ...] = (
    Section(name="environment", run=environment.run, limit_s=60, quick=True),
    Section(name="cuda_tests", run=cuda_tests.run, limit_s=120),
    Section(name="sdpa", run=sdpa.run, limit_s=120),
    Section(name="attention", run=attention.run, limit_s=150, quick=True),
    Section(name="train", run=train.run, limit_s=120),
    Section(name="throughput", run=throughput.run, limit_s=150, quick=True),
    Section(name="sync", run=sync.run, limit_s=60),
    Section(name="timing", run=timing.run, limit_s=420, quick=True),
)
BY_NAME = {section.name: section for section in SECTIONS}
NAMES = tuple(BY_NAME)
QUICK_SECTIONS = tuple(section.name for section in SECTIONS if section.quick)
