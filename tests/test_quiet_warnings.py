"""Quiet logs: fairseq's known hydra/torch deprecation warnings are filtered, other warnings are not."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from conftest import run

KNOWN_TEXTS = (  # what a fairseq-train run printed before the filter (fairseq 0.12, hydra 1.3, torch 2.13)
    "hydra.experimental.initialize() is no longer experimental",
    "hydra.experimental.compose() is no longer experimental",
    "The version_base parameter is not specified",
    "Usage of deprecated keyword in package header",
    "is validated against ConfigStore schema with the same name",
    "The strict flag in the compose API is deprecated",
    "torch.cuda.amp.autocast(args...)` is deprecated",
)

# fairseq converts a legacy Namespace to its hydra config: the call that prints the hydra warnings
CONVERT = ("from fairseq.dataclass.utils import convert_namespace_to_omegaconf; from fairseq import options; "
           "p = options.get_training_parser(); a = options.parse_args_and_arch(p, ['x', '--arch', 'roberta_base', "
           "'--task', 'masked_lm']); convert_namespace_to_omegaconf(a); "
           "import warnings; warnings.warn('an unrelated warning'); "
           "warnings.warn('hydra.experimental.initialize() is gone', DeprecationWarning, stacklevel=1)")


def test_the_filter_hides_only_the_known_messages(starts_process):
    before = run([sys.executable, "-W", "default::DeprecationWarning", "-c", CONVERT]).stderr
    after = run([sys.executable, "-W", "default::DeprecationWarning", "-c", "import tupe_plugin; " + CONVERT]).stderr
    assert sum(t in before for t in KNOWN_TEXTS[:6]) == 6  # the hydra page, without the plugin
    assert not any(t in after for t in KNOWN_TEXTS)
    for text in ("an unrelated warning", "hydra.experimental.initialize() is gone"):  # other text / category
        assert text in before and text in after


def test_show_all_warnings_opt_out(monkeypatch):
    import warnings

    from tupe_plugin import quiet_warnings

    with warnings.catch_warnings():
        warnings.resetwarnings()
        monkeypatch.setenv("TUPE_SHOW_ALL_WARNINGS", "1")
        quiet_warnings.install()
        assert warnings.filters == []
        monkeypatch.delenv("TUPE_SHOW_ALL_WARNINGS")
        quiet_warnings.install()
        assert len(warnings.filters) == len(quiet_warnings.KNOWN)


def test_fairseq_train_with_the_plugin_has_no_known_deprecation_warnings(lm_bin, tmp_path, starts_process):
    p = run(["fairseq-train", str(lm_bin), "--user-dir", "tupe_plugin", "--task", "masked_lm", "--criterion",
             "masked_lm", "--arch", "tupe_roberta_tiny", "--tokens-per-sample", "64", "--batch-size", "8",
             "--optimizer", "adam", "--lr", "1e-3", "--max-update", "2", "--cpu", "--num-workers", "0",
             "--no-save", "--save-dir", str(tmp_path)], fresh=True)  # warnings of fairseq's imports included
    assert "done training" in p.stderr + p.stdout
    assert not [t for t in KNOWN_TEXTS if t in p.stderr]
    assert PIN_MEMORY not in p.stderr  # fairseq's iterators ask for pinned memory; on CPU torch warned per epoch


PIN_MEMORY = "'pin_memory' argument is set as true but no accelerator is found"
# A DataLoader asking for pinned memory as fairseq's iterators do, with a device argument torch deprecates (another
# UserWarning of the same DataLoader line), then a warning of the caller's own.
PINNED = ("import warnings, torch; list(torch.utils.data.DataLoader([1, 2], pin_memory=True, pin_memory_device='cpu')); "
          "warnings.warn('an unrelated warning')")


def test_pinned_memory_without_an_accelerator_is_hidden_and_nothing_else(starts_process):
    if torch.accelerator.is_available():
        pytest.skip("with an accelerator torch pins the memory and does not warn")
    before = run([sys.executable, "-c", PINNED]).stderr
    after = run([sys.executable, "-c", "import tupe_plugin; " + PINNED]).stderr
    assert PIN_MEMORY in before and PIN_MEMORY not in after
    for text in ("pin_memory_device is deprecated", "an unrelated warning"):  # same line and category / the caller's
        assert text in before and text in after



def test_commands_do_not_print_fairseq_tensorboardx_line(starts_process):
    """fairseq logs "Please install tensorboardX" on import of its tasks; our commands drop that one record."""
    line = "Please install tensorboardX"
    p = run([str(Path(sys.executable).parent / "tupe-checkpoint-info"), "--list-variants"], fresh=True)
    assert p.stdout.split()[:2] == ["bert-a", "bert-r"] and line not in p.stdout + p.stderr
    shown = run([sys.executable, "-c", "import os; os.environ['TUPE_SHOW_ALL_WARNINGS'] = '1'; "
                 "import tupe_plugin, fairseq.tasks"]).stderr  # the opt-out keeps it
    if importlib.util.find_spec("tensorboardX") is None:  # where it is installed, fairseq logs nothing
        assert line in shown
