"""Shim: `python -m preprocess.c4_layout` from the repository root runs `python -m tupe_preprocess.c4_layout` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.c4_layout", run_name="__main__", alter_sys=True)
