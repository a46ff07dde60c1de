"""The launchers (pretrain.sh, the study's plan, glue/finetune.sh before it starts fairseq-train,
tupe-checkpoint-info) read the variant registry, a checkpoint's record and ELECTRA's generator sizes without
importing fairseq (tupe_core's registry, tupe_tools.checkpoint_record), and read the same as the plugin does."""
from __future__ import annotations

import json
import sys

from conftest import run
from tupe_core import record, registry as real
from tupe_tools.checkpoint_record import checkpoint_info, fairseq_args


def test_a_fresh_process_reads_the_registry_without_fairseq(starts_process):
    code = ("import json, sys\n"
            "from tupe_core.registry import about, names\n"
            "names, about = names(), about()\n"
            "loaded = sorted(m for m in ('fairseq', 'tupe_plugin', 'sklearn') if m in sys.modules)\n"
            "print(json.dumps([names, about, loaded]))")
    names, about, loaded = json.loads(run([sys.executable, "-c", code]).stdout)
    assert loaded == []  # tupe_plugin/__init__ (fairseq's registration) never ran
    assert names == [n.replace("_", "-") for n in real.ABOUT] and "tupe-r" in names
    assert about == {n.replace("_", "-"): a for n, a in real.ABOUT.items()}


def test_the_launchers_and_the_plugin_read_one_registry():
    """One copy of the core in a process: the plugin's model, the checkpoint reader and the launchers' names
    read tupe_core's registry and record themselves (so a variant a --user-dir registered there is listed)."""
    import sys

    from tupe_plugin.models import architectures, tupe_roberta
    from tupe_tools import checkpoint_record

    assert architectures.VARIANTS is real.VARIANTS and checkpoint_record.from_record is real.from_record
    assert tupe_roberta.PositionalVariant is checkpoint_record.PositionalVariant is record.PositionalVariant
    copies = [name for name, module in list(sys.modules.items())  # a second copy of tupe_core's record module
              if isinstance(getattr(module, "__dict__", {}).get("PositionalVariant"), type)  # not every entry has one
              and module.__dict__["PositionalVariant"] is not record.PositionalVariant
              and not name.startswith("transformers_modules.")]  # an exported folder's own files (the HF tests')
    assert copies == []
    assert list(real.about()) == real.names() == [n.replace("_", "-") for n in real.ABOUT]


def test_a_fresh_process_reads_a_checkpoints_record_without_fairseq(pretrained, starts_process):
    path = str(pretrained / "checkpoint_last.pt")
    code = ("import json, sys\n"
            "from tupe_tools.checkpoint_record import checkpoint_info, fairseq_args\n"
            f"info = checkpoint_info({path!r})\n"
            "loaded = sorted(m for m in ('fairseq', 'tupe_plugin', 'sklearn') if m in sys.modules)\n"
            "print(json.dumps([info, fairseq_args(info), loaded]))")
    info, flags, loaded = json.loads(run([sys.executable, "-c", code]).stdout)
    assert loaded == []
    want = checkpoint_info(path)  # this process: tupe_plugin and fairseq loaded
    assert info == want and info["variant"] == "tupe_r" and info["encoder_layers"] == 2
    assert flags == fairseq_args(want) and flags.startswith(f"--arch {want['arch']} --max-positions 64 ")


def test_an_electra_studys_plan_checks_its_generator_without_fairseq(tmp_path, starts_process):
    env = {"OUT": str(tmp_path / "s"), "PRESET": "cpu-small", "TASKS": "none", "VARIANTS": "bert-a",
           "OBJECTIVES": "mlm electra"}
    code = ("import json, sys\n"
            "from tupe_study.plan import Plan\n"
            "from tupe_study.settings import UsageError\n"
            f"env = {env!r}\n"
            "labels = [e.label for e in Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR='4')).variants]\n"
            "try:\n"
            "    Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR='auto'))\n"
            "    refused = ''\n"
            "except UsageError as e:\n"
            "    refused = str(e)\n"
            "loaded = sorted(m for m in ('fairseq', 'tupe_plugin', 'sklearn') if m in sys.modules)\n"
            "print(json.dumps([labels, refused, loaded]))")
    labels, refused, loaded = json.loads(run([sys.executable, "-c", code]).stdout)
    assert loaded == [] and labels == ["bert-a", "bert-a+electra"]
    # cpu-small's 128-wide base encoder and ELECTRA-Base's 1/3 generator, as the plugin's model would refuse it
    assert "--generator-size-divisor 3 does not divide the discriminator (width 128, FFN 512" in refused
