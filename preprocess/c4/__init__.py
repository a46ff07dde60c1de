"""The C4 pipeline as one command, ``python -m preprocess.c4 SUBCOMMAND`` (see ``__main__``); its steps and tasks
are declared in :mod:`preprocess.c4.pipeline`."""
