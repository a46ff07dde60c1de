"""A small synthetic English corpus for the CLI tests: templated sentences, deterministic.

The classification rule (learnable from words alone): label 1 iff the sentence contains one of
POSITIVE, else 0.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path
from typing import List, Tuple

TESTS = Path(__file__).resolve().parent

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a young girl", "the teacher", "our neighbour"]
VERBS = ["saw", "liked", "found", "carried", "painted", "visited", "followed", "answered"]
OBJECTS = ["the house", "a red ball", "the river", "an apple", "the small garden", "a letter", "the bridge"]
POSITIVE = ["happily", "gladly", "warmly"]
NEUTRAL = ["yesterday", "slowly", "again", "today"]


def sentence(rng: random.Random, positive: bool) -> str:
    adverb = rng.choice(POSITIVE if positive else NEUTRAL)
    words = [rng.choice(SUBJECTS), adverb, rng.choice(VERBS), rng.choice(OBJECTS)]
    if rng.random() < 0.5:
        words = [words[0], words[2], words[3], words[1]]
    return " ".join(words) + " ."


def lm_lines(n: int, seed: int) -> List[str]:
    rng = random.Random(seed)
    return [sentence(rng, rng.random() < 0.5) for _ in range(n)]


def labelled(n: int, seed: int) -> List[Tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = int(rng.random() < 0.5)
        out.append((sentence(rng, bool(label)), label))
    return out


def write_c4(path: Path, docs: List[str]) -> None:
    """``docs`` as a C4 shard: gzipped JSON lines with ``text``, ``timestamp`` and ``url``."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:00:00Z", "url": f"https://example.org/{i}"}) + "\n")


def study_inputs(d: Path) -> Tuple[Path, Path]:
    """The study's inputs in ``d``: ``c4/`` (160 train and 20 validation documents of 5 sentences) and
    ``tasks/SST-2`` (the fixture task). Returns (c4 dir, tasks dir)."""
    lines = lm_lines(900, seed=5)
    (d / "c4").mkdir()
    write_c4(d / "c4" / "c4-train.00000-of-00001.json.gz", ["\n".join(lines[i:i + 5]) for i in range(0, 800, 5)])
    write_c4(d / "c4" / "c4-validation.00000-of-00001.json.gz", ["\n".join(lines[i:i + 5]) for i in range(800, 900, 5)])
    shutil.copytree(TESTS / "data" / "glue" / "SST-2", d / "tasks" / "SST-2")
    return d / "c4", d / "tasks"
