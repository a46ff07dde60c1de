"""Shim: `python -m preprocess.glue_download` from the repository root runs `python -m tupe_preprocess.glue_download` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_preprocess.glue_download", run_name="__main__", alter_sys=True)
