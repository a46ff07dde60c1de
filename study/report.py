"""Shim: `python -m study.report` from the repository root runs `python -m tupe_study.report` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_study.report", run_name="__main__", alter_sys=True)
