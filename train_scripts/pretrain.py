"""Shim: `python -m train_scripts.pretrain` from the repository root runs `python -m tupe_pretrain.pretrain` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_pretrain.pretrain", run_name="__main__", alter_sys=True)
