"""Shim: `python -m study.archive` from the repository root runs `python -m tupe_study.archive` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_study.archive", run_name="__main__", alter_sys=True)
