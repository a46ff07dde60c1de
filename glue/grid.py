"""Shim: `python -m glue.grid` from the repository root runs `python -m tupe_glue.grid` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_glue.grid", run_name="__main__", alter_sys=True)
