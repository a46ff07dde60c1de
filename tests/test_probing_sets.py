"""Word-order probing sets: the real CLI on SNLI-format fixtures."""
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from tupe_preprocess.probing_sets import role_swap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "tests", "data", "snli_sample.jsonl")
BAD = os.path.join(REPO, "tests", "data", "snli_bad.jsonl")
WINDOWS = (3, 4, 5, 6)
SETS = ["original", *(f"shuffle_{n}" for n in WINDOWS), "random", "role_swap", "role_swap_original"]


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "tupe_preprocess.probing_sets", *args], cwd=REPO, capture_output=True, text=True
    )


def build(out_dir, seed=1, src=SAMPLE, *extra):
    result = run_cli("--input", src, "--out-dir", str(out_dir), "--seed", str(seed), *extra)
    assert result.returncode == 0, result.stderr
    return result


def load(out_dir):
    sets = {}
    for name in SETS:
        with open(os.path.join(out_dir, f"{name}.jsonl"), encoding="utf-8") as f:
            sets[name] = [json.loads(line) for line in f]
    return sets


def input_records(path=SAMPLE):
    with open(path, encoding="utf-8") as f:
        return {i: json.loads(line) for i, line in enumerate(f, start=1) if line.strip()}


def words_and_tail(sentence):
    """Independent of the module: whitespace tokens, final run of .!? split off."""
    tokens = sentence.split()
    m = re.fullmatch(r"(.*?)([.!?]+)", tokens[-1]) if tokens else None
    if not m:
        return tokens, ""
    return (tokens[:-1] + [m.group(1)] if m.group(1) else tokens[:-1]), m.group(2)


@pytest.fixture(scope="module")
def built(tmp_path_factory, starts_process):
    out = tmp_path_factory.mktemp("probing")
    result = build(out)
    return out, result, load(out)


def test_summary_and_original(built):
    out, result, sets = built
    assert "83 items read" in result.stderr and not result.stdout  # the summary is logged (stderr)
    assert "skipped 2 without gold label" in result.stderr and "0 malformed" in result.stderr
    for name in SETS:
        assert re.search(rf"\b{name}\s+{len(sets[name])}\b", result.stderr), name
    records = input_records()
    kept = {i: r for i, r in records.items() if r["gold_label"] != "-"}
    assert [r["id"] for r in sets["original"]] == sorted(kept)
    for r in sets["original"]:
        src = kept[r["id"]]
        assert (r["sentence1"], r["sentence2"], r["gold_label"], r["pairID"]) == (
            src["sentence1"], src["sentence2"], src["gold_label"], src["pairID"])
    assert sorted(os.listdir(out)) == sorted(f"{name}.jsonl" for name in SETS)  # no temporary left


@pytest.mark.parametrize("n", WINDOWS)
def test_shuffle_respects_windows(built, n):
    _, _, sets = built
    original = {r["id"]: r for r in sets["original"]}
    shuffled = sets[f"shuffle_{n}"]
    assert [r["id"] for r in shuffled] == list(original)
    changed = changeable = 0
    for r in shuffled:
        src = original[r["id"]]
        assert r["gold_label"] == src["gold_label"]
        for key in ("sentence1", "sentence2"):
            (w0, t0), (w1, t1) = words_and_tail(src[key]), words_and_tail(r[key])
            assert t1 == t0 and len(w1) == len(w0)
            for start in range(0, len(w0), n):
                window0, window1 = w0[start:start + n], w1[start:start + n]
                assert Counter(window1) == Counter(window0), (r["id"], key, start)
                if len(set(window0)) > 1:  # documented: such windows always change
                    assert window1 != window0, (r["id"], key, start)
            changed += w1 != w0
            changeable += len(set(w0)) > 1
    assert changed == changeable > len(shuffled)


def test_random_keeps_multiset_and_crosses_windows(built):
    _, _, sets = built
    original = {r["id"]: r for r in sets["original"]}
    crossed = 0
    for r in sets["random"]:
        src = original[r["id"]]
        assert r["gold_label"] == src["gold_label"]
        for key in ("sentence1", "sentence2"):
            (w0, t0), (w1, t1) = words_and_tail(src[key]), words_and_tail(r[key])
            assert t1 == t0 and Counter(w1) == Counter(w0)
            assert w1 != w0
            crossed += any(Counter(w1[s:s + 6]) != Counter(w0[s:s + 6]) for s in range(0, len(w0), 6))
    assert crossed > len(sets["random"])  # a full shuffle moves words across windows in most sentences


EXPECTED_SWAPS = {
    "A man is petting a dog.": "A dog is petting a man.",
    "A girl kicks a ball.": "A ball kicks a girl.",
    "An old man is reading a newspaper.": "A newspaper is reading an old man.",
    "The man is carrying a ladder.": "A ladder is carrying the man.",
    "A cat chased a mouse.": "A mouse chased a cat.",
    "The dog is catching the stick.": "The stick is catching the dog.",
    "a boy is pulling a wagon": "a wagon is pulling a boy",
    "A woman is holding a baby .": "A baby is holding a woman .",
}
NOT_SWAPPED = [
    "A boy is hugging a dog.",           # reciprocal verb
    "A man kissed a woman.",             # reciprocal verb
    "Two women are drinking coffee.",    # no determiner pattern
    "A chef is chopping onions.",        # bare plural object
    "A woman is feeding a cat.",         # contradiction item: only entailment items are used
    "A child is watching a fish.",       # gold label '-'
]


def test_role_swap(built):
    _, _, sets = built
    swaps, originals = sets["role_swap"], sets["role_swap_original"]
    premise_of = {r["id"]: r["sentence1"] for r in sets["original"]}
    assert [r["id"] for r in swaps] == [r["id"] for r in originals] and len(swaps) >= len(EXPECTED_SWAPS)
    by_hyp = {r["orig_sentence2"]: r for r in swaps}
    for before, after in EXPECTED_SWAPS.items():
        assert by_hyp[before]["sentence2"] == after
    for hyp in NOT_SWAPPED:
        assert hyp not in by_hyp
    for s, o in zip(swaps, originals):
        assert s["gold_label"] == "non-entailment" and o["gold_label"] == "entailment"
        assert s["orig_gold_label"] == "entailment" and s["orig_sentence2"] == o["sentence2"]
        assert s["sentence1"] == o["sentence1"] == premise_of[s["id"]]
        assert s["sentence2"] != o["sentence2"]
        (ws, ts), (wo, to) = words_and_tail(s["sentence2"]), words_and_tail(o["sentence2"])
        assert ts == to and Counter(w.lower() for w in ws) == Counter(w.lower() for w in wo)


def test_role_swap_rule_directly():
    assert role_swap("A man is petting a dog in the park.") is None   # trailing PP
    assert role_swap("A man is feeding the ducks.") is None            # plural object
    assert role_swap("A man is petting a man.") is None                # swap changes nothing
    assert role_swap("A young girl holds a tiny kitten!") == "A tiny kitten holds a young girl!"
    assert role_swap("An owl was watching the tall farmer.") == "The tall farmer was watching an owl."


def test_deterministic_given_seed(built, tmp_path, starts_process):
    out1, _, sets1 = built
    build(tmp_path / "same", 1)
    build(tmp_path / "other", 2)
    for name in SETS:
        with open(out1 / f"{name}.jsonl", "rb") as a, open(tmp_path / "same" / f"{name}.jsonl", "rb") as b:
            assert a.read() == b.read(), name
    sets2 = load(tmp_path / "other")
    for name in SETS:
        if name.startswith(("shuffle", "random")):
            assert sets2[name] != sets1[name], name
        else:
            assert sets2[name] == sets1[name], name


def test_bad_lines_are_counted_and_named(tmp_path, starts_process):
    result = build(tmp_path / "bad", 1, BAD)
    assert "7 items read" in result.stderr  # 8 lines, the blank one is not an item
    assert "skipped 1 without gold label" in result.stderr and "4 malformed" in result.stderr
    for line_no, reason in ((2, "not valid JSON"), (4, "sentence2"), (5, "UTF-8"), (8, "gold_label")):
        assert f"snli_bad.jsonl:{line_no}: " in result.stderr and reason in result.stderr, line_no
    original = load(tmp_path / "bad")["original"]
    assert [r["id"] for r in original] == [1, 7]
    assert original[1]["sentence1"] == "Un homme lit un journal \u00e0 la gare."


def test_refuses_to_overwrite_without_force(tmp_path, starts_process):
    out = tmp_path / "o"
    build(out, 1)
    (out / "random.jsonl").write_text("user data\n", encoding="utf-8")
    result = run_cli("--input", SAMPLE, "--out-dir", str(out), "--seed", "3")
    assert result.returncode == 2 and "--force" in result.stderr  # a usage error: nothing was changed
    assert (out / "random.jsonl").read_text(encoding="utf-8") == "user data\n"
    build(out, 3, SAMPLE, "--force")
    assert (out / "random.jsonl").read_text(encoding="utf-8") != "user data\n"
    assert not [p for p in os.listdir(out) if p.endswith(".partial")]
    # --force with fewer windows: the earlier shuffle_4/shuffle_5 sets go, tupe-probe reads every set of the
    # folder (they stayed beside the new ones, of another seed); another file stays
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    build(out, 9, SAMPLE, "--windows", "3", "--force")
    assert sorted(os.listdir(out)) == ["notes.txt", "original.jsonl", "random.jsonl", "role_swap.jsonl",
                                       "role_swap_original.jsonl", "shuffle_3.jsonl"]


def test_help_and_bad_windows(tmp_path, starts_process):
    result = run_cli("--help")
    assert result.returncode == 0 and "--windows" in result.stdout and "role_swap" in result.stdout
    result = run_cli("--input", SAMPLE, "--out-dir", str(tmp_path / "w"), "--windows", "1")
    assert result.returncode == 2 and not (tmp_path / "w").exists()
    result = run_cli("--input", str(tmp_path / "none.jsonl"), "--out-dir", str(tmp_path / "w"))
    assert result.returncode == 1 and "none.jsonl: no such file or folder" in result.stderr  # a missing input: 1


@pytest.mark.parametrize("side", ["premise", "hypothesis"])
def test_shuffle_one_side_only(built, tmp_path, side, starts_process):
    """--shuffle premise|hypothesis perturbs that sentence (same words) and leaves the other as it is."""
    _, _, both = built
    build(tmp_path / side, 1, SAMPLE, "--shuffle", side)
    one = load(tmp_path / side)
    changed, kept = ("sentence1", "sentence2") if side == "premise" else ("sentence2", "sentence1")
    originals = {r["id"]: r for r in one["original"]}
    assert one["original"] == both["original"] and one["role_swap"] == both["role_swap"]
    moved = 0
    for name in [f"shuffle_{n}" for n in WINDOWS] + ["random"]:
        for rec in one[name]:
            orig = originals[rec["id"]]
            assert rec[kept] == orig[kept]
            assert Counter(words_and_tail(rec[changed])[0]) == Counter(words_and_tail(orig[changed])[0])
            moved += rec[changed] != orig[changed]
    assert moved > 0
    both_moved = sum(r["sentence1"] != originals[r["id"]]["sentence1"] and
                     r["sentence2"] != originals[r["id"]]["sentence2"] for r in both["random"])
    assert both_moved > 0  # the default (both) perturbs premise and hypothesis of the same item
