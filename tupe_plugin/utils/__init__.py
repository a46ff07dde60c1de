"""Standard-library helpers shared by the plugin, ``preprocess/`` and ``glue/``: atomic files, hashing, logging."""
