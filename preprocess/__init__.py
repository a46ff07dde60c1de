"""Shims of the old module paths (`python -m preprocess...` from the repository root): the code is the installed package."""
