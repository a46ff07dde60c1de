"""Standard-library helpers of the whole project: atomic files and hashes (:mod:`tupe_common.io`), one
logging setup (:mod:`tupe_common.log`).

Never imports torch or fairseq (``tests/test_packaging.py`` checks), so ``preprocess/`` and ``glue/``
commands that only write files start at once; ``tupe_plugin``, ``preprocess/``, ``glue/`` and
``train_scripts/`` all use it.
"""
