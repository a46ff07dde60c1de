"""The study: positional encodings pre-trained side by side and compared (``train_scripts/study.sh``).

Runs from the repository (like ``glue/`` and ``preprocess/``, never installed): ``python -m study`` is the
orchestrator behind ``train_scripts/study.sh``. Its modules, one job each:

* :mod:`study.settings`   the table of settings (presets, environment, checks, what a study records);
* :mod:`study.stages`     the table of stages (prep, pretrain, locality, longer, finetune, order, report):
  for each, its parts, when a part is done and how it runs;
* :mod:`study.__main__`   the command: ``--list``, ``--part``, ``--slurm``, ``--report``, or everything;
* :mod:`study.dev_eval`   a fine-tuned model's dev predictions, as written and with the word order perturbed;
* :mod:`study.longer_inputs`  validation MLM loss at T, 2T, 4T;
* :mod:`study.runs`       reading a study folder (logs, fine-tuning runs, locality, the two stages above);
* :mod:`study.compare`    differences between variants: paired by seed, and the paired bootstrap;
* :mod:`study.report`     ``OUT/report.md`` and the CSVs; :mod:`study.figure` the overview figure;
* :mod:`study.stats`      plain statistics: correlations, ranks, entropy, the paired bootstrap.
* :mod:`study.gpu_schedule`  the study on one GPU within a time budget (``make gpu-study``, whose command,
  ``bench/gpu_study.py``, measures it): the call's seeds, its parts in order, what the budget stops.

The GLUE selection it shares with ``glue.collect`` is ``tupe_common.glue_selection`` (installed).
"""
