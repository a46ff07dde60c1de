"""Shim: `python -m glue.tasks` from the repository root runs `python -m tupe_glue.tasks` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_glue.tasks", run_name="__main__", alter_sys=True)
