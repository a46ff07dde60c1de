"""Shim: `python -m glue.fairseq_train` from the repository root runs `python -m tupe_glue.fairseq_train` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_glue.fairseq_train", run_name="__main__", alter_sys=True)
