"""Shim: `python -m train_scripts.fairseq_train` from the repository root runs `python -m tupe_pretrain.fairseq_train` (the installed package)."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tupe_pretrain.fairseq_train", run_name="__main__", alter_sys=True)
