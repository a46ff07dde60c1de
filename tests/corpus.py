"""A small synthetic English corpus for the CLI tests: templated sentences, deterministic.

The classification rule (learnable from words alone): label 1 iff the sentence contains one of
POSITIVE, else 0.
"""
from __future__ import annotations

import random
from typing import List, Tuple

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
