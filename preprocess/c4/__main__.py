"""Shim: `python -m preprocess.c4` from the repository root runs `python -m tupe_preprocess.c4` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.c4", run_name="__main__", alter_sys=True)
