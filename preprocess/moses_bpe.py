"""Shim: `python -m preprocess.moses_bpe` from the repository root runs `python -m tupe_preprocess.moses_bpe` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.moses_bpe", run_name="__main__", alter_sys=True)
