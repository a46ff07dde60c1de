"""tupe_common.fairseq_log, the one reader of fairseq's logs, on lines in each of fairseq's forms (as fairseq 0.12
writes them), and its readers: the study's curves, tupe_glue.collect's validations, the GPU study's facts."""
from __future__ import annotations

import sys
from datetime import datetime

import pytest

from conftest import ROOT
from tupe_common import fairseq_log

LOG = """\
2026-12-02 15:48:50 | INFO | fairseq_cli.train | {'_name': None, 'common': {'log_format': 'json'}}
2026-12-02 15:48:51 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "9.1", "wps": "1000", "num_updates": "10"}
2026-12-02 15:48:52 | INFO | valid | {"epoch": 1, "valid_loss": "8.5", "valid_accuracy": "61.5", "valid_num_updates": "20"}
2026-12-02 15:48:53 | INFO | valid1 | {"epoch": 1, "valid1_loss": "8.7", "valid1_accuracy": "60.0", "valid1_num_updates": "20"}
2026-12-02 15:48:54 | INFO | train | {"epoch": 1, "train_loss": "9.0", "train_wpb": "512", "train_num_updates": "20"}
2026-12-02 15:48:55 | INFO | valid | {"epoch": 2, "valid_loss": "7.5", "valid_num_updates": "30",}
a warning without a timestamp
2026-12-02 15:49:00 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.25 | accuracy 70.5 | num_updates 40
[2026-12-02 15:49:01,000][valid][INFO] - {"epoch": 3, "valid_loss": "7.0", "valid_num_updates": "60"}
"""


def test_every_form_gives_its_kind_and_values_without_the_prefix(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LOG, encoding="utf-8")
    found = list(fairseq_log.statistics(log))
    assert [(s.kind, s.update) for s in found] == [
        ("train_inner", 10), ("valid", 20), ("valid1", 20), ("train", 20), ("valid", 40), ("valid", 60)]
    # the configuration (a Python dict) and the broken JSON line are skipped, the hydra line read
    assert found[1].values == {"epoch": 1, "loss": "8.5", "accuracy": "61.5", "num_updates": "20"}
    assert found[3].number("wpb") == 512.0 and found[3].number("epoch") == 1.0 and found[3].number("lr") is None
    assert found[4].values["loss"] == "7.25" and found[4].number("accuracy") == 70.5
    assert [s.validation for s in found] == [False, True, True, False, True, True]
    assert fairseq_log.kind_of(LOG.splitlines()[5]) == "valid"  # its form, though its JSON is broken
    assert fairseq_log.stats_of("| valid | [1, 2]") is None and fairseq_log.kind_of("loss 3") is None
    assert fairseq_log.Stats("valid", {"loss": "inf"}).number("loss") is None
    assert fairseq_log.stamp(LOG.splitlines()[1]) == datetime(2026, 12, 2, 15, 48, 51).timestamp()
    assert fairseq_log.stamp("a warning") is None and fairseq_log.stamp("2026-13-40 25:00:00 | x") is None


def test_the_readers_of_the_study_glue_and_the_gpu_study_read_it(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_study
    from tupe_study.gpu_schedule import updates_so_far
    from tupe_glue.collect import parse_validations
    from tupe_study.runs import is_validation_line, parse_valid_curves
    from tupe_study.timings import logged_seconds

    log = tmp_path / "train.log"
    log.write_text(LOG, encoding="utf-8")
    curves = parse_valid_curves(str(log), ("loss", "accuracy"))
    assert curves == {"loss": {20: 8.5, 40: 7.25, 60: 7.0}, "accuracy": {20: 61.5, 40: 70.5}}
    assert [is_validation_line(line) for line in LOG.splitlines()] == [False, False, True, False, False, True,
                                                                        False, True, True]
    assert [(v.subset, v.step, v.value) for v in parse_validations(str(log), "accuracy")] == [
        ("valid", 20, 61.5), ("valid1", 20, 60.0), ("valid", 40, 70.5)]
    assert logged_seconds(str(log)) == 5 + 0  # 15:48:50-15:48:55, then a line without a time; one stamped line after
    assert updates_so_far(log) == 20
    assert gpu_study.pretrain_facts(log) == {"updates": 20, "tokens": 512 * 20, "wps": 1000.0}
    start, last, valid = gpu_study.log_times(log)
    assert start == datetime(2026, 12, 2, 15, 48, 50).timestamp() and last == datetime(2026, 12, 2, 15, 49).timestamp()
    assert valid == {20: (8.5, datetime(2026, 12, 2, 15, 48, 52).timestamp()),
                     40: (7.25, datetime(2026, 12, 2, 15, 49).timestamp())}
    with pytest.raises(FileNotFoundError):
        parse_validations(str(tmp_path / "missing.log"), "accuracy")
