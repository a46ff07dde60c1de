"""Front door of the ``tupe-*`` console commands.

Arguments are parsed here, without importing torch or fairseq, so ``--help`` and usage errors answer
at once; the command itself then runs from ``tupe_plugin``. A failure ends with one ``error: ...``
line (what is wrong, what to do); ``TUPE_DEBUG=1`` prints the traceback above it.
"""
