"""Shim: `python -m preprocess.probing_sets` from the repository root runs `python -m tupe_preprocess.probing_sets` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.probing_sets", run_name="__main__", alter_sys=True)
