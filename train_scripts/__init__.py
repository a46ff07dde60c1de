"""Shims of the old module paths (`python -m train_scripts...` from the repository root): the code is the installed package."""
