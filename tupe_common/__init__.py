"""Light helpers of the whole project (standard library, numpy): the one usage error of every command
(:mod:`tupe_common.errors`), atomic files and hashes (:mod:`tupe_common.io`), a command run into a log file
(:mod:`tupe_common.process`), the lock a run holds in the folder it writes (:mod:`tupe_common.lock`), one logging setup (:mod:`tupe_common.log`), fairseq's mmap index format read and written without fairseq
(:mod:`tupe_common.mmap_index`, the one place that knows it), and the GLUE protocol's choice of a learning rate
that ``tupe_glue.collect`` and the study share (:mod:`tupe_common.glue_selection`).

Never imports torch or fairseq (``tests/test_packaging.py`` checks), so ``preprocess/`` and ``glue/``
commands that only write files start at once; ``tupe_plugin``, ``preprocess/``, ``glue/`` and
``train_scripts/`` all use it.
"""
