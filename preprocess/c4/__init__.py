"""Shims of the old module paths (`python -m preprocess.c4...` from the repository root): the code is the installed package."""
