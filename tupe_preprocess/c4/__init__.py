"""The C4 pipeline as one command, ``python -m tupe_preprocess.c4 SUBCOMMAND`` (see ``__main__``); its steps and tasks
are declared in :mod:`tupe_preprocess.c4.pipeline`."""
