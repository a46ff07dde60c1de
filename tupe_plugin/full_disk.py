"""A full disk (or quota) while fairseq saves a checkpoint: one line naming the file, never an earlier checkpoint lost.

fairseq writes a checkpoint as ``checkpoint_E_U.pt.tmp``, renamed when whole, then copies it over
``checkpoint_last.pt`` (and ``checkpoint_best.pt``) in place: a full disk left the ``.tmp`` filling the disk,
could leave ``checkpoint_last.pt`` cut short (the previous one overwritten), and ended in fairseq's traceback. Here
the save's partial file is removed, the copy is written under a temporary name and renamed when whole (so the
previous ``checkpoint_last.pt`` stays), and the training process ends with ``fairseq-train: error: PATH: no space
left on its disk while writing it ...`` and exit 1; the rerun resumes from the last checkpoint that was saved whole.
fairseq's retries of a failed save (3 attempts, 2.5 s apart) wrote into the same open file after the failed
attempt's bytes; here each attempt writes a fresh file, and a full disk is not retried.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any

import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

from tupe_common.fairseq_exit import ERROR_FILE_ENV, RESUME_TAIL, TRAIN_ERROR
from tupe_common.io import DiskFullError, full_disk, raise_if_full, remove_if_exists

_save = checkpoint_utils.torch_persistent_save
_copy = PathManager.copy
ATTEMPTS, RETRY_S = 3, 2.5  # fairseq's: a save that fails for another reason (a network file system) is tried again
logger = logging.getLogger(__name__)


def torch_persistent_save(obj: Any, filename: str, async_write: bool = False) -> None:
    """fairseq's save, with a fresh ``filename.tmp`` for each of its 3 attempts (fairseq retried into the same open
    file after a failed write, so a retry that succeeded left the first attempt's bytes before the checkpoint: a file
    torch cannot load, renamed as whole) and none after a full disk (it stays full: one line, at once)."""
    if async_write or not PathManager.supports_rename(filename):  # written in place: fairseq's own path
        try:
            return _save(obj, filename, async_write)
        except Exception as e:  # noqa: BLE001  torch's zip writer reports a full disk in its own error type
            if full_disk(e) is None:
                raise
            remove_if_exists(filename)  # what there is of it is partial
            raise_if_full(e, filename)
    tmp = filename + ".tmp"
    for attempt in range(ATTEMPTS):
        try:
            with PathManager.open(tmp, "wb") as f:
                torch.save(obj, f)
            break
        except Exception as e:  # noqa: BLE001
            with contextlib.suppress(OSError):  # the save's error is the one to say
                remove_if_exists(tmp)
            raise_if_full(e, filename)
            if attempt == ATTEMPTS - 1:
                raise
            logger.warning(f"saving {filename} failed ({e}); trying again in {RETRY_S} s")
            time.sleep(RETRY_S)
    PathManager.rename(tmp, filename)


def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """fairseq's copy of a saved checkpoint to checkpoint_last.pt (a local path): into ``dst.tmp``, renamed when
    whole, so a full disk leaves the previous ``dst`` as it was."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(dst_path))) or (os.path.exists(dst_path) and not overwrite):
        return _copy(src_path, dst_path, overwrite)
    tmp = dst_path + ".tmp"
    try:
        _copy(src_path, tmp, True)
    except Exception as e:  # noqa: BLE001
        remove_if_exists(tmp)
        raise_if_full(e, dst_path)
        raise
    os.replace(tmp, dst_path)
    return True


def _excepthook(kind, error, tb) -> None:
    if isinstance(error, DiskFullError):
        line = f"{TRAIN_ERROR}{error}{RESUME_TAIL} from the last checkpoint saved whole\n"
        sys.stdout.flush()
        sys.stderr.write(line)
        sys.stderr.flush()
        if os.environ.get(ERROR_FILE_ENV):
            try:
                with open(os.environ[ERROR_FILE_ENV], "a", encoding="utf-8") as f:
                    f.write(line)
            except OSError:  # that disk full too: the line above is all there is
                pass
        return
    _previous_hook(kind, error, tb)


_previous_hook = sys.excepthook


def install() -> None:
    """Put the two writers and the error line in place (once per process)."""
    global _previous_hook
    if checkpoint_utils.torch_persistent_save is torch_persistent_save:
        return
    checkpoint_utils.torch_persistent_save = torch_persistent_save
    PathManager.copy = staticmethod(copy)
    _previous_hook = sys.excepthook
    sys.excepthook = _excepthook
