"""Standard-library helpers of the whole project: atomic files and hashes (:mod:`tupe_common.io`), one
logging setup (:mod:`tupe_common.log`), and the GLUE protocol's choice of a learning rate that ``glue.collect``
and the study share (:mod:`tupe_common.glue_selection`).

Never imports torch or fairseq (``tests/test_packaging.py`` checks), so ``preprocess/`` and ``glue/``
commands that only write files start at once; ``tupe_plugin``, ``preprocess/``, ``glue/`` and
``train_scripts/`` all use it.
"""
