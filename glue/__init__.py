"""Shims of the old module paths (`python -m glue...` from the repository root): the code is the installed package."""
