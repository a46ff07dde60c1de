"""Shim: `python -m glue.collect` from the repository root runs `python -m tupe_glue.collect` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_glue.collect", run_name="__main__", alter_sys=True)
