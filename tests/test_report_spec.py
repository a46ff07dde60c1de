"""The report's specification (tupe_study.report_spec): the declaration parsed once, carried as an object from the
plan to the report, kept by an archive as report_spec.json and read back by its render; an archive written before
that file renders as before."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from tupe_study.archive import archive, main as archive_main, render, verify
from tupe_study.report_spec import SPEC_FILE, ReportSpec
from tupe_study.settings import _lines
from tupe_common.errors import UsageError

PUBLISHED = ROOT / "docs" / "results" / "2026-12-02_cpu-small_seeds10" / "evidence"
RENDERED = ("report.md", "study.csv", "endpoints.csv", "correlation.csv", "differences.csv", "order.csv")


def _archive(tmp_path: Path, spec) -> Path:
    """An archive of the published evidence (read as a study), with ``spec`` as its report_spec.json (None: none)."""
    study_dir, dest = tmp_path / "study", tmp_path / "evidence"
    shutil.copytree(PUBLISHED, study_dir)
    (study_dir / "manifest.json").unlink()
    argv = json.loads((PUBLISHED / "report.json").read_text())["argv"]
    archive(str(study_dir), str(dest), argv[:-2], float(argv[-1]), spec)  # the unigram baseline as recorded
    return dest


def _published_spec() -> ReportSpec:
    return ReportSpec.from_settings(_lines((PUBLISHED / "settings.env").read_text()))


@pytest.mark.parametrize("endpoints, margin, target", [
    ("none", "none", None),
    ("final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a", "0.05", None),
    ("updates_to@halfway:tupe_r:bert-a final_loss:tupe-r:bert-a updates_to@9:bert-a:tupe-r", "0.1", 8.1234),
])
def test_spec_round_trips_through_json(endpoints, margin, target):
    """to_json, written as text and read back, gives the same specification: the text as declared, the endpoints as
    parsed (names with dashes), the margin, the target and the family's size."""
    spec = ReportSpec.declare(endpoints, margin, target)
    data = json.loads(json.dumps(spec.to_json()))
    assert ReportSpec.from_json(data) == spec
    assert data["family_size"] == spec.family_size == len(endpoints.split()) * (endpoints != "none")
    assert all("_" not in e["a"] + e["b"] for e in data["endpoints"])


def test_spec_parses_the_declaration_once_and_refuses_what_is_wrong(tmp_path):
    """A bad declaration is the one parser's UsageError; a report_spec.json that is not one is named."""
    with pytest.raises(UsageError, match="ENDPOINTS entry 'final_loss:a'"):
        ReportSpec.declare("final_loss:a")
    with pytest.raises(UsageError, match="EQUIVALENCE_BITS"):
        ReportSpec.declare("none", "-1")
    bad = tmp_path / SPEC_FILE
    bad.write_text(json.dumps({**ReportSpec.declare("final_loss:a:b").to_json(), "family_size": 3}))
    with pytest.raises(ValueError, match=f"{bad}: not a report specification"):
        ReportSpec.load(str(bad))
    # the text the report quotes must declare the endpoints it tests (an edited quote passed: the endpoints alone
    # were compared with settings.env); the same question in other spelling is the same
    spec = ReportSpec.declare("final_loss:tupe-r:bert-a updates_to@halfway:tupe-r:bert-a").to_json()
    for text in ("loss_auc:bert-a:tupe-r updates_to@4.0:tupe-r:bert-a", "final_loss:tupe-r:bert-a", "final_loss:a"):
        bad.write_text(json.dumps({**spec, "endpoints_text": text}))
        with pytest.raises(ValueError, match=f"{bad}: not a report specification \\(endpoints_text"):
            ReportSpec.load(str(bad))
    bad.write_text(json.dumps({**spec, "endpoints_text": "final_loss:tupe_r:bert_a updates_to@halfway:tupe-r:bert-a"}))
    assert ReportSpec.load(str(bad)).endpoints == ReportSpec.from_json(spec).endpoints


def test_archive_with_report_spec_json_renders_from_it_as_an_old_one_renders(tmp_path, monkeypatch):
    """A new archive keeps report_spec.json in its manifest and hands it to the report as an object; what it renders
    is byte for byte what the archive without it (the published one, its manifest unchanged) renders."""
    import tupe_study.report as report

    old = tmp_path / "old"
    shutil.copytree(PUBLISHED, old)
    assert verify(str(old)) is None and not (old / SPEC_FILE).exists()
    assert render(str(old)) == 0
    new = _archive(tmp_path, _published_spec())
    manifest = json.loads((new / "manifest.json").read_text())
    assert SPEC_FILE in manifest["sha256"] and verify(str(new)) is None
    real, given = report.main, []
    monkeypatch.setattr(report, "main", lambda argv, spec=None: given.append(spec) or real(argv, spec))
    assert render(str(new)) == 0
    assert given == [_published_spec()]
    for name in RENDERED:
        assert (new / name).read_bytes() == (old / name).read_bytes(), name
    assert "Holm family of 2" in (new / "report.md").read_text()


def test_report_spec_json_that_disagrees_with_settings_env_is_refused(tmp_path, capsys):
    """A report_spec.json (in the manifest: written with the archive) that declares another margin than settings.env
    is refused in one error line naming both files and the setting; nothing is rendered."""
    spec = ReportSpec.declare("final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a", "0.1")
    dest = _archive(tmp_path, spec)
    assert verify(str(dest)) is None
    capsys.readouterr()
    assert archive_main([str(dest)]) == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == (f"tupe_study.archive: error: {dest}/{SPEC_FILE} disagrees with {dest}/settings.env in "
                   "EQUIVALENCE_BITS: 0.1 against 0.05: the report would state a declaration the study did not make")
    assert not (dest / "report.md").exists()
    reordered = ReportSpec.declare("loss_auc:tupe-r:bert-a final_loss:tupe_r:bert-a", "0.05")
    assert reordered.disagreement(_published_spec()) is None  # one family, in any order, as settings.env compares
    assert "ENDPOINTS" in ReportSpec.declare("final_loss:tupe-r:bert-a", "0.05").disagreement(_published_spec())
