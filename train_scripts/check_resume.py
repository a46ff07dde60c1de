"""Shim: `python -m train_scripts.check_resume` from the repository root runs `python -m tupe_pretrain.check_resume` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_pretrain.check_resume", run_name="__main__", alter_sys=True)
