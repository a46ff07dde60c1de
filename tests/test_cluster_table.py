"""Issue 62 item 5, "tested as a cluster would use it": which test walks each long-running entry point through each of
a cluster's cases, as a table that is checked, so that a case without a test is a stated gap, not a forgotten one.

Cases: ``sigterm+rerun`` (SIGTERM mid-run: the last line, exit 143, no process left; then the rerun), ``second run``
(a second run into the same folder at once: refused at once, exit 2, one line naming the holder's pid and host),
``full disk`` (ENOSPC while writing: one line naming what was being written, exit 1, only that removed; the rerun).
A cell is the tests (``tests/FILE.py::FUNCTION``; a parametrized test by its function's name) or None, with the
reason in GAPS. NOT_ASSERTED says what a cell's tests leave out of the case. Filling a gap means moving it from GAPS
to TABLE (the first test fails until both agree)."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Optional, Set, Tuple

TESTS = Path(__file__).resolve().parent
ENTRY_POINTS = ("pretrain", "finetune", "grid", "study", "c4", "glue-binarize", "gpu-study")
CASES = ("sigterm+rerun", "second run", "full disk")
Cell = Tuple[str, str]

STOP_SIGNALS = "tests/test_stop_signals.py"
GLUE_SCRIPTS = "tests/test_glue_scripts.py"
GLUE_PREPROCESS = "tests/test_glue_preprocess.py"
C4 = "tests/test_c4_pipeline.py"
PRETRAIN_STOP = f"{STOP_SIGNALS}::test_sigterm_saves_the_update_it_finished_and_the_rerun_resumes_from_it"
GRID_STOP = f"{GLUE_SCRIPTS}::test_sigterm_stops_the_grid_and_its_runs_and_the_rerun_matches_an_uninterrupted_run"
FINETUNE_FULL_SAVE = (f"{GLUE_SCRIPTS}::"
                      "test_a_full_disk_while_a_run_saves_its_checkpoint_fails_it_alone_and_the_rerun_matches")
GLUE_STOP = (f"{GLUE_PREPROCESS}::"
             "test_a_stop_mid_task_ends_the_pool_with_one_line_and_the_rerun_gives_an_uninterrupted_runs_files")

TABLE: Dict[Cell, Optional[Tuple[str, ...]]] = {
    ("pretrain", "sigterm+rerun"): (
        PRETRAIN_STOP,
        f"{STOP_SIGNALS}::test_sigterm_with_several_processes_names_the_checkpoint_the_rerun_resumes_from",
        "tests/test_torchrun_stop.py::test_a_stop_of_torchrun_alone_ends_with_the_line_and_128_plus_n",
        f"{STOP_SIGNALS}::test_ctrl_c_saves_the_update_it_finished",
        f"{STOP_SIGNALS}::test_sighup_after_the_terminal_closed_still_saves"),
    ("pretrain", "second run"): (PRETRAIN_STOP,),
    ("pretrain", "full disk"): (
        "tests/test_full_disk_pretrain.py::test_a_full_disk_while_saving_is_one_line_and_keeps_the_last_checkpoint",
        "tests/test_full_disk_pretrain.py::test_a_full_disk_with_several_processes_ends_with_the_ranks_line_and_the_"
        "rerun_resumes"),
    # finetune.sh as the grid's run: the SIGTERM passed on to it, its own last line, the rerun loss for loss
    ("finetune", "sigterm+rerun"): (
        GRID_STOP, f"{GLUE_SCRIPTS}::test_ctrl_c_ends_a_run_with_one_line_exit_130_and_nothing_a_rerun_trusts"),
    ("finetune", "second run"): (GRID_STOP,),
    ("finetune", "full disk"): (FINETUNE_FULL_SAVE,
                                f"{GLUE_SCRIPTS}::test_a_full_disk_while_a_run_writes_its_result_is_one_line_and_the_rerun_"
                                "writes_it_whole"),
    ("grid", "sigterm+rerun"): (GRID_STOP,),
    ("grid", "second run"): (
        GRID_STOP, f"{GLUE_SCRIPTS}::test_readers_beside_a_live_lock_and_a_grid_on_a_held_runs_refused"),
    ("grid", "full disk"): (FINETUNE_FULL_SAVE,),
    ("study", "sigterm+rerun"): (
        "tests/test_study.py::test_sigterm_stops_the_lanes_and_their_runs_and_the_rerun_matches_the_study",),
    ("study", "second run"): (
        "tests/test_study.py::test_sigterm_stops_the_lanes_and_their_runs_and_the_rerun_matches_the_study",
        "tests/test_study.py::test_tiny_study_one_run_per_folder_and_readers_beside_a_live_lock"),
    ("study", "full disk"): (
        "tests/test_study.py::test_a_full_disk_while_a_study_pre_trains_is_named_and_the_rerun_matches_the_study",),
    ("c4", "sigterm+rerun"): (
        f"{C4}::test_a_stop_mid_run_ends_the_pool_with_one_line_and_the_rerun_gives_the_same_bytes",
        f"{C4}::test_a_stop_while_extracting_is_one_line_and_the_rerun_gives_the_same_text"),
    ("c4", "second run"): (f"{C4}::test_a_second_run_into_a_held_out_dir_is_refused_at_once",),
    ("c4", "full disk"): (
        f"{C4}::test_a_full_disk_while_binarizing_is_one_line_and_the_rerun_gives_the_same_bytes",),
    ("glue-binarize", "sigterm+rerun"): (GLUE_STOP,),
    ("glue-binarize", "second run"): (GLUE_STOP,),
    ("glue-binarize", "full disk"): (
        f"{GLUE_PREPROCESS}::test_a_full_disk_mid_task_is_one_line_keeps_the_finished_task_and_the_rerun_completes",),
    ("gpu-study", "sigterm+rerun"): (
        "tests/test_gpu_study.py::test_sigterm_stops_every_pre_training_and_says_so_in_one_line",),
    ("gpu-study", "second run"): (
        "tests/test_gpu_study.py::test_sigterm_stops_every_pre_training_and_says_so_in_one_line",
        "tests/test_gpu_study.py::test_a_second_call_into_a_held_out_is_refused_at_once"),
    ("gpu-study", "full disk"): (
        "tests/test_gpu_study.py::test_a_full_disk_while_pre_training_names_the_file_and_keeps_what_finished",),
}

# Why a cell has no test (one line each): none left.
GAPS: Dict[Cell, str] = {}

# What a filled cell's tests leave out of the case.
NOT_ASSERTED: Dict[Cell, str] = {
    ("c4", "full disk"): "the binarize task's output only",
    ("glue-binarize", "full disk"): "the line names the task's output folder, not the file inside it",
    ("pretrain", "full disk"): ("one process: fairseq-train itself (the plugin), not pretrain.sh; the rerun with "
                                "several processes is checked by the update it reaches, not by its parameters"),
    ("c4", "sigterm+rerun"): ("the stop comes while the extract or the binarize task runs; during sentencepiece's "
                              "training the way it ends at once (tupe_common.process.call_in_fork) is tested alone, in "
                              "tests/test_stop_signals.py, not through the c4 command"),
    ("finetune", "sigterm+rerun"): ("finetune.sh alone is stopped by Ctrl-C (SIGINT) without a rerun; SIGTERM and the "
                                    "rerun reach it as the grid's run"),
    ("finetune", "full disk"): "the result's full disk replays fairseq-train's log in the test's process",
    ("grid", "full disk"): ("the grid's own lines name the failed run and its output (whose last line names the file), "
                            "not the file; the rerun is finetune.sh's (the grid's rerun: its SIGTERM test)"),
    ("gpu-study", "sigterm+rerun"): "no rerun after the stop (a call resumed on its carried data takes minutes)",
    ("gpu-study", "full disk"): ("no rerun: a call's pre-training is a study part, whose resume after a full disk "
                                 "the study's full-disk test checks loss for loss"),
}


def test_every_cell_is_tests_or_a_stated_gap() -> None:
    assert set(TABLE) == {(e, c) for e in ENTRY_POINTS for c in CASES}
    assert set(GAPS) == {cell for cell, tests in TABLE.items() if tests is None}
    assert all(reason.strip() for reason in GAPS.values())
    assert set(NOT_ASSERTED) <= {cell for cell, tests in TABLE.items() if tests}


def defined_tests(path: Path) -> Set[str]:
    """The names of the test functions defined at the top of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_named_test_exists() -> None:
    named = {ref for tests in TABLE.values() if tests for ref in tests}
    missing = []
    for ref in sorted(named):
        file, name = ref.split("::")
        path = TESTS.parent / file
        if not path.is_file() or name not in defined_tests(path):
            missing.append(ref)
    assert not missing, missing
