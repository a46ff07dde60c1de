"""Shim: `python -m train_scripts.torchrun` from the repository root runs `python -m tupe_pretrain.torchrun` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_pretrain.torchrun", run_name="__main__", alter_sys=True)
