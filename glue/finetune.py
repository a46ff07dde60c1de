"""Shim: `python -m glue.finetune` from the repository root runs `python -m tupe_glue.finetune` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_glue.finetune", run_name="__main__", alter_sys=True)
