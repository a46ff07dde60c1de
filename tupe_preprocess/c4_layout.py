"""Step 4: arrange binarized shards as ``DATA_BIN/shardK/{train,valid}.{bin,idx}`` + ``dict.txt``.

``fairseq-train DATA_BIN/shard0:DATA_BIN/shard1:...`` then reads shard ``(epoch - 1) % N`` in epoch
``epoch`` (fairseq's sharded-epoch convention), for every split, so each shard gets the *same*
validation set (one binarized C4 validation prefix, linked into every shard): validation losses stay
comparable across epochs. ``dict.txt`` is copied (fairseq reads it from the first shard).

Files are hard-linked (no extra space; falls back to symlinks across file systems), or symlinked /
copied with ``--link``. Each file is placed under a temporary name and renamed, ``.idx`` after
``.bin``. Only prefixes with a ``.done`` marker from step 3 that matches their sizes and ``--dict`` (the
dictionary's SHA-1 it records) are accepted, each once: the ``--valid`` prefix is none of the train ones.
Also writes ``DATA_BIN/shards.tsv`` (shard -> source prefix), ``DATA_BIN/data_path.txt`` (the shard
folders colon-joined, *relative to DATA_BIN*, so a moved or copied DATA_BIN reads its own files) and
``DATA_BIN/layout.json`` (the dictionary's entries, size and SHA-256, the shard names). Train with
``DATA=DATA_BIN train_scripts/pretrain.sh``, which checks both at start (``python -m tupe_preprocess.c4_data``,
which also prints the absolute path for ``fairseq-train``). A run holds ``DATA_BIN/.run.lock``
(:mod:`tupe_common.lock`) while it writes: a second run on the same DATA_BIN (a resubmitted task with other shards)
exits 2, naming the lock, instead of mixing the two runs' shards.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
from typing import Dict, List, Optional, Sequence

from tupe_common.io import atomic_open, atomic_path, file_hash, need, remove_if_exists, write_data_path, write_json
from tupe_common.log import get_logger
from tupe_common.errors import UsageError, command_name, exit_main, message
from tupe_common.lock import folder_lock, hold

LINK_MODES = ("hardlink", "symlink", "copy")  # how the shards' files reach DATA_BIN
DICT_HASH = "sha1"  # as step 3 records the dictionary in PREFIX.done (c4_binarize.identity: identity.dict_sha1)

PROG = "c4_layout"
log = get_logger(PROG)


def check_done(prefix: str, dict_path: str, dict_sha1: str) -> None:
    """Refuse ``prefix`` unless step 3 finished it (``PREFIX.done``, the sizes of ``.bin``/``.idx``) with the
    dictionary ``dict_path`` (SHA-1 ``dict_sha1``): binaries of another dictionary hold other token ids."""
    try:
        with open(prefix + ".done") as f:
            done = json.load(f)
    except (FileNotFoundError, ValueError):
        raise ValueError(f"{prefix}: not finished by step 3 (no valid {prefix}.done)") from None
    for ext in ("bin", "idx"):
        p = f"{prefix}.{ext}"
        if not os.path.isfile(p) or os.path.getsize(p) != done.get(f"{ext}_bytes"):
            raise ValueError(f"{prefix}: {p} missing or not the size recorded in {prefix}.done")
    # step 3 redoes a prefix whose recorded identity differs from its inputs', so re-running it is the fix
    fix = f"re-run the binarize step with --dict {dict_path} (it redoes such a prefix; tupe-c4 run: STEPS=34)"
    recorded = (done.get("identity") or {}).get("dict_sha1")
    if recorded is None:
        raise ValueError(f"{prefix}: {prefix}.done records no dictionary hash (identity.dict_sha1); {fix}")
    if recorded != dict_sha1:
        raise ValueError(f"{prefix}: binarized with another dictionary ({prefix}.done records dict_sha1 {recorded}, "
                         f"{dict_path} has {dict_sha1}); {fix}")


def check_distinct(valid: str, train: Sequence[str]) -> None:
    """Refuse the validation prefix among the train ones (validation documents trained on) and a train prefix given
    twice (trained twice as often), however their paths are spelled: a UsageError (exit 2)."""
    seen: Dict[str, str] = {}  # real path -> the prefix as given
    for prefix in train:
        real = os.path.realpath(prefix)
        if real in seen:
            raise UsageError(f"train prefix {prefix} is given twice (also as {seen[real]}); give each shard once")
        seen[real] = prefix
    real = os.path.realpath(valid)
    if real in seen:
        raise UsageError(f"--valid {valid} is also a train prefix ({seen[real]}); binarize the validation texts to "
                         "a prefix of their own")


class Placer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.warned = False

    def same(self, src: str, dst: str) -> bool:
        if not os.path.exists(dst):
            return False
        if self.mode == "copy":
            return os.path.getsize(src) == os.path.getsize(dst) and not os.path.islink(dst)
        return os.path.samefile(src, dst)

    def place(self, src: str, dst: str) -> None:
        with atomic_path(dst, fsync=False) as tmp:  # a link has no data to flush
            mode = self.mode
            if mode == "hardlink":
                try:
                    os.link(src, tmp)
                except OSError as e:
                    if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                        raise
                    if not self.warned:
                        log.warning(f"cannot hard-link ({e.strerror}); using symlinks")
                        self.warned = True
                    mode = self.mode = "symlink"
            if mode == "symlink":
                os.symlink(os.path.relpath(os.path.abspath(src), os.path.dirname(os.path.abspath(dst))), tmp)
            elif mode == "copy":
                shutil.copyfile(src, tmp)

    def place_dataset(self, src_prefix: str, dst_prefix: str) -> bool:
        """Place ``.bin`` then ``.idx``; returns False if both were already in place."""
        pairs = [(f"{src_prefix}.{e}", f"{dst_prefix}.{e}") for e in ("bin", "idx")]
        if all(self.same(s, d) for s, d in pairs):
            return False
        remove_if_exists(dst_prefix + ".idx")  # never an old .idx beside a new .bin
        for s, d in pairs:
            self.place(s, d)
        return True


def layout(data_bin: str, dict_path: str, valid: str, train: Sequence[str], link: str = "hardlink") -> List[str]:
    need(dict_path)
    need(data_bin, "out")
    check_distinct(valid, train)
    dict_sha1 = file_hash(dict_path, DICT_HASH)
    for p in [*train, valid]:
        check_done(p, dict_path, dict_sha1)
    with hold(folder_lock(data_bin), PROG, say=log.info):  # one run per DATA_BIN: two would mix their shard lists
        return _arrange(data_bin, dict_path, valid, train, link)


def _arrange(data_bin: str, dict_path: str, valid: str, train: Sequence[str], link: str) -> List[str]:
    """``layout``'s work, with DATA_BIN's lock held."""
    os.makedirs(data_bin, exist_ok=True)
    placer = Placer(link)
    shards, changed = [], 0
    for k, prefix in enumerate(train):
        d = os.path.join(data_bin, f"shard{k}")
        os.makedirs(d, exist_ok=True)
        with atomic_path(os.path.join(d, "dict.txt")) as tmp:
            shutil.copyfile(dict_path, tmp)
        changed += placer.place_dataset(prefix, os.path.join(d, "train"))
        changed += placer.place_dataset(valid, os.path.join(d, "valid"))
        shards.append(d)
    extra = sorted(n for n in os.listdir(data_bin) if n.startswith("shard") and n[5:].isdigit()
                   and int(n[5:]) >= len(train))
    if extra:
        log.warning(f"{data_bin} has shard folders beyond shard{len(train) - 1} from an earlier "
                  f"run ({', '.join(extra[:3])}...); they are not in data_path.txt")
    with atomic_open(os.path.join(data_bin, "shards.tsv")) as f:
        f.write("shard\ttrain\tvalid\n")
        for k, prefix in enumerate(train):
            f.write(f"shard{k}\t{os.path.abspath(prefix)}\t{os.path.abspath(valid)}\n")
    write_data_path(data_bin, shards)
    with open(dict_path, encoding="utf-8") as f:
        entries = sum(1 for line in f if line.strip())
    write_json(os.path.join(data_bin, "layout.json"), {
        "shards": [os.path.basename(s) for s in shards],
        "dictionary": {"entries": entries, "bytes": os.path.getsize(dict_path), "sha256": file_hash(dict_path)},
    })
    log.info(f"summary: {len(shards)} shards in {data_bin} ({changed} datasets placed, "
              f"{2 * len(shards) - changed} already in place; link={placer.mode})")
    return shards


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m tupe_preprocess.c4 layout``; ``tupe_preprocess.c4.pipeline`` reads its defaults."""
    ap = argparse.ArgumentParser(prog=command_name("python -m tupe_preprocess.c4") + " layout", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("train", nargs="+", help="step-3 prefixes of the train shards, in shard order")
    ap.add_argument("--data-bin", required=True)
    ap.add_argument("--dict", required=True, help="dict.txt of step 2")
    ap.add_argument("--valid", required=True, help="step-3 prefix of the validation set")
    ap.add_argument("--link", choices=LINK_MODES, default="hardlink")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        shards = layout(args.data_bin, args.dict, args.valid, args.train, args.link)
    except UsageError as e:
        log.error(message(e))
        return 2
    except (ValueError, OSError) as e:
        log.error(message(e))
        return 1
    print(":".join(os.path.abspath(s) for s in shards))
    return 0


if __name__ == "__main__":
    exit_main(main, "c4_layout")
