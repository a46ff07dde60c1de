"""``tupe-probe CKPT --sets-dir DIR``: accuracy of a fine-tuned NLI model on word-order probing sets.

The sets come from ``python -m tupe_preprocess.probing_sets`` (SNLI jsonl: ``sentence1``, ``sentence2``,
``gold_label``). The checkpoint is a ``sentence_prediction`` fine-tune whose label dictionary holds
``entailment``/``neutral``/``contradiction``; ``--data`` is its binarized data dir (``input0/dict.txt``,
``label/dict.txt``). Pairs are encoded as in training: ``<s> A </s> </s> B </s>``, the premise cut
from the right when the pair is longer than the model's positions (a warning per set names its file, and the
table's ``cut`` column counts them); a hypothesis that leaves no room for one premise piece stops the run,
naming its file and line. For the
``non-entailment`` label of ``role_swap``, a prediction other than ``entailment`` is correct.
Reports accuracy per set and the change against ``original`` (``role_swap`` against
``role_swap_original``, the same items unswapped), like the L&S paper's probing table.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Dict, List, NamedTuple, Tuple

import torch
from fairseq.data.data_utils import collate_tokens

from tupe_common.errors import UsageError
from tupe_common.io import write_csv
from tupe_common.log import get_logger

from .attention_maps import load_hub

BASELINE = {"role_swap": "role_swap_original"}
log = get_logger("tupe-probe")


def read_set(path: str) -> List[Tuple[str, str, str]]:
    items = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                items.append((r["sentence1"], r["sentence2"], r["gold_label"]))
            except (json.JSONDecodeError, KeyError) as e:
                raise ValueError(f"{path}:{lineno}: not a probing-set record ({e})") from e
    return items


class HypothesisTooLong(ValueError):
    """A pair whose hypothesis, with <s>, the separators and one premise piece, is longer than the model's positions."""


def pair_tokens(hub, premise: str, hypothesis: str) -> Tuple[torch.Tensor, bool]:
    """``<s> A </s> </s> B </s>`` ids; A is cut from the right to fit. Returns (ids, truncated)."""
    d = hub.task.source_dictionary

    def ids(text: str) -> List[int]:
        pieces = hub.bpe.encode(text)
        return d.encode_line(pieces, append_eos=False, add_if_not_exist=False).long().tolist()

    a, b = ids(premise), ids(hypothesis)
    limit = hub.model.max_positions()
    room = limit - len(b) - 4  # <s>, </s> </s> between the two, </s>
    if room < 1:
        raise HypothesisTooLong(f"the hypothesis is {len(b)} pieces, too long for the model's {limit} positions even "
                                f"with its premise cut to one piece (at most {limit - 5})")
    truncated = len(a) > room
    return torch.tensor([d.bos(), *a[:room], d.eos(), d.eos(), *b, d.eos()]), truncated


def encode_set(hub, path: str, items: List[Tuple[str, str, str]]) -> Tuple[List[torch.Tensor], int]:
    """The ids of each pair of the set at ``path`` (``read_set``'s items: item i is line i + 1), and how many
    premises were cut; a pair that cannot fit stops here, naming its line, before the model scores any set."""
    encoded = []
    for lineno, (premise, hypothesis, _) in enumerate(items, 1):
        try:
            encoded.append(pair_tokens(hub, premise, hypothesis))
        except HypothesisTooLong as e:
            raise HypothesisTooLong(f"{path}:{lineno}: {e}; use a model with more positions, or shorten or remove "
                                    "that pair") from None
    return [ids for ids, _ in encoded], sum(cut for _, cut in encoded)


@torch.no_grad()
def predict_labels(hub, encoded: List[torch.Tensor], batch_size: int = 64) -> List[str]:
    labels = hub.task.label_dictionary
    out = []
    pad = hub.task.source_dictionary.pad()
    for start in range(0, len(encoded), batch_size):
        tokens = collate_tokens(encoded[start : start + batch_size], pad_idx=pad)  # right padding
        pred = hub.predict("sentence_classification_head", tokens).argmax(dim=-1)
        out += [labels[int(p) + labels.nspecial] for p in pred]
    return out


NLI_LABELS = ("entailment", "neutral", "contradiction")  # SNLI's gold labels, and MNLI's


def accuracy(gold: List[str], pred: List[str]) -> float:
    hits = [(p != "entailment") if g == "non-entailment" else (p == g) for g, p in zip(gold, pred)]
    return 100.0 * sum(hits) / len(hits)


class SetResult(NamedTuple):
    items: int
    accuracy: float
    cut: int  # pairs whose premise was cut to fit the model


def evaluate(hub, sets_dir: str, batch_size: int = 64) -> Dict[str, SetResult]:
    sets = {}  # every set encoded first: a pair that cannot fit, or no original, fails before any scoring
    for path in sorted(glob.glob(os.path.join(sets_dir, "*.jsonl"))):
        items = read_set(path)
        if items:
            encoded, cut = encode_set(hub, path, items)
            if cut:
                log.warning(f"{path}: {cut} of {len(items)} premises cut from the right to fit the model's "
                            f"{hub.model.max_positions()} positions (the table's 'cut' column)")
            sets[os.path.basename(path)[: -len(".jsonl")]] = (items, encoded, cut)
    if "original" not in sets:
        raise ValueError(f"{sets_dir}: no original.jsonl (make the sets with python -m tupe_preprocess.probing_sets)")
    return {name: SetResult(len(items), accuracy([g for *_, g in items], predict_labels(hub, encoded, batch_size)), cut)
            for name, (items, encoded, cut) in sets.items()}


def run(args: argparse.Namespace) -> int:
    """The command, on arguments parsed by ``tupe_tools.commands.probe_parser``."""
    if args.out_csv and os.path.exists(args.out_csv) and not args.force:  # before the model loads
        raise UsageError(f"--out-csv {args.out_csv} exists; pass --force to overwrite it, or choose another file")
    hub = load_hub(args.checkpoint, args.data, args.spm_model, head=True)
    labels = hub.task.label_dictionary
    have = [w for w in labels.symbols[labels.nspecial:] if w != "<mask>"]  # the task adds <mask> to every dict
    if not set(NLI_LABELS) <= set(have):  # another task's classes: every accuracy would be meaningless
        raise UsageError(f"{args.data}: its label dictionary holds {', '.join(have)}, not the NLI labels "
                         f"{', '.join(NLI_LABELS)}: pass an NLI fine-tune and its data (an MNLI run of tupe-finetune "
                         "with KEEP_CHECKPOINTS=1, --data GLUE_BIN/MNLI-bin)")
    results = evaluate(hub, args.sets_dir, args.batch_size)
    rows = []
    for name, r in results.items():
        base = BASELINE.get(name, "original")
        delta = r.accuracy - results[base].accuracy if base in results and name != base else None
        rows.append({"set": name, "items": r.items, "accuracy": round(r.accuracy, 2),
                     "delta": "" if delta is None else round(delta, 2), "baseline": base if delta is not None else "",
                     "cut": r.cut})
    print("| set | items | accuracy | Δ | vs | cut |\n|---|---|---|---|---|---|")
    for r in rows:
        delta = "" if r["delta"] == "" else f"{r['delta']:+.2f}"
        print(f"| {r['set']} | {r['items']} | {r['accuracy']:.2f} | {delta} | {r['baseline']} | {r['cut']} |")
    if args.out_csv:
        write_csv(args.out_csv, rows)
    return 0


if __name__ == "__main__":  # python -m tupe_tools.analysis.probing_eval: the console script tupe-probe
    from tupe_tools.commands import dispatch

    sys.exit(dispatch("tupe-probe"))
