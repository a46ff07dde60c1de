"""Word-order probing sets from SNLI jsonl (the L&S paper's Shuffle-n / Random / Shuffle-SR, rebuilt).

Input: SNLI's jsonl (one object per line with ``sentence1``, ``sentence2``, ``gold_label``). Items whose
``gold_label`` is ``-`` (no annotator majority) are skipped and counted; malformed lines (not JSON, not
UTF-8, missing/non-string fields, unknown label) are skipped, counted and reported as ``file:line``.

Output: one jsonl per set in ``--out-dir``, records ``{"id", "pairID"?, "sentence1", "sentence2",
"gold_label"}`` where ``id`` is the 1-based line number in the input and ``pairID`` is copied when
present (other SNLI fields, e.g. parse trees, are dropped: they would not match perturbed text).

Words: a word is a whitespace token (``str.split``). Sentence-final punctuation -- the run of ``. ! ?``
ending the last token -- is detached first, stays at the end of the sentence and is not a word
(``"A man sleeps."`` -> words ``A man sleeps`` + ``"."``). Perturbed sentences are re-joined with
single spaces; case is left as it is (no re-capitalisation).

Sets (labels unchanged unless said otherwise; ``--shuffle`` says which sentence the shuffles perturb:
``both`` (default), ``premise`` or ``hypothesis``, the other one left as it is. The L&S paper's text does
not fix this choice; ``both`` perturbs every word order the model sees, the other two isolate one side):

* ``original``: every kept item, sentences untouched.
* ``shuffle_<n>`` for each ``--windows`` n: the words are cut into consecutive non-overlapping windows of
  n words (the last one may be shorter) and each window is permuted on its own; nothing crosses a
  window. A window with at least two distinct words is re-drawn until it differs from the original.
* ``random``: all words of the sentence permuted (re-drawn until different, when possible).
* ``role_swap``: items with gold ``entailment`` whose hypothesis is a simple transitive clause
  ``DET NP VERB DET NP`` (NP = 1-3 content words; VERB = ``is``/``was`` + ``-ing``, a bare ``-ing``,
  or a single ``-s``/``-ed`` form; DET in ``a an the one``; nothing else but the final punctuation),
  with subject and object noun phrases swapped (``A man is petting a dog.`` -> ``A dog is petting a
  man.``); the premise is untouched. Reciprocal verbs (hug, kiss, meet, ...) and swaps that leave the
  sentence unchanged are excluded; an object ``the <noun>s`` is excluded (plural: agreement would
  break). The new label is ``non-entailment`` (swapping agent and patient usually makes the hypothesis
  neutral or contradictory; which one is not decidable by rule): evaluate 3-way models by collapsing
  ``neutral``/``contradiction`` predictions into ``non-entailment``, as in HANS.
* ``role_swap_original``: the same items unswapped (label ``entailment``), for a same-item comparison.

Randomness: every (set, item) draws from its own ``random.Random(f"{seed}/{set}/{id}")``, so outputs are
deterministic given ``--seed`` and do not depend on which other items or sets exist.
Outputs are written to ``<name>.jsonl.partial`` and renamed when all are complete; existing outputs are
never overwritten unless ``--force``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from tupe_common.io import atomic_open
from tupe_common.log import get_logger
from tupe_common.errors import command_name, exit_main
from tupe_common.io import need

LABELS = ("entailment", "neutral", "contradiction")
SWAP_LABEL = "non-entailment"
DETERMINERS = frozenset({"a", "an", "the", "one"})
AUXILIARIES = frozenset({"is", "was"})
RECIPROCAL_VERB_STEMS = ("hug", "kiss", "meet", "met", "marr", "wrestl", "fight", "fought", "rac", "danc")
FUNCTION_WORDS = frozenset(
    "a an the one some two three several many his her its their this that these those and or but "
    "is are was were be been being has have had do does did not no to of in on at by for with from "
    "into onto over under near while as than who which what where when there here it he she they".split()
)
_FINAL_PUNCT = re.compile(r"^(.*?)([.!?]+)$")
_WORD = re.compile(r"^[A-Za-z]+(?:-[A-Za-z]+)*$")
MAX_WARNINGS = 20
log = get_logger("probing_sets")


# ----------------------------------------------------------------------------- words
@dataclass
class Words:
    """A sentence as words plus its detached final punctuation."""

    words: List[str]
    tail: str = ""               # final punctuation, e.g. "." or "?!"
    tail_separate: bool = False  # the punctuation was its own token ("dog .")

    def join(self, words: Optional[Sequence[str]] = None) -> str:
        text = " ".join(self.words if words is None else words)
        if not self.tail:
            return text
        return f"{text} {self.tail}" if self.tail_separate and text else text + self.tail


def split_words(sentence: str) -> Words:
    tokens = sentence.split()
    if not tokens:
        return Words([])
    match = _FINAL_PUNCT.match(tokens[-1])
    if not match:
        return Words(tokens)
    head, tail = match.groups()
    if head:
        return Words(tokens[:-1] + [head], tail)
    return Words(tokens[:-1], tail, tail_separate=True)


def _permute(words: Sequence[str], rng: random.Random) -> List[str]:
    """A random permutation, re-drawn until it differs from ``words`` when that is possible."""
    out = list(words)
    if len(set(words)) < 2:
        return out
    while out == list(words):
        rng.shuffle(out)
    return out


def shuffle_windows(sentence: str, n: int, rng: random.Random) -> str:
    w = split_words(sentence)
    out: List[str] = []
    for start in range(0, len(w.words), n):
        out += _permute(w.words[start:start + n], rng)
    return w.join(out)


def shuffle_all(sentence: str, rng: random.Random) -> str:
    w = split_words(sentence)
    return w.join(_permute(w.words, rng))


# ----------------------------------------------------------------------------- role swap
def _content(tokens: Sequence[str]) -> bool:
    return 1 <= len(tokens) <= 3 and all(_WORD.match(t) and t.lower() not in FUNCTION_WORDS for t in tokens)


def _verb_span(tokens: Sequence[str], v: int) -> int:
    """End of a verb group starting at ``v``, or 0 when there is none."""
    t = tokens[v].lower()
    if t in AUXILIARIES:
        return v + 2 if v + 1 < len(tokens) and tokens[v + 1].lower().endswith("ing") else 0
    if _WORD.match(t) and t not in FUNCTION_WORDS and len(t) > 3 and t.endswith(("ing", "s", "ed")):
        return v + 1
    return 0


def role_swap(sentence: str) -> Optional[str]:
    """Swap the subject and object NPs of a simple transitive clause; ``None`` if it does not match."""
    w = split_words(sentence)
    t = w.words
    if len(t) < 5 or t[0].lower() not in DETERMINERS:
        return None
    for v in range(2, len(t) - 2):
        end = _verb_span(t, v)
        if not end or end >= len(t) - 1 or t[end].lower() not in DETERMINERS:
            continue
        subj, verb, obj = t[1:v], t[v:end], t[end + 1:]
        if not (_content(subj) and _content(obj)):
            continue
        if any(x.lower().startswith(RECIPROCAL_VERB_STEMS) for x in verb):
            return None
        if t[end].lower() == "the" and obj[-1].endswith("s") and not obj[-1].endswith("ss"):
            return None
        if [x.lower() for x in subj] == [x.lower() for x in obj] and t[0].lower() == t[end].lower():
            return None
        new_det = t[end][:1].upper() + t[end][1:] if t[0][:1].isupper() else t[end].lower()
        return w.join([new_det, *obj, *verb, t[0].lower(), *subj])
    return None


# ----------------------------------------------------------------------------- reading
@dataclass
class ReadStats:
    read: int = 0
    no_gold_label: int = 0
    malformed: int = 0
    warnings: List[str] = field(default_factory=list)

    def warn(self, path: str, line_no: int, reason: str) -> None:
        self.malformed += 1
        self.warnings.append(f"{path}:{line_no}: {reason}")
        if len(self.warnings) <= MAX_WARNINGS:
            log.warning(f"{path}:{line_no}: {reason}; line skipped")


def read_snli(path: str, stats: ReadStats) -> Iterator[Tuple[int, dict]]:
    """Yield ``(line_no, record)`` for usable items; blank lines are ignored, others counted."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            stats.read += 1
            try:
                rec = json.loads(raw.decode("utf-8").lstrip("\ufeff"))
            except UnicodeDecodeError as e:
                stats.warn(path, line_no, f"not valid UTF-8 ({e.reason} at byte {e.start})")
                continue
            except json.JSONDecodeError as e:
                stats.warn(path, line_no, f"not valid JSON ({e.msg})")
                continue
            if not isinstance(rec, dict):
                stats.warn(path, line_no, "not a JSON object")
                continue
            missing = [k for k in ("sentence1", "sentence2", "gold_label") if not isinstance(rec.get(k), str)]
            if missing:
                stats.warn(path, line_no, f"missing or non-string field(s) {', '.join(missing)}")
                continue
            if rec["gold_label"] == "-":
                stats.no_gold_label += 1
                continue
            if rec["gold_label"] not in LABELS:
                stats.warn(path, line_no, f"unknown gold_label {rec['gold_label']!r}")
                continue
            yield line_no, rec


# ----------------------------------------------------------------------------- building
def set_names(windows: Sequence[int]) -> List[str]:
    return ["original", *(f"shuffle_{n}" for n in windows), "random", "role_swap", "role_swap_original"]


SHUFFLE_SIDES = ("both", "premise", "hypothesis")
SET_FILE = re.compile(r"(original|shuffle_\d+|random|role_swap|role_swap_original)\.jsonl")  # set_names' files


def perturb(line_no: int, rec: dict, windows: Sequence[int], seed: int, shuffle: str = "both") -> Dict[str, dict]:
    """All probing records of one SNLI item, by set name (sets the item does not belong to are absent).

    ``shuffle`` (``both``, ``premise``, ``hypothesis``): the sentence(s) the shuffle sets perturb."""
    if shuffle not in SHUFFLE_SIDES:
        raise ValueError(f"shuffle={shuffle!r}: choose from {', '.join(SHUFFLE_SIDES)}")
    premise, hypothesis = shuffle in ("both", "premise"), shuffle in ("both", "hypothesis")
    base = {"id": line_no}
    if "pairID" in rec:
        base["pairID"] = rec["pairID"]
    s1, s2, label = rec["sentence1"], rec["sentence2"], rec["gold_label"]

    def item(a: str, b: str, lab: str, **extra) -> dict:
        return {**base, "sentence1": a, "sentence2": b, "gold_label": lab, **extra}

    def rng(name: str) -> random.Random:
        return random.Random(f"{seed}/{name}/{line_no}")

    out = {"original": item(s1, s2, label)}
    for n in windows:
        r = rng(f"shuffle_{n}")
        out[f"shuffle_{n}"] = item(shuffle_windows(s1, n, r) if premise else s1,
                                   shuffle_windows(s2, n, r) if hypothesis else s2, label)
    r = rng("random")
    out["random"] = item(shuffle_all(s1, r) if premise else s1, shuffle_all(s2, r) if hypothesis else s2, label)
    swapped = role_swap(s2) if label == "entailment" else None
    if swapped is not None:
        out["role_swap"] = item(s1, swapped, SWAP_LABEL, orig_sentence2=s2, orig_gold_label=label)
        out["role_swap_original"] = item(s1, s2, label)
    return out


def build(input_path: str, out_dir: str, seed: int, windows: Sequence[int], force: bool,
          shuffle: str = "both") -> Dict[str, int]:
    """Write every set; returns kept counts per set. Raises FileExistsError unless ``force``."""
    names = set_names(windows)
    finals = {name: os.path.join(out_dir, f"{name}.jsonl") for name in names}
    existing = [p for p in finals.values() if os.path.exists(p)]
    if existing and not force:
        raise FileExistsError("outputs exist (use --force to overwrite): " + ", ".join(existing))
    kept = dict.fromkeys(names, 0)
    stats = ReadStats()
    with contextlib.ExitStack() as stack:  # every set renamed into place at the end, or none (an error)
        files = {name: stack.enter_context(atomic_open(path)) for name, path in finals.items()}
        for line_no, rec in read_snli(input_path, stats):
            for name, out in perturb(line_no, rec, windows, seed, shuffle).items():
                files[name].write(json.dumps(out, ensure_ascii=False) + "\n")
                kept[name] += 1
        if not kept["original"]:  # every set empty: an error, and nothing written (the partial files removed)
            raise ValueError(f"{input_path}: no usable SNLI item ({stats.read} lines read, {stats.malformed} "
                             f"malformed, {stats.no_gold_label} without gold label); is it SNLI jsonl in UTF-8?")
    stale = sorted(name for name in os.listdir(out_dir) if force and SET_FILE.fullmatch(name)
                   and os.path.join(out_dir, name) not in finals.values())
    for name in stale:  # --force with other windows: tupe-probe reads every set of the folder
        os.remove(os.path.join(out_dir, name))
    if stale:
        log.warning(f"--force: removed the earlier sets {', '.join(stale)} (not made with these --windows)")
    if len(stats.warnings) > MAX_WARNINGS:
        log.warning(f"{len(stats.warnings) - MAX_WARNINGS} more malformed lines not shown")
    log.info(f"{input_path}: {stats.read} items read, skipped {stats.no_gold_label} without gold label ('-'), "
             f"{stats.malformed} malformed; shuffles perturb: {shuffle}")
    for name in names:
        log.info(f"  {name:20s} {kept[name]:8d}  -> {finals[name]}")
    return kept


def main(argv: Optional[Sequence[str]] = None) -> int:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(
        prog=command_name("python -m tupe_preprocess.probing_sets"),
        description=doc.split("\n\n", 1)[0],
        epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input", required=True, help="SNLI jsonl, e.g. snli_1.0_test.jsonl")
    p.add_argument("--out-dir", required=True, help="folder for <set>.jsonl outputs")
    p.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    p.add_argument("--windows", type=int, nargs="+", default=[3, 4, 5, 6],
                   help="shuffle window sizes (default: 3 4 5 6)")
    p.add_argument("--shuffle", choices=SHUFFLE_SIDES, default="both",
                   help="which sentence the shuffle_<n> and random sets perturb (default: both)")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    args = p.parse_args(argv)
    if any(n < 2 for n in args.windows) or len(set(args.windows)) != len(args.windows):
        p.error("--windows must be distinct integers >= 2")
    need(args.input)  # a missing input: 1; outputs that exist without --force: 2 (usage)
    need(args.out_dir, "out")
    made = not os.path.exists(args.out_dir)
    try:
        build(args.input, args.out_dir, args.seed, args.windows, args.force, args.shuffle)
    except FileExistsError as e:
        log.error(str(e))
        return 2
    except ValueError as e:
        log.error(str(e))
        if made and not os.listdir(args.out_dir):  # nothing written: not even the folder
            os.rmdir(args.out_dir)
        return 1
    return 0


def cli() -> None:
    """The console script ``tupe-probing-sets``."""
    exit_main(main, "tupe-probing-sets")


if __name__ == "__main__":
    exit_main(main, "probing_sets")
