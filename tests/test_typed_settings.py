"""Every entry point reads its environment once into a typed settings class (``tupe_common.tunables.Settings``):
values of another kind refused by name when the class is built, from text or from a value; what a value becomes
(an int, a number that keeps its spelling, a bool, None for auto, a tuple for a list); and every class's fields
typed as its kinds say."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Optional, Tuple

import pytest

from tupe_common.errors import UsageError
from tupe_common.tunables import Num, Settings, parse, setting, text


@pytest.mark.parametrize("kind, written, value, back", [
    ("int1", "12", 12, "12"),
    ("auto/int1", "auto", None, "auto"),
    ("auto/int1", "3", 3, "3"),
    ("num+", "1e-4", 0.0001, "1e-4"),
    ("frac", "0.15", 0.15, "0.15"),
    ("0/1", "1", True, "1"),
    ("auto/0/1", "0", False, "0"),
    ("auto/0/1", "auto", None, "auto"),
    ("mlm/electra", "electra", "electra", "electra"),
    ("", "anything at all", "anything at all", "anything at all"),
    ("[num+]", "1e-5, 2e-5 3e-5", (1e-5, 2e-5, 3e-5), "1e-5 2e-5 3e-5"),
    ("[int]", "1 2", (1, 2), "1 2"),
    ("[int]", "none", (), "none"),
])
def test_a_value_becomes_what_its_kind_says_and_is_written_back_as_it_was(kind, written, value, back):
    parsed = parse(kind, written)
    assert parsed == value and type(parsed) is type(value) or isinstance(parsed, Num) and parsed == value
    assert text(parsed) == back


@pytest.mark.parametrize("written", ["1_0", "+1e-3", " 1e-3", "1e-3 ", "inf", "nan", "1e999", "0x10", "1e", "."])
def test_a_number_is_what_a_command_line_and_a_run_folder_name_can_carry(written):
    """Python's float takes these, so a check by float() alone let LR=1_0 through to run folder lr1_0 (the grid
    then checked once more with its own pattern); the number kinds refuse them, and finetune.sh's LR argument is
    checked by the same kind."""
    from tupe_glue.finetune import check_run_settings
    from tupe_common.tunables import fits

    assert not fits("num", written) and not fits("num+", written)
    assert written != written.strip() or not fits("[num+]", f"1e-3,{written}")  # a list splits at spaces
    with pytest.raises(UsageError, match="LR must be a positive number"):
        check_run_settings([written], ["1"])


@pytest.mark.parametrize("written", ["2e-5", "0.5", ".5", "5.", "1E+3", "3"])
def test_decimal_numbers_fit(written):
    from tupe_glue.finetune import check_run_settings
    from tupe_common.tunables import fits

    assert fits("num+", written) and fits("num", "-" + written)
    check_run_settings([written], ["-1"])  # no error: a positive LR, a whole seed


def test_a_number_keeps_its_spelling_also_copied_and_pickled():
    import copy
    import pickle

    lr = Num("1e-4")
    assert lr == 0.0001 and lr * 2 == 0.0002 and f"{lr}" == "1e-4" and str(lr) == "1e-4"
    for again in (copy.deepcopy(lr), pickle.loads(pickle.dumps(lr))):
        assert type(again) is Num and again == lr and str(again) == "1e-4"


def test_an_empty_list_is_written_as_none_so_that_a_child_reads_it_back_and_not_the_default():
    """The study exports its settings to SLURM jobs and the C4 pipeline to its tasks as text: ORDER_WINDOWS=none
    (the stage off) written as an empty value would read back as the default, 3 6."""
    from tupe_study.settings import StudyConfig, read

    off = read({"PRESET": "tiny", "OUT": "x", "ORDER_WINDOWS": "none"})
    assert off.ORDER_WINDOWS == () and off.text("ORDER_WINDOWS") == "none"
    assert read({"PRESET": "tiny", "OUT": "x", **off.texts()}) == off
    assert StudyConfig.read({**off.texts(), "ORDER_WINDOWS": off.text("ORDER_WINDOWS")}).ORDER_WINDOWS == ()


@dataclass(frozen=True)
class Toy(Settings):
    RENAMED = {"OLD_N": "N"}

    N: int = setting("4", "a count", "int1")
    RATE: Optional[float] = setting("auto", "a rate", "auto/num+")
    FLAG: bool = setting("0", "a switch", "0/1")
    LRS: Tuple[float, ...] = setting("1e-5 2e-5", "LRs", "[num+]")
    NAME: str = setting("x", "free text")


def test_a_settings_class_converts_and_checks_every_field_from_text_and_from_values():
    toy = Toy()
    assert (toy.N, toy.RATE, toy.FLAG, toy.LRS, toy.NAME) == (4, None, False, (1e-5, 2e-5), "x")
    assert Toy(N="7", RATE="0.5", FLAG="1").N == 7 and Toy(RATE="0.5").RATE == 0.5 and Toy(FLAG="1").FLAG is True
    assert dataclasses.replace(toy, N=9).N == 9  # a value of its kind passes as it is
    typed = dataclasses.replace(toy, RATE=0.1, LRS=(1e-3, Num("2e-5")), FLAG=1)  # not through text: as given
    assert type(typed.RATE) is float and typed.LRS == (1e-3, 2e-5) and str(typed.LRS[1]) == "2e-5"
    assert typed.FLAG is True and typed.text("LRS") == "0.001 2e-5"
    for change, line in ((dict(N=0), "N must be a positive whole number, not '0'"),
                         (dict(N="many"), "N must be a positive whole number, not 'many'"),
                         (dict(RATE="-1"), "RATE must be auto or a number > 0, not '-1'"),
                         (dict(FLAG="yes"), "FLAG must be 0 or 1, not 'yes'"),
                         (dict(RATE=-1.5), "RATE must be auto or a number > 0, not '-1.5'"),
                         (dict(N=2.0), "N must be a positive whole number, not '2.0'"),
                         (dict(LRS=(1e-3, -1)), "LRS must be a list (spaces or commas) of which each is a number > 0, "
                                                "not '-1' (in '0.001 -1')"),
                         (dict(LRS="1e-3,abc"), "LRS must be a list (spaces or commas) of which each is a number > 0, "
                                                "not 'abc' (in '1e-3,abc')")):
        with pytest.raises(UsageError) as refused:
            dataclasses.replace(toy, **change)
        assert str(refused.value) == line


def test_reading_takes_a_non_empty_environment_value_else_the_default_and_old_names_with_a_warning():
    said = []
    toy = Toy.read({"N": "", "RATE": "2", "OLD_N": "5", "UNRELATED": "1"}, said.append)
    assert (toy.N, toy.RATE) == (5, 2.0)
    assert said == ["warning: OLD_N is a deprecated name of N: set N=5 instead"]
    assert Toy.names() == ["N", "RATE", "FLAG", "LRS", "NAME", "OLD_N"]
    assert toy.texts() == {"N": "5", "RATE": "2", "FLAG": "0", "LRS": "1e-5 2e-5", "NAME": "x"}


def classes():
    from tupe_glue.finetune import FinetuneConfig
    from tupe_glue.grid import GridConfig
    from tupe_pretrain.pretrain import PretrainConfig

    return [PretrainConfig, FinetuneConfig, GridConfig]


@pytest.mark.parametrize("cls", classes(), ids=lambda c: c.__name__)
def test_every_field_is_typed_as_its_kind_makes_it(cls):
    """The annotation says what the kind makes of the default and of every other value the kind takes: a field
    annotated int holds an int, Optional[...] may hold None (auto), and a kind with auto is Optional."""
    hints = typing.get_type_hints(cls)
    wrong = []
    for f in dataclasses.fields(cls):
        hint, value, kind = hints[f.name], getattr(cls(), f.name), f.metadata["kind"]
        allowed = typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)
        allowed = tuple(typing.get_origin(a) or a for a in allowed)
        optional = type(None) in allowed
        if not isinstance(value, allowed) or optional != ("auto" in kind.split("/")):
            wrong.append((f.name, hint, value, kind))
    assert wrong == []


def test_pretraining_plans_from_typed_values_and_writes_them_as_given():
    from tupe_pretrain import pretrain

    run = pretrain.plan(pretrain.PretrainConfig(DATA="/data", SIZE="tiny", GPUS="0", MAX_SENTENCES="8"), environ={})
    c = run.config
    assert (c.GPUS, c.NPROC_PER_NODE, c.UPDATE_FREQ, c.TOTAL_UPDATES, c.MAX_POSITIONS) == (0, 1, 32, 1000000, 512)
    assert c.LR == 1e-4 and c.FP16 is False and c.ARCH == "tupe_r_tiny"
    args = pretrain.fairseq_args(run)
    assert args[args.index("--lr") + 1] == "1e-4" and args[args.index("--update-freq") + 1] == "32"
    with pytest.raises(UsageError, match="^MAX_SENTENCES must be a positive whole number, not '0'$"):
        pretrain.PretrainConfig(MAX_SENTENCES=0)


def test_a_pretraining_records_the_settings_that_define_it_and_mlm_runs_no_electra_setting():
    """SAVE_DIR/settings.json's names (a rerun with other values is refused): the recipe's, and ELECTRA's three only
    for ELECTRA runs, so an MLM run's record is as it was before ELECTRA existed; VARIANT, recorded since, is not
    compared with a record that lacks it (``added_names``: test_pretrain_plan)."""
    from tupe_pretrain.pretrain import PretrainConfig, added_names, recorded_names

    assert added_names() == ["VARIANT"]
    mlm = ["VARIANT", "ARCH", "TOKENS_PER_SAMPLE", "MAX_POSITIONS", "SAMPLE_BREAK_MODE", "MASK_PROB", "TOTAL_UPDATES", "WARMUP",
           "LR", "END_LR", "ADAM_BETAS", "ADAM_EPS", "WEIGHT_DECAY", "CLIP_NORM", "DROPOUT", "ATTENTION_DROPOUT", "SEED"]
    assert sorted(recorded_names(PretrainConfig())) == sorted(mlm)
    assert sorted(recorded_names(PretrainConfig(OBJECTIVE="electra"))) == sorted(
        mlm + ["OBJECTIVE", "GENERATOR_SIZE_DIVISOR", "DISC_WEIGHT"])
