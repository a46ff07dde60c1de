"""Shim: `python -m preprocess.labelled_to_tsv` from the repository root runs `python -m tupe_preprocess.labelled_to_tsv` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.labelled_to_tsv", run_name="__main__", alter_sys=True)
