"""Step 2: train the sentencepiece model on a sample of lines drawn across extracted shards.

Sampling: ``--max-files K`` keeps K of the input files evenly spaced over the sorted list (stride),
then one reservoir sample of ``--sample-sentences`` non-empty lines is drawn over all their lines
(seeded; memory is bounded by the sample, not the input). Lines longer than
``--max-sentence-length`` bytes are not sampled (sentencepiece would drop them).

Training uses sentencepiece's default special ids (``<unk>=0 <s>=1 </s>=2``, no pad), so
:func:`tupe_preprocess.spm_dict.id_offset` holds and step 3 maps ids without strings. Outputs in
``--out-dir``: ``spm.model``, ``spm.vocab``, ``dict.txt`` (fairseq; written last, via
:func:`tupe_preprocess.spm_dict.write_fairseq_dict`), then ``settings.json`` (the training settings and
input file names; it marks the step finished). A rerun with the same settings skips; with other
settings (e.g. a trial vocabulary, then the full one) it refuses, naming them (exit 2), unless
``--force``; outputs without ``settings.json`` (an interrupted run) are redone. A run holds ``OUT_DIR/.run.lock``
(:mod:`tupe_common.lock`) while it looks at and writes the folder: a second run on it (the spm task resubmitted while
the first still trains) is refused (exit 2, naming the lock), since it would take the first's unfinished record for
an interrupted run's and write its own model, dict.txt and record over the first's, whatever its settings.
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from typing import List, Optional, Sequence

import sentencepiece as spm

from tupe_preprocess.c4_common import Progress, SettingsMismatch, check_settings, claim, mb, open_binary
from tupe_common.io import read_json, remove_if_exists, write_json
from tupe_common.lock import LockHeld, folder_lock, hold
from tupe_common.log import get_logger
from tupe_common.errors import command_name, UsageError, exit_main
from tupe_preprocess.spm_dict import id_offset, write_fairseq_dict
from tupe_common.io import need
from tupe_common.process import call_in_fork

MODEL_TYPES = ("bpe", "unigram")  # sentencepiece's model types this step trains

PROG = "c4_spm"
log = get_logger(PROG)
OUTPUTS = ("spm.model", "spm.vocab", "dict.txt")


def stride_select(paths: Sequence[str], k: int) -> List[str]:
    """``k`` paths evenly spaced over the sorted list (all of them if ``k`` is 0 or too big)."""
    paths = sorted(paths)
    if k <= 0 or k >= len(paths):
        return paths
    return [paths[(i * len(paths)) // k] for i in range(k)]


def reservoir_sample(paths: Sequence[str], k: int, seed: int, max_bytes: int,
                     progress_seconds: float = 30.0) -> tuple:
    """Uniform sample of ``k`` non-empty lines (bytes, without newline); returns (sample, stats). A line that is
    not UTF-8 is a ValueError naming the file and line (step 1 writes UTF-8; sentencepiece would learn the bytes)."""
    rng = random.Random(seed)
    sample: List[bytes] = []
    seen = too_long = 0
    prog = Progress(PROG, progress_seconds)
    for path in paths:
        with open_binary(path) as f:
            for number, raw in enumerate(f, 1):
                line = raw.rstrip(b"\n")
                if not line.strip():
                    continue
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}: line {number} is not UTF-8 (byte {e.start + 1} of the line is "
                                     f"{line[e.start:e.start + 1]!r}); step 2 reads step 1's UTF-8 text: save the file "
                                     "as UTF-8") from None
                if len(line) > max_bytes:
                    too_long += 1
                    continue
                if seen < k:
                    sample.append(line)
                else:
                    j = rng.randrange(seen + 1)
                    if j < k:
                        sample[j] = line
                seen += 1
                if not seen & 0xFFFF:
                    prog.maybe(lambda t, path=path, seen=seen: f"sampling {path}: {seen} lines seen, {len(sample)} kept")
    return sample, {"lines_seen": seen, "too_long": too_long, "files": len(paths)}


def _train_spm(seed: int, options: dict) -> None:
    """sentencepiece's trainer with ``options``, seeded (in the child process of :func:`train`)."""
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(**options)


def train(inputs: Sequence[str], out_dir: str, vocab_size: int = 32768, model_type: str = "bpe",
          sample_sentences: int = 1_000_000, character_coverage: float = 0.9999, seed: int = 0,
          max_files: int = 0, threads: int = 0, max_sentence_length: int = 4192,
          hard_vocab_limit: bool = True, progress_seconds: float = 30.0, verbose: bool = False) -> dict:
    files = stride_select(inputs, max_files)
    t0 = time.monotonic()
    sample, stats = reservoir_sample(files, sample_sentences, seed, max_sentence_length, progress_seconds)
    if not sample:
        raise ValueError(f"no non-empty lines in {len(files)} input file(s)")
    log.info(f"sampled {len(sample)} of {stats['lines_seen']} lines from {len(files)} file(s) "
              f"({mb(sum(map(len, sample)))}; {stats['too_long']} over {max_sentence_length} bytes skipped)")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".spm_train.") as tmp:
        sample_path = os.path.join(tmp, "sample.txt")
        with open(sample_path, "wb") as f:
            for line in sample:
                f.write(line + b"\n")
        del sample
        prefix = os.path.join(tmp, "spm")
        options = dict(input=sample_path, model_prefix=prefix, vocab_size=vocab_size, model_type=model_type,
                       character_coverage=character_coverage, input_sentence_size=0, shuffle_input_sentence=False,
                       num_threads=threads or os.cpu_count() or 1, max_sentence_length=max_sentence_length,
                       hard_vocab_limit=hard_vocab_limit, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                       minloglevel=0 if verbose else 1)
        try:  # in a child process: a stop signal is not held up until the C++ trainer returns
            call_in_fork(_train_spm, seed, options)
        except RuntimeError as e:
            if "Vocabulary size" in str(e):
                raise UsageError(
                    f"sentencepiece cannot build {vocab_size} pieces from this sample: {e}. "
                    "Use a smaller --vocab-size, more input/--sample-sentences, or "
                    "--no-hard-vocab-limit (accept a smaller vocabulary)."
                ) from e
            raise
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        offset = id_offset(sp)  # raises if the special ids are not 0..k-1
        remove_if_exists(os.path.join(out_dir, "dict.txt"))
        for ext in ("model", "vocab"):
            os.replace(f"{prefix}.{ext}", os.path.join(out_dir, f"spm.{ext}"))
    n = write_fairseq_dict(sp, os.path.join(out_dir, "dict.txt"))
    return {**stats, "pieces": sp.get_piece_size(), "dict_lines": n, "id_offset": offset,
            "threads": options["num_threads"],  # a unigram model depends on them (BPE's does not)
            "seconds": round(time.monotonic() - t0, 1)}


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m tupe_preprocess.c4 spm``; ``tupe_preprocess.c4.pipeline`` reads its defaults."""
    ap = argparse.ArgumentParser(prog=command_name("python -m tupe_preprocess.c4") + " spm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="extracted text files (.txt or .txt.gz)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--vocab-size", type=int, default=32768)
    ap.add_argument("--model-type", choices=MODEL_TYPES, default="bpe")
    ap.add_argument("--sample-sentences", type=int, default=1_000_000, help="lines in the training sample")
    ap.add_argument("--max-files", type=int, default=32,
                    help="sample from K evenly spaced files (0: all; C4's files are already shuffled)")
    ap.add_argument("--character-coverage", type=float, default=0.9999)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="trainer threads (0: all cores)")
    ap.add_argument("--max-sentence-length", type=int, default=4192, help="bytes; longer lines are not sampled")
    ap.add_argument("--hard-vocab-limit", action=argparse.BooleanOptionalAction, default=True,
                    help="fail if the sample cannot give --vocab-size pieces (default) instead of shrinking")
    ap.add_argument("--progress-seconds", type=float, default=30.0)
    ap.add_argument("--force", action="store_true", help="retrain even if the outputs exist")
    ap.add_argument("--verbose", action="store_true", help="sentencepiece's own training log")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)

    settings = {k: getattr(args, k) for k in ("vocab_size", "model_type", "sample_sentences", "max_files",
                                              "character_coverage", "seed", "max_sentence_length",
                                              "hard_vocab_limit")}
    sampled = stride_select(args.inputs, args.max_files)
    for p in args.inputs:
        need(p)  # missing, or a folder: one line naming it, exit 1 (tupe_common.errors.exit_main)
    settings["inputs"] = [os.path.basename(p) for p in sampled]
    settings["input_bytes"] = [os.path.getsize(p) for p in sampled]  # a text made again (another MAX_DOCS) differs
    try:
        with hold(folder_lock(args.out_dir), PROG, say=log.info):  # one run per OUT_DIR, from its first look at it
            return write_outputs(args, settings)
    except LockHeld as e:
        log.error(f"{e}")
        return 2


def write_outputs(args: argparse.Namespace, settings: dict) -> int:
    """``main``'s work, with OUT_DIR's lock held: skip, refuse or (re)train the outputs and write their record."""
    record = os.path.join(args.out_dir, "settings.json")
    done = read_json(record)
    there = [os.path.join(args.out_dir, o) for o in OUTPUTS if os.path.exists(os.path.join(args.out_dir, o))]
    if there and done is None and not args.force:  # a run writes its record first: these are no run of ours
        log.error(f"{there[0]} exists without its record {record} (a file this command did not write, or a run "
                  "before 2026-12-07 cut short): pass --force to rewrite it, or move it away")
        return 2
    if not args.force and done is not None and "summary" in done and len(there) == len(OUTPUTS):
        recorded = done.get("settings") or {}
        if "input_bytes" not in recorded:  # a record from before the sizes: its names are all it can compare
            settings.pop("input_bytes")
        try:
            check_settings(f"{args.out_dir}/{{spm.model,dict.txt}}", recorded, settings)
        except SettingsMismatch as e:
            log.error(f"{e}")
            return 2
        log.info(f"skip: {args.out_dir}/{{spm.model,spm.vocab,dict.txt}} are complete for these settings; "
                 "--force retrains")
        return 0
    try:
        with claim(record, settings, [os.path.join(args.out_dir, o) for o in OUTPUTS]):
            s = train(args.inputs, args.out_dir, args.vocab_size, args.model_type, args.sample_sentences,
                      args.character_coverage, args.seed, args.max_files, args.threads,
                      args.max_sentence_length, args.hard_vocab_limit, args.progress_seconds, args.verbose)
    except ValueError as e:  # a --vocab-size the sample cannot give: 2 (usage); input without text: 1
        log.error(f"{e}")
        return 2 if isinstance(e, UsageError) else 1
    write_json(record, {"settings": settings, "summary": s})
    log.info("summary: " + " ".join(f"{k}={v}" for k, v in s.items()) + f" out={args.out_dir}")
    return 0


if __name__ == "__main__":
    exit_main(main, "c4_spm")
