"""Shim: `python -m preprocess.snli_download` from the repository root runs `python -m tupe_preprocess.snli_download` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.snli_download", run_name="__main__", alter_sys=True)
