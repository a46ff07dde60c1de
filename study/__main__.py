"""Shim: `python -m study` from the repository root runs `python -m tupe_study` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_study", run_name="__main__", alter_sys=True)
