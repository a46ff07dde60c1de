"""Step 3: extracted text -> fairseq mmap binary (``PREFIX.bin`` + ``PREFIX.idx``), many workers.

Byte-identical to the standard route (``spm_encode --output_format=piece`` then
``fairseq-preprocess --only-source --srcdict dict.txt --dataset-impl mmap``): every input line
becomes its sentencepiece ids mapped to fairseq ids (:func:`tupe_preprocess.spm_dict.spm_to_fairseq_ids`,
no string round trip) plus ``</s>`` (2); an empty line (a document separator) becomes just ``</s>``,
as fairseq's binarizer does. Token dtype as fairseq picks it: uint16 while the dictionary has
fewer than 65500 entries. Lines end at ``\\n`` only, as for ``spm_encode`` (a ``\\r`` stays in the
line, where sentencepiece treats it as whitespace). One divergence of the standard route itself:
fairseq splits piece text at U+0085, which sentencepiece keeps as a piece; step 1 never emits it.

Streaming: the main process reads chunks of ``--chunk-bytes`` (cut at line ends), a pool of
``--workers`` processes encodes them, results are written in input order, at most
``--max-in-flight`` chunks are pending. Memory: O(workers x chunk) plus 4 bytes per line for the index.

Crash safety: output goes to ``PREFIX.bin.partial``/``PREFIX.idx.partial``; when both are complete
and fsync'ed, ``.bin`` is renamed first and ``.idx`` last (fairseq needs both, so a kill between the
renames leaves no loadable dataset), then ``PREFIX.done`` (JSON: input names/sizes, dict and model
hashes, output sizes) is written. A shard counts as finished only with a ``.done`` that matches the
inputs and the outputs; otherwise a rerun deletes ``.done``, ``.idx``, ``.bin`` (in that order) and
redoes it. An error (a full disk among them: one line naming ``PREFIX.bin``) removes both partial
files. A run holds ``PREFIX.lock`` (:mod:`tupe_common.lock`) while it looks at and writes PREFIX's files: a second
run on the same prefix (an array task resubmitted while the first still runs) is refused (exit 2, naming the lock); a
killed run's lock is taken over by the next run (at once on the same host, after 10 minutes on another).

Test hooks (environment): ``C4_BINARIZE_TEST_SLEEP`` seconds to sleep after each chunk;
``C4_BINARIZE_TEST_KILL=after_bin_rename`` SIGKILLs the process between the two renames.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import signal
import time
from typing import BinaryIO, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import sentencepiece as spm

from tupe_preprocess.c4_common import Progress, SettingsMismatch, check_settings, claim, open_binary
from tupe_common.errors import command_name, exit_main
from tupe_common.io import atomic_open, file_hash, read_json, fsync_dir, fsync_file, raise_if_full, remove_if_exists
from tupe_common.jobs import cores
from tupe_common.lock import LockHeld, hold
from tupe_common.log import get_logger
from tupe_common.mmap_index import token_dtype_for, write_index
from tupe_common.ordered_pool import OrderedPool
from tupe_preprocess.fairseq_dict import FairseqDict
from tupe_preprocess.spm_dict import check_dict, id_offset, spm_to_fairseq_ids
from tupe_common.io import need

PROG = "c4_binarize"
log = get_logger(PROG)
EOS = 2

# ---------------------------------------------------------------- encoding (runs in the workers)

_SP: Optional[spm.SentencePieceProcessor] = None
_OFFSET = 0
_UNK = 0
_DTYPE: type = np.uint16
_MAX_LINE = 0  # tokens per line including </s>; 0: no limit
_WORD_START = np.zeros(0, dtype=bool)  # per spm id: the piece starts a word ("▁...")


def _init_worker(model: str, dtype_name: str, max_line: int = 0) -> None:
    # Pool workers need no parent-death watchdog: a SIGKILLed parent makes their next read hit the end of their
    # pipe and they exit (tupe_common.ordered_pool; tested).
    global _SP, _OFFSET, _UNK, _DTYPE, _MAX_LINE, _WORD_START
    _SP = spm.SentencePieceProcessor(model_file=model)
    _OFFSET, _UNK, _DTYPE = id_offset(_SP), _SP.unk_id(), np.dtype(dtype_name).type
    _MAX_LINE = max_line
    _WORD_START = np.array([_SP.id_to_piece(i).startswith("\u2581") for i in range(_SP.get_piece_size())])


def max_line_tokens(tokens_per_sample: int) -> int:
    """Longest line (tokens including its ``</s>``) that fits one ``masked_lm`` block.

    fairseq's ``masked_lm`` task builds blocks of ``tokens_per_sample - 1`` tokens (it prepends
    ``<s>`` to each), and in ``complete``/``complete_doc`` mode a line never spans two blocks: a longer
    line becomes a block of its own that is too long and is dropped by the size filter.
    """
    return 0 if tokens_per_sample <= 0 else tokens_per_sample - 1


def split_long_lines(flat: np.ndarray, sizes: np.ndarray, max_line: int,
                     word_start: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int]:
    """Cut every line longer than ``max_line`` (sizes count the final ``</s>``) into pieces that fit.

    Each piece holds at most ``max_line - 1`` of the line's tokens plus a ``</s>``; a cut goes at the
    last word start (a piece beginning with ``▁``) in the final quarter of the allowed span, else
    mid-word. Returns (new flat ids, new sizes, number of lines that were split). The ``</s>``
    inserted is the line's own last id (the caller rewrites every line end to fairseq's ``</s>``).
    """
    if max_line <= 1 or not len(sizes) or int(sizes.max()) <= max_line:
        return flat, sizes, 0
    if max_line < 8:
        raise ValueError(f"--tokens-per-sample {max_line + 1} is too small to split lines into")
    ends = np.cumsum(sizes)
    out_ids, out_sizes, split = [], [], 0
    start = 0
    window = max(1, (max_line - 1) // 4)
    for end, size in zip(ends.tolist(), sizes.tolist()):
        if size <= max_line:
            out_ids.append(flat[start:end])
            out_sizes.append(size)
        else:
            split += 1
            body, eos = flat[start:end - 1], flat[end - 1:end]
            pos = 0
            while pos < len(body):
                cut = min(pos + max_line - 1, len(body))
                if cut < len(body):
                    starts = np.flatnonzero(word_start[body[cut - window + 1:cut + 1]])
                    if len(starts):
                        cut = cut - window + 1 + int(starts[-1])
                out_ids += [body[pos:cut], eos]
                out_sizes.append(cut - pos + 1)
                pos = cut
        start = end
    return np.concatenate(out_ids), np.asarray(out_sizes, dtype=np.int32), split


def _encode_lines(lines: List[str]) -> Tuple[np.ndarray, np.ndarray]:
    """sentencepiece ids of ``lines`` each followed by spm's ``</s>``: (flat ids, per-line sizes)."""
    assert _SP is not None
    try:  # sentencepiece >= 0.2.1: one numpy array per line, no Python ints
        arrays = _SP.encode(lines, return_type="numpy", add_eos=True, num_threads=1)
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int32), \
            np.fromiter(map(len, arrays), dtype=np.int32, count=len(arrays))
    except (ValueError, TypeError):
        ids = _SP.encode(lines, out_type=int, add_eos=True, num_threads=1)
        sizes = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(sizes.sum())), sizes


def encode_chunk(buf: bytes) -> Tuple[bytes, np.ndarray, int, int]:
    """Lines of ``buf`` -> (token bytes, int32 sizes, number of ``<unk>``, number of lines split)."""
    lines = buf.decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    flat, sizes = _encode_lines(lines)
    flat, sizes, split = split_long_lines(flat, sizes, _MAX_LINE, _WORD_START)
    ids = spm_to_fairseq_ids(flat, _OFFSET, _UNK)
    ids[np.cumsum(sizes) - 1] = EOS  # the appended spm </s> -> fairseq </s>
    return ids.astype(_DTYPE).tobytes(), sizes, int(np.count_nonzero(ids == 3)), split


# ---------------------------------------------------------------- reading / writing


Chunk = Tuple[str, int, bytes]  # (its file, the line number it starts at, the bytes)


def read_chunks(paths: Sequence[str], chunk_bytes: int) -> Iterator[Chunk]:
    """Chunks of about ``chunk_bytes`` that end at a line end (each file chunked separately)."""
    for path in paths:
        line = 1
        with open_binary(path) as f:
            while True:
                buf = f.read(chunk_bytes)
                if not buf:
                    break
                if not buf.endswith(b"\n"):
                    buf += f.readline()
                yield path, line, buf
                line += buf.count(b"\n")


def not_utf8(e: UnicodeDecodeError, chunk: Chunk) -> ValueError:
    """The error of a chunk that is not UTF-8, naming its file and line (the decoder knows only the chunk's byte)."""
    path, line, buf = chunk
    at, start = line + buf.count(b"\n", 0, e.start), buf.rfind(b"\n", 0, e.start) + 1
    return ValueError(f"{path}:{at}: not UTF-8 ({e.reason} at byte {e.start - start + 1} of the line); step 1 "
                      "writes UTF-8: re-extract the shard, or fix the line")


def identity(inputs: Sequence[str], model: str, dict_path: str) -> dict:
    return {
        "inputs": [{"name": os.path.basename(p), "bytes": os.path.getsize(p)} for p in inputs],
        "spm_sha1": file_hash(model, "sha1"),
        "dict_sha1": file_hash(dict_path, "sha1"),
    }


WRITING = ".writing"  # PREFIX.writing: this command is writing PREFIX's files; removed once PREFIX.done is written


def finished(prefix: str, ident: dict) -> Tuple[bool, str]:
    """(True, '') if PREFIX is complete for these inputs, else (False, why)."""
    try:
        with open(prefix + ".done") as f:
            done = json.load(f)
    except FileNotFoundError:
        if os.path.exists(prefix + ".bin") or os.path.exists(prefix + ".idx"):
            return False, "incomplete (outputs without .done)"
        if os.path.exists(prefix + ".bin.partial") or os.path.exists(prefix + ".idx.partial"):
            return False, "incomplete (partial output of an interrupted run)"
        return False, ""
    except ValueError:
        return False, "incomplete (unreadable .done)"
    if done.get("identity") != ident:
        return False, "stale (inputs, model or dict.txt changed)"
    for ext in ("bin", "idx"):
        p = f"{prefix}.{ext}"
        if not os.path.exists(p) or os.path.getsize(p) != done.get(f"{ext}_bytes"):
            return False, f"incomplete ({ext} missing or wrong size)"
    return True, ""


def binarize(inputs: Sequence[str], prefix: str, model: str, dict_path: str, workers: int = 0,
             chunk_bytes: int = 1 << 20, max_in_flight: int = 0, progress_seconds: float = 30.0,
             force: bool = False, tokens_per_sample: int = 512) -> Optional[dict]:
    """Binarize ``inputs`` (concatenated) into ``prefix``; returns a summary, None if skipped.

    Lines longer than a ``masked_lm`` block of ``tokens_per_sample`` are split (0: never split).
    Raises :class:`SettingsMismatch` if ``prefix`` is complete but was made with another
    ``tokens_per_sample`` (unless ``force``), :class:`LockHeld` if another live run holds ``PREFIX.lock``.
    """
    workers = workers or cores()  # respects SLURM/cgroup CPU binding
    max_in_flight = max_in_flight or 2 * workers
    # one run per PREFIX, from its first look at PREFIX's files: a second run (an array task resubmitted while the
    # first still writes) would write the same .partial files; LockHeld (exit 2) names the lock and the way out
    with hold(prefix + ".lock", PROG, say=log.info):
        ident = identity(inputs, model, dict_path)
        settings = {"tokens_per_sample": tokens_per_sample}
        theirs = [f"{prefix}.{ext}" for ext in ("bin", "idx") if os.path.exists(f"{prefix}.{ext}")]
        if theirs and not force and not os.path.exists(prefix + ".done") and not os.path.exists(prefix + WRITING):
            raise SettingsMismatch(f"{theirs[0]} exists without {prefix}.done or {prefix}{WRITING} (a file this "
                                   "command did not write, or a run of a version before 2026-12-07 cut short): pass "
                                   "--force to rewrite it, or move it away")
        ok, why = finished(prefix, ident)
        if ok and not force:
            check_settings(f"{prefix}.bin/.idx", (read_json(prefix + ".done") or {}).get("settings"), settings)
            log.info(f"skip: {prefix}.bin/.idx complete ({prefix}.done)")
            return None
        if why:
            log.info(f"{prefix}: {why}; redoing")
        # marked before any file of PREFIX changes, so that a rerun knows them as ours (taken back on a failure
        # that leaves no .bin/.idx)
        with claim(prefix + WRITING, settings, [f"{prefix}.{ext}" for ext in ("bin", "idx")]):
            for ext in ("done", "idx", "bin", "bin.partial", "idx.partial", "done.partial"):
                remove_if_exists(f"{prefix}.{ext}")
            summary = _run(inputs, prefix, model, dict_path, workers, chunk_bytes, max_in_flight, progress_seconds,
                           tokens_per_sample)
        summary["identity"], summary["settings"] = ident, settings
        with atomic_open(prefix + ".done") as f:
            json.dump(summary, f, indent=1)
        remove_if_exists(prefix + WRITING)
        return summary


def _run(inputs: Sequence[str], prefix: str, model: str, dict_path: str, workers: int,
         chunk_bytes: int, max_in_flight: int, progress_seconds: float, tokens_per_sample: int) -> dict:
    sp = spm.SentencePieceProcessor(model_file=model)
    id_offset(sp)  # fail early with a clear message if the special ids are not 0..k-1
    dictionary = FairseqDict.load(dict_path)
    check_dict(sp, dictionary.symbols[dictionary.nspecial:], dict_path, model)
    dtype = token_dtype_for(len(dictionary))
    init_args = (model, np.dtype(dtype).name, max_line_tokens(tokens_per_sample))
    test_sleep = float(os.environ.get("C4_BINARIZE_TEST_SLEEP", "0") or 0)
    bin_tmp, idx_tmp = prefix + ".bin.partial", prefix + ".idx.partial"
    sizes: List[np.ndarray] = []
    stats = collections.Counter()
    in_bytes = sum(os.path.getsize(p) for p in inputs)
    prog = Progress(PROG, progress_seconds)

    def write(out: BinaryIO, result: Tuple[bytes, np.ndarray, int, int], nbytes: int) -> None:
        data, sz, unk, split = result
        out.write(data)
        sizes.append(sz)
        stats.update(sequences=len(sz), tokens=len(data) // np.dtype(dtype).itemsize, unk=unk, split_lines=split,
                     read_bytes=nbytes, blank=int(np.count_nonzero(sz == 1)))
        prog.maybe(lambda t: f"{prefix}: {stats['sequences']} lines, {stats['read_bytes'] / 1e6:.1f}"
                             f"/{in_bytes / 1e6:.1f}MB in, {stats['read_bytes'] / 1e6 / t:.1f}MB/s")
        if test_sleep:
            time.sleep(test_sleep)

    try:
        with open(bin_tmp, "wb") as out:
            sent: collections.deque = collections.deque()  # the chunks sent and not yet written, in order
            try:
                if workers <= 1:
                    _init_worker(*init_args)
                    for chunk in read_chunks(inputs, chunk_bytes):
                        sent.append(chunk)
                        write(out, encode_chunk(chunk[2]), len(sent.popleft()[2]))
                else:
                    def chunks() -> Iterator[bytes]:
                        for chunk in read_chunks(inputs, chunk_bytes):
                            sent.append(chunk)
                            yield chunk[2]

                    with OrderedPool(workers, encode_chunk, _init_worker, init_args) as pool:  # a stop or error ends it
                        for result in pool.imap(chunks(), max_in_flight):
                            write(out, result, len(sent.popleft()[2]))
            except UnicodeDecodeError as e:  # the oldest chunk not written is the one that failed
                raise not_utf8(e, sent[0]) from None
            out.flush()
            os.fsync(out.fileno())
        write_index(idx_tmp, dtype, sizes)
        fsync_file(idx_tmp)
    except BaseException as e:  # a full disk among them: the shard's partial files would keep its space
        for p in (bin_tmp, idx_tmp):
            remove_if_exists(p)
        raise_if_full(e, prefix + ".bin")
        raise
    if stats["sequences"] == stats["blank"]:
        for p in (bin_tmp, idx_tmp):
            remove_if_exists(p)
        raise ValueError(f"no text in {', '.join(inputs)} ({stats['sequences']} lines, all empty): nothing to "
                         "train on; check step 1's summary for this shard (re-extract it, or leave it out)")
    os.replace(bin_tmp, prefix + ".bin")
    if os.environ.get("C4_BINARIZE_TEST_KILL") == "after_bin_rename":
        os.kill(os.getpid(), signal.SIGKILL)
    os.replace(idx_tmp, prefix + ".idx")
    fsync_dir(os.path.dirname(os.path.abspath(prefix)))
    seconds = prog.elapsed()
    return {
        "inputs": list(inputs), "sequences": stats["sequences"], "blank_lines": stats["blank"],
        "split_lines": stats["split_lines"], "max_line_tokens": max_line_tokens(tokens_per_sample),
        "tokens": stats["tokens"], "unk": stats["unk"], "input_bytes": in_bytes,
        "bin_bytes": os.path.getsize(prefix + ".bin"), "idx_bytes": os.path.getsize(prefix + ".idx"),
        "dtype": np.dtype(dtype).name, "workers": workers, "seconds": round(seconds, 3),
        "mb_per_s": round(in_bytes / 1e6 / max(seconds, 1e-9), 2),
    }


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m tupe_preprocess.c4 binarize``; ``tupe_preprocess.c4.pipeline`` reads its defaults."""
    ap = argparse.ArgumentParser(prog=command_name("python -m tupe_preprocess.c4") + " binarize", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="extracted text file(s) (.txt/.txt.gz), concatenated in order")
    ap.add_argument("--out", required=True, help="output prefix, e.g. bin/c4-train.00000 -> .bin/.idx/.done")
    ap.add_argument("--spm-model", required=True)
    ap.add_argument("--dict", required=True, help="dict.txt of step 2")
    ap.add_argument("--workers", type=int, default=0, help="encoding processes (0: all usable cores)")
    ap.add_argument("--chunk-bytes", type=int, default=1 << 20, help="bytes of text per work item")
    ap.add_argument("--max-in-flight", type=int, default=0, help="pending chunks (0: 2 x workers)")
    ap.add_argument("--progress-seconds", type=float, default=30.0, help="progress line interval (0: off)")
    ap.add_argument("--tokens-per-sample", type=int, default=512,
                    help="the --tokens-per-sample of pre-training: lines longer than one block (this minus 1, "
                         "counting </s>) are split so that no text is dropped (0: never split)")
    ap.add_argument("--force", action="store_true", help="redo even if the shard is complete")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)

    for p in [args.spm_model, args.dict, *args.inputs]:
        need(p)  # missing, or a folder: one line naming it, exit 1 (tupe_common.errors.exit_main)
    try:
        s = binarize(args.inputs, args.out, args.spm_model, args.dict, args.workers, args.chunk_bytes,
                     args.max_in_flight, args.progress_seconds, args.force, args.tokens_per_sample)
    except (SettingsMismatch, LockHeld) as e:
        log.error(f"{e}")
        return 2
    except (ValueError, RuntimeError, UnicodeDecodeError) as e:
        log.error(f"{e}")
        return 1
    if s is not None:
        keys = ("sequences", "blank_lines", "split_lines", "max_line_tokens", "tokens", "unk", "input_bytes", "bin_bytes", "dtype",
                "workers", "seconds", "mb_per_s")
        log.info(f"summary: {args.out}: " + " ".join(f"{k}={s[k]}" for k in keys))
    return 0


if __name__ == "__main__":
    exit_main(main, "c4_binarize")
