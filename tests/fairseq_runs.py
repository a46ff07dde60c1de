"""Many fairseq-train runs in one process: ``python tests/fairseq_runs.py RUNS.json``.

``RUNS.json`` is a list of ``{"argv": [...], "log": path}``; each run is fairseq-train's own console entry point
(``fairseq_cli.train.cli_main``, what the ``fairseq-train`` script calls) with ``sys.argv`` set to its command
line, its log lines (fairseq's format) written to its ``log`` and its exit status (0, or 1 with the traceback in
the log) to ``log + ".status"``. One import of torch and fairseq (8 s of CPU here) serves every run: the tests'
loop over the registry trains every registered variant this way. Every run seeds itself (``--seed``), so a run's losses do not
depend on the runs before it.
"""
from __future__ import annotations

import json
import logging
import sys
import traceback


def main(spec: str) -> int:
    from fairseq_cli import train

    with open(spec, encoding="utf-8") as f:
        runs = json.load(f)
    root = logging.getLogger()
    for r in runs:
        handler = logging.FileHandler(r["log"], mode="w", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                                               datefmt="%Y-%m-%d %H:%M:%S"))
        root.addHandler(handler)
        status = 0
        sys.argv = ["fairseq-train", *r["argv"]]
        try:
            train.cli_main()
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001  (the run failed: its traceback goes to its log)
            handler.stream.write(traceback.format_exc())
            status = 1
        root.removeHandler(handler)
        handler.close()
        with open(r["log"] + ".status", "w", encoding="utf-8") as f:
            f.write(f"{status}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
