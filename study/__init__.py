"""Shims of the old module paths (`python -m study...` from the repository root): the code is the installed package."""
