"""Light helpers of the whole project (standard library, numpy): the one usage error of every command
(:mod:`tupe_common.errors`), atomic files and hashes (:mod:`tupe_common.io`), a command run into a log file
(:mod:`tupe_common.process`), the lock a run holds in the folder it writes (:mod:`tupe_common.lock`), one logging setup (:mod:`tupe_common.log`), fairseq's mmap index format read and written without fairseq
(:mod:`tupe_common.mmap_index`, the one place that knows it).

Never imports torch or fairseq at import (``tests/test_packaging.py`` checks; psutil, torch and omegaconf only
inside the functions that need them), so the commands of ``tupe_preprocess`` and ``tupe_glue`` that only write
files start at once; every other package uses it.
"""
