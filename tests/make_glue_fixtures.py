"""Write the small GLUE fixtures in ``tests/data/glue/`` (deterministic; rules in its README.md).

Every task folder has the raw files in the exact layout of GLUE as distributed (header lines,
column counts, CoLA without header in train/dev, MNLI's matched/mismatched files). Sentences are
built from word lists, and every label follows a simple documented rule, so a model can learn it.

    python tests/make_glue_fixtures.py [OUT_DIR]     # default: tests/data/glue
"""
from __future__ import annotations

import os
import random
import sys
from typing import Callable, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "data", "glue")

PEOPLE = ["teacher", "farmer", "doctor", "pilot", "baker", "student", "lawyer", "painter", "nurse",
          "captain", "writer", "singer"]
THINGS = ["letter", "bridge", "garden", "report", "car", "house", "window", "song", "map", "boat",
          "fence", "piano"]
VERBS = [("repaired", "repair"), ("painted", "paint"), ("described", "describe"), ("visited", "visit"),
         ("sold", "sell"), ("photographed", "photograph"), ("cleaned", "clean"), ("admired", "admire")]
TAILS = ["yesterday", "near the station", "after lunch", "in the rain", "with great care",
         "before the storm", "at the café", "for the \"old\" mayor", "on Sunday"]
POSITIVE = ["wonderful", "charming", "brilliant", "moving", "delightful", "gripping"]
NEGATIVE = ["dull", "tedious", "clumsy", "bland", "forgettable", "tiresome"]
FILM = ["film", "movie", "story", "performance", "script", "soundtrack"]
TOPICS = ["python", "guitar", "french", "chess", "swimming", "cooking", "painting", "photography"]
QUESTION_FORMS = ["How do I learn {t} quickly?", "What is the best way to get better at {t}?",
                  "Is {t} hard for a beginner?", "Which books about {t} should I read?",
                  "How long does it take to master {t}?", "Why is {t} so \"popular\" now?"]
MNLI_GENRES_MATCHED = ["fiction", "government", "slate", "telephone", "travel"]
MNLI_GENRES_MISMATCHED = ["facetoface", "letters", "nineeleven", "oup", "verbatim"]
MNLI_LABELS = ["entailment", "neutral", "contradiction"]

Row = List[str]


def write_tsv(path: str, rows: Sequence[Sequence[str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write("\t".join(row) + "\n")


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def event(rng: random.Random, person: str = "", thing: str = "") -> Tuple[str, str, Tuple[str, str], str]:
    """A random (subject, object, verb pair, tail); subject/object fixed when given."""
    return (person or rng.choice(PEOPLE), thing or rng.choice(THINGS), rng.choice(VERBS), rng.choice(TAILS))


def sentence(ev) -> str:
    person, thing, (past, _), tail = ev
    return f"The {person} {past} the {thing} {tail}."


def other(rng: random.Random, pool: Sequence[str], not_this: str) -> str:
    return rng.choice([w for w in pool if w != not_this])


def balanced(n: int, labels: Sequence[str], rng: random.Random) -> List[str]:
    out = [labels[i % len(labels)] for i in range(n)]
    rng.shuffle(out)
    return out


# ---- single-sentence tasks --------------------------------------------------------------------


def sst2(rng: random.Random, n: int) -> List[Tuple[str, str]]:
    """Label 1 iff the sentence contains a POSITIVE word (each has exactly one sentiment word)."""
    out = []
    for label in balanced(n, ["0", "1"], rng):
        word = rng.choice(POSITIVE if label == "1" else NEGATIVE)
        noun = rng.choice(FILM)
        form = rng.randrange(4)
        if form == 0:
            s = f"the {noun} is {word} from start to finish ."
        elif form == 1:
            s = f"it 's a {word} {noun} about {rng.choice(PEOPLE)}s and their {rng.choice(THINGS)}s ."
        elif form == 2:
            s = f"a {word} , \" {rng.choice(['quiet', 'long', 'strange'])} \" {noun}"
        else:
            s = f"\"{noun}\" feels {word} , even when the {rng.choice(PEOPLE)} sings"
        out.append((s, label))
    return out


def cola(rng: random.Random, n: int) -> List[Tuple[str, str]]:
    """Label 1 iff the verb agrees in number with the subject (present tense)."""
    out = []
    for label in balanced(n, ["0", "1"], rng):
        plural = rng.random() < 0.5
        person, thing, (_, base), tail = event(rng)
        subj = f"{person}s" if plural else person
        verb_agrees = base if plural else base + "s"
        verb_wrong = base + "s" if plural else base
        verb = verb_agrees if label == "1" else verb_wrong
        quote = rng.random() < 0.2
        obj = f"\"the {thing}\"" if quote else f"the {thing}"
        out.append((f"The {subj} {verb} {obj} {tail}.", label))
    return out


# ---- pair tasks --------------------------------------------------------------------------------


def paraphrase_pair(rng: random.Random, label: str) -> Tuple[str, str]:
    """MRPC: label 1 iff both sentences have the same subject and the same object."""
    ev = event(rng)
    person, thing, (past, _), tail = ev
    if label == "1":
        return sentence(ev), f"The {thing} was {past} by the {person} {tail}."
    if rng.random() < 0.5:
        person = other(rng, PEOPLE, person)
    else:
        thing = other(rng, THINGS, thing)
    return sentence(ev), f"The {thing} was {past} by the {person} {tail}."


def stsb_pair(rng: random.Random) -> Tuple[str, str, str]:
    """STS-B: score = 5 * (slots of subject/verb/object kept) / 3, written with 3 decimals."""
    ev = event(rng)
    person, thing, verb, tail = ev
    changed = rng.sample(range(3), rng.randrange(4))
    if 0 in changed:
        person = other(rng, PEOPLE, person)
    if 1 in changed:
        verb = rng.choice([v for v in VERBS if v != verb])
    if 2 in changed:
        thing = other(rng, THINGS, thing)
    score = 5.0 * (3 - len(changed)) / 3
    return sentence(ev), sentence((person, thing, verb, rng.choice(TAILS))), f"{score:.3f}"


def qqp_pair(rng: random.Random, label: str) -> Tuple[str, str]:
    """QQP: duplicate iff both questions are about the same topic."""
    t1 = rng.choice(TOPICS)
    t2 = t1 if label == "1" else other(rng, TOPICS, t1)
    f1, f2 = rng.sample(QUESTION_FORMS, 2)
    return f1.format(t=t1), f2.format(t=t2)


def nli_pair(rng: random.Random, label: str) -> Tuple[str, str]:
    """MNLI: 'not' in the hypothesis -> contradiction; else same subject -> entailment, other -> neutral."""
    ev = event(rng)
    person, thing, (past, base), tail = ev
    if label == "contradiction":
        return sentence(ev), f"The {person} did not {base} the {thing}."
    if label == "entailment":
        return sentence(ev), rng.choice([f"The {person} {past} something.", f"The {person} {past} the {thing}."])
    return sentence(ev), f"The {other(rng, PEOPLE, person)} {past} the {thing}."


def same_subject_pair(rng: random.Random, yes: bool) -> Tuple[str, str]:
    """RTE: entailment iff sentence2 has sentence1's subject."""
    ev = event(rng)
    person, thing, (past, _), _ = ev
    subj = person if yes else other(rng, PEOPLE, person)
    return sentence(ev), f"A {subj} {past} a {thing}."


def qnli_pair(rng: random.Random, yes: bool) -> Tuple[str, str]:
    """QNLI: entailment iff the sentence's subject is the person the question asks about."""
    ev = event(rng)
    person, _, (_, base), _ = ev
    asked = person if yes else other(rng, PEOPLE, person)
    return f"What did the {asked} {base}?", sentence(ev)


def wnli_pair(rng: random.Random, label: str) -> Tuple[str, str]:
    """WNLI: label 1 iff sentence2's subject is the one who was thanked (the helper)."""
    helper, thanker = rng.sample(PEOPLE, 2)
    thing = rng.choice(THINGS)
    past, _ = rng.choice(VERBS)
    s1 = f"The {thanker} thanked the {helper} because he had {past} the {thing}."
    return s1, f"The {helper if label == '1' else thanker} had {past} the {thing}."


# ---- MNLI parse columns (shape only: bracketed token strings as in the real files) ------------


def binary_parse(s: str) -> str:
    words = s.rstrip(".").split() + ["."]
    return "( " + " ".join(words) + " )"


def tree_parse(s: str) -> str:
    return "(ROOT (S " + " ".join(f"(X {w})" for w in s.rstrip(".").split()) + " (. .)))"


# ---- writers -----------------------------------------------------------------------------------


def write_cola(out: str, rng: random.Random) -> None:
    def rows(n: int) -> List[Row]:
        return [[rng.choice(["gj04", "bc01", "ks08"]), label, "" if label == "1" else "*", s]
                for s, label in cola(rng, n)]

    write_tsv(f"{out}/train.tsv", rows(48))  # no header
    write_tsv(f"{out}/dev.tsv", rows(16))  # no header
    write_tsv(f"{out}/test.tsv", [["index", "sentence"]] + [[str(i), s] for i, (s, _) in enumerate(cola(rng, 8))])


def write_sst2(out: str, rng: random.Random) -> None:
    train = [list(x) for x in sst2(rng, 47)]
    train.insert(7, ["a naïve , tedious little film .", "0"])  # a rare character: <unk> in a small spm model
    write_tsv(f"{out}/train.tsv", [["sentence", "label"]] + train)
    write_tsv(f"{out}/dev.tsv", [["sentence", "label"]] + [list(x) for x in sst2(rng, 16)])
    write_tsv(f"{out}/test.tsv", [["index", "sentence"]] + [[str(i), s] for i, (s, _) in enumerate(sst2(rng, 8))])


def write_mrpc(out: str, rng: random.Random) -> None:
    def rows(n: int, test: bool) -> List[Row]:
        res = []
        for i, label in enumerate(balanced(n, ["0", "1"], rng)):
            a, b = paraphrase_pair(rng, label)
            first = str(i) if test else label
            res.append([first, str(rng.randrange(10**5, 10**7)), str(rng.randrange(10**5, 10**7)), a, b])
        return res

    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    # The real MRPC header starts with a UTF-8 byte-order mark.
    write_tsv(f"{out}/train.tsv", [["\ufeffQuality"] + header[1:]] + rows(48, False))
    write_tsv(f"{out}/dev.tsv", [["\ufeffQuality"] + header[1:]] + rows(16, False))
    write_tsv(f"{out}/test.tsv", [["index"] + header[1:]] + rows(8, True))


def write_stsb(out: str, rng: random.Random) -> None:
    cols = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]

    def rows(n: int, test: bool) -> List[Row]:
        res = []
        for i in range(n):
            a, b, score = stsb_pair(rng)
            row = [str(i), "main-captions", "MSRvid", "2012test", f"{i + 1:04d}", "none", "none", a, b]
            res.append(row if test else row + [score])
        return res

    write_tsv(f"{out}/train.tsv", [cols + ["score"]] + rows(48, False))
    write_tsv(f"{out}/dev.tsv", [cols + ["score"]] + rows(16, False))
    write_tsv(f"{out}/test.tsv", [cols] + rows(8, True))


# QQP lines with the wrong number of fields, as in the real files (a record broken by a newline
# inside a question, or a stray tab). Known counts, asserted by the tests:
QQP_BAD_TRAIN = 5
QQP_BAD_DEV = 2


def write_qqp(out: str, rng: random.Random) -> None:
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]

    def rows(n: int, start: int) -> List[Row]:
        res = []
        for i, label in enumerate(balanced(n, ["0", "1"], rng)):
            a, b = qqp_pair(rng, label)
            k = start + i
            res.append([str(k), str(2 * k + 1), str(2 * k + 2), a, b, label])
        return res

    train = rows(48, 0)
    # record broken inside question1 -> lines of 4 and 3 fields
    train.insert(5, ["900", "1801", "1802", "How do I learn"])
    train.insert(6, ["chess openings?", "What is the best way to get better at chess?", "1"])
    # record broken inside question2 -> lines of 5 and 2 fields
    train.insert(20, ["901", "1803", "1804", "Is guitar hard?", "\"Is guitar hard for"])
    train.insert(21, ["a beginner?", "1"])
    # stray tab -> 7 fields
    train.insert(30, ["902", "1805", "1806", "Why is chess", "popular?", "Is chess popular?", "1"])
    dev = rows(16, 1000)
    dev.insert(3, ["903", "1807", "1808", "Which books about cooking"])
    dev.insert(4, ["should I read?", "How do I learn cooking quickly?", "1"])
    write_tsv(f"{out}/train.tsv", [header] + train)
    write_tsv(f"{out}/dev.tsv", [header] + dev)
    test = [[str(i)] + list(qqp_pair(rng, rng.choice("01"))) for i in range(8)]
    write_tsv(f"{out}/test.tsv", [["id", "question1", "question2"]] + test)


def write_mnli(out: str, rng: random.Random) -> None:
    base = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
            "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]

    def rows(n: int, genres: Sequence[str], kind: str) -> List[Row]:
        res = []
        for i, label in enumerate(balanced(n, MNLI_LABELS, rng)):
            p, h = nli_pair(rng, label)
            pid = rng.randrange(10**4, 10**6)
            row = [str(i), str(pid), f"{pid}{'ecn'[i % 3]}", rng.choice(genres),
                   binary_parse(p), binary_parse(h), tree_parse(p), tree_parse(h), p, h]
            if kind == "train":
                row += [label, label]  # label1, gold_label
            elif kind == "dev":
                row += [label, label, rng.choice(MNLI_LABELS), label, label, label]  # label1-5, gold
            res.append(row)
        return res

    write_tsv(f"{out}/train.tsv", [base + ["label1", "gold_label"]] + rows(60, MNLI_GENRES_MATCHED, "train"))
    dev_header = base + ["label1", "label2", "label3", "label4", "label5", "gold_label"]
    write_tsv(f"{out}/dev_matched.tsv", [dev_header] + rows(18, MNLI_GENRES_MATCHED, "dev"))
    write_tsv(f"{out}/dev_mismatched.tsv", [dev_header] + rows(15, MNLI_GENRES_MISMATCHED, "dev"))
    write_tsv(f"{out}/test_matched.tsv", [base] + rows(8, MNLI_GENRES_MATCHED, "test"))
    write_tsv(f"{out}/test_mismatched.tsv", [base] + rows(7, MNLI_GENRES_MISMATCHED, "test"))


def write_three_column(out: str, rng: random.Random, names: Tuple[str, str],
                       pair: Callable[[random.Random, str], Tuple[str, str]], labels: Sequence[str]) -> None:
    """QNLI / RTE / WNLI: index, text1, text2, label (test: no label)."""
    def rows(n: int, test: bool) -> List[Row]:
        res = []
        for i, label in enumerate(balanced(n, labels, rng)):
            a, b = pair(rng, label)
            res.append([str(i), a, b] if test else [str(i), a, b, label])
        return res

    header = ["index", *names]
    write_tsv(f"{out}/train.tsv", [header + ["label"]] + rows(48, False))
    write_tsv(f"{out}/dev.tsv", [header + ["label"]] + rows(16, False))
    write_tsv(f"{out}/test.tsv", [header] + rows(8, True))


def make_all(out_dir: str = DEFAULT_OUT) -> None:
    writers = {
        "CoLA": write_cola,
        "SST-2": write_sst2,
        "MRPC": write_mrpc,
        "STS-B": write_stsb,
        "QQP": write_qqp,
        "MNLI": write_mnli,
        "QNLI": lambda o, r: write_three_column(
            o, r, ("question", "sentence"), lambda g, label: qnli_pair(g, label == "entailment"),
            ["entailment", "not_entailment"]),
        "RTE": lambda o, r: write_three_column(
            o, r, ("sentence1", "sentence2"), lambda g, label: same_subject_pair(g, label == "entailment"),
            ["entailment", "not_entailment"]),
        "WNLI": lambda o, r: write_three_column(o, r, ("sentence1", "sentence2"), wnli_pair, ["0", "1"]),
    }
    for seed, (task, write) in enumerate(writers.items()):
        folder = os.path.join(out_dir, task)
        os.makedirs(folder, exist_ok=True)
        write(folder, random.Random(1000 + seed))


if __name__ == "__main__":
    make_all(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
