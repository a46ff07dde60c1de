"""The study: positional encodings pre-trained side by side and compared (``tupe-study``; from a checkout also
``train_scripts/study.sh``, its shim). Its modules, one job each:

* :mod:`tupe_study.settings`   the table of settings (presets, environment, checks, what a study records);
* :mod:`tupe_study.stages`     the table of stages (prep, pretrain, locality, longer, finetune, order, report):
  for each, its parts, when a part is done and how it runs;
* :mod:`tupe_study.__main__`   the command: ``--list``, ``--part``, ``--slurm``, ``--report``, or everything;
* :mod:`tupe_study.dev_eval`   a fine-tuned model's dev predictions, as written and with the word order perturbed;
* :mod:`tupe_study.longer_inputs`  validation MLM loss at T, 2T, 4T;
* :mod:`tupe_study.runs`       reading a study folder (logs, fine-tuning runs, locality, the two stages above);
* :mod:`tupe_study.compare`    differences between variants: paired by seed, and the paired bootstrap;
* :mod:`tupe_study.report`     the report command: ``OUT/report.md`` and the CSVs, from the numbers of
  :mod:`tupe_study.report_tables` and the text of :mod:`tupe_study.report_markdown`; :mod:`tupe_study.figure` the
  overview figure;
* :mod:`tupe_study.declaration`  the declaration's syntax (ENDPOINTS, EQUIVALENCE_BITS), parsed once into
  :mod:`tupe_study.report_spec`'s ``ReportSpec``, which the plan builds, the report states and an archive keeps;
  :mod:`tupe_study.endpoints` tests it;
* :mod:`tupe_study.stats`      plain statistics: correlations, ranks, entropy, the paired bootstrap.
* :mod:`tupe_study.gpu_schedule`  the study on one GPU within a time budget (``make gpu-study``, whose command,
  ``bench/gpu_study.py``, measures it): the call's seeds, its parts in order, what the budget stops.

The GLUE selection it shares with ``tupe_glue.collect`` is ``tupe_glue.selection`` (installed).
"""
