"""The manual stays true by itself: the tables of variants are the registry's, every link inside the
repository leads to a file (and heading) that exists, and the README stays short enough to read first."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
from conftest import ROOT
from references import reference

from tupe_tools.variant_table import REGENERATE, TABLES, flag_difference, marked, regenerate
from tupe_core.registry import VARIANTS
from tupe_core.registry import flag_values, from_flags

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TABLES_IN = {"README.md": ["summary"], "docs/positional_encodings.md": ["flags"]}


@pytest.mark.parametrize("path, names", sorted(TABLES_IN.items()))
def test_variant_tables_are_the_registrys(path, names):
    text = (ROOT / path).read_text(encoding="utf-8")
    for name in names:
        assert marked(name).search(text), f"{path} lost its <!-- variants:{name} --> markers"
    assert regenerate(text) == text, f"{path}: a table of variants differs from the registry; run `{REGENERATE}`"


def test_summary_table_has_one_row_per_variant_in_registry_order():
    rows = [line for line in TABLES["summary"]().splitlines()[2:]]
    assert [row.split("`")[1] for row in rows] == [f"{name}_base" for name in VARIANTS]
    assert "\\|j-i\\|" in TABLES["summary"](), "a | inside a cell must be escaped, or it splits the cell"


def test_flag_difference_rebuilds_the_variant_on_the_default_arch():
    """Parse the flags back, as fairseq's parser would on top of TUPE-R's defaults: the same variant."""
    base = VARIANTS["tupe_r"]
    for name, variant in VARIANTS.items():
        cell = flag_difference(variant, base)
        if reference(name).ARCH_ONLY:  # tests/references/<name>.py: no flag combination reaches it
            assert cell.startswith(f"only `--arch {name}_*`"), name
            continue
        values = flag_values(base)
        tokens = cell.strip("`").split() if cell.startswith("`") else []
        for i, token in enumerate(tokens):
            if not token.startswith("--"):
                continue
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                field, value = token[2:].replace("-", "_"), tokens[i + 1]
                values[field] = int(value) if isinstance(values[field], int) and value.isdigit() else value
            elif token.startswith("--no-"):
                values[token[5:].replace("-", "_")] = False
            else:
                values[token[2:].replace("-", "_")] = True
        assert from_flags(values) == variant, name


def test_overview_table_of_positional_encodings_lists_the_registry():
    """The hand-written overview (signal, scale, map) in docs/positional_encodings.md names every variant, in order."""
    text = (ROOT / "docs/positional_encodings.md").read_text(encoding="utf-8")
    overview = text.split("| variant | position signal |", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"^\| `(\w+)` \|", overview, re.MULTILINE)
    assert names == list(VARIANTS), "add the new variant's row to the first table of docs/positional_encodings.md"


def _links(path: Path) -> Iterator[Tuple[int, str]]:
    """(line, target) of every Markdown link outside code and HTML comments."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"), flags=re.S)
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or line.startswith("    "):
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
            yield number, target


def _anchors(path: Path) -> List[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return [re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_inside_the_repository_lead_somewhere(path):
    broken = []
    for number, target in _links(path):
        if re.match(r"[a-z]+:", target):
            continue  # a web address: not checked (no network in the tests)
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{path.relative_to(ROOT)}:{number}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{path.relative_to(ROOT)}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < 250, f"README.md has {lines} lines: move details into docs/ and link them"


def test_every_command_the_manual_names_is_installed():
    """Each ``tupe-*`` word of the manual is a console script of setup.py (or a variant's name): a renamed or
    misspelt command in a doc fails here, not in a user's shell."""
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    scripts = set(re.findall(r'"(tupe-[a-z0-9-]+)=', setup))
    named = {(m, f"{p.relative_to(ROOT)}") for p in DOCS if "results" not in p.parts
             for m in re.findall(r"(?:^|[\s`(])(tupe-[a-z](?:[a-z0-9-]*[a-z0-9])?)", p.read_text(encoding="utf-8"), re.MULTILINE)}
    unknown = sorted(f"{doc}: {name}" for name, doc in named if name not in scripts and name.replace("-", "_") not in VARIANTS)
    assert len(scripts) >= 25 and not unknown, unknown
