"""A study's evidence: the files its report reads, without checkpoints or data, in a folder small enough to
publish, from which a later version of the report can be rendered again (new rules need no re-training)::

    study.sh --archive DEST       (with the study's settings, as for --report) writes DEST
    python -m tupe_study.archive DEST  renders DEST's report again: report.md, the CSVs and overview.png in DEST

What DEST holds (the layout of a study folder, ``tupe_study.runs``)::

    settings.env, timings.tsv                      as in the study
    c4/valid_blocks.json                           the held-out split's size (tupe_study.valid_se)
    pretrain/V/seedS/train.log, pretrain.done      the log's validation lines only (the curves the report reads);
      settings.json                                the run's recorded settings (its LR among them; not read by the report)
    sweep/V/lr{LR}/seedS/train.log, pretrain.done  likewise, for the LR sweep (tupe_study.sweep)
    finetune/V/seedS/TASK/lr{LR}_seed{K}/          result.json, predictions.json, order.json
    locality/V/seedS.csv, longer/V/seedS.json      as in the study (and longer/V/seedS.blocks.json)
    report.json                                    the report's arguments, the unigram baseline among them (the
                                                   training data, which gives it, is not kept)
    report_spec.json                               the declaration the report states and tests, parsed
                                                   (tupe_study.report_spec); an older archive has none
    manifest.json                                  the SHA-256 of every file above (relative paths, sorted), and
                                                   the declaration: settings.env's lines and the commit of its
                                                   "# declared ... at commit" line (:func:`write_manifest`)

DEST must not exist: an archive is written whole (to DEST.partial, renamed at the end) and never overwritten.

Before it renders, ``python -m tupe_study.archive DEST`` checks the evidence: every file against the manifest (a file
that differs, is missing or is not listed is refused, naming the first: :func:`verify`), then the report's
arguments and its report_spec.json against the declaration in settings.env (:func:`contradictions`,
:func:`archived_spec`); it renders from report_spec.json, or, in an archive without one, from its arguments. An archive written before manifests
(2026-12-06) renders with a warning that it cannot be verified. What a render writes at DEST's top (report.md,
the CSVs, overview.png) is not evidence: it is rewritten by each render, and not in the manifest.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tupe_study.runs import PRETRAIN_DONE, is_validation_line
from tupe_study.report_spec import SPEC_FILE, ReportSpec
from tupe_study.settings import split_variants
from tupe_common.errors import UsageError, exit_main
from tupe_common.io import PARTIAL, atomic_dir, need, write_json

FINETUNE_FILES = ("result.json", "predictions.json", "order.json")
MANIFEST = "manifest.json"
RUN_SETTINGS = "settings.json"  # a pre-training's recorded settings (tupe_pretrain.pretrain.record)
RENDERED = (".md", ".csv", ".png")  # a render's outputs at DEST's top (report.md, study.csv, ..., overview.png)
DECLARED = re.compile(r"^# declared (\S+) at commit (\S+)\s*$")


def _valid_lines(src: str, dst: str) -> int:
    """Copy the validation lines of the fairseq log ``src`` to ``dst``; their number."""
    with open(src, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if is_validation_line(line)]
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return len(lines)


def _copy(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)


def archive(out: str, dest: str, report_argv: Sequence[str], unigram_bits: Optional[float],
            spec: Optional[ReportSpec] = None) -> List[str]:
    """Write the evidence of the study ``out`` into ``dest`` (which must not exist), with ``report_argv`` (the
    report's arguments after the folder, ``tupe_study.stages.report_argv``) and the unigram baseline in report.json,
    and ``spec`` (the report's specification, ``tupe_study.stages.report_spec``) in report_spec.json.
    Returns one line per kind of file kept, for the caller to print."""
    need(out, "folder")
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest}: already exists; an archive is never overwritten (choose another DEST or "
                              "remove it)")
    counts = {"pre-training logs": 0, "validation lines": 0, "fine-tuning files": 0, "locality and longer-input "
              "files": 0}
    with atomic_dir(dest) as tmp:
        for name in ("settings.env", "timings.tsv", os.path.join("c4", "valid_blocks.json")):
            if os.path.isfile(os.path.join(out, name)):
                _copy(os.path.join(out, name), os.path.join(tmp, name))
        for root, _dirs, files in sorted(os.walk(out, followlinks=True)):
            rel = os.path.relpath(root, out)
            top = rel.split(os.sep)[0]
            if top in ("pretrain", "sweep") and "train.log" in files:
                os.makedirs(os.path.join(tmp, rel), exist_ok=True)
                counts["validation lines"] += _valid_lines(os.path.join(root, "train.log"),
                                                           os.path.join(tmp, rel, "train.log"))
                counts["pre-training logs"] += 1
                for name in (PRETRAIN_DONE, RUN_SETTINGS):
                    if name in files:
                        _copy(os.path.join(root, name), os.path.join(tmp, rel, name))
            elif top == "finetune":
                for name in FINETUNE_FILES:
                    if name in files:
                        _copy(os.path.join(root, name), os.path.join(tmp, rel, name))
                        counts["fine-tuning files"] += 1
            elif top in ("locality", "longer") and rel.count(os.sep) == 1:
                for name in files:
                    if name.endswith((".csv", ".json")):
                        _copy(os.path.join(root, name), os.path.join(tmp, rel, name))
                        counts["locality and longer-input files"] += 1
        argv = list(report_argv) + ([] if unigram_bits is None else ["--unigram-bits", repr(unigram_bits)])
        write_json(os.path.join(tmp, "report.json"), {"argv": argv})
        if spec is not None:
            write_json(os.path.join(tmp, SPEC_FILE), spec.to_json())
        listed = write_manifest(tmp, f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}, with the archive "
                                     "(study.sh --archive)")
    return [f"{n} {what}" for what, n in counts.items()] + [f"a manifest of {listed} files"]


# ---- the manifest -------------------------------------------------------------------------------------------


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _is_rendered(rel: str) -> bool:
    """A render's output (report.md, the CSVs, overview.png at the archive's top), or what a killed render left of
    one (``report.md.partial``, which the next render replaces): not evidence."""
    name = rel[:-len(PARTIAL)] if rel.endswith(PARTIAL) else rel
    return "/" not in name and name.endswith(RENDERED)


def evidence_files(dest: str) -> List[str]:
    """The archive's evidence files, relative with '/', sorted: every file but the manifest and a render's outputs."""
    out = []
    for root, _dirs, files in os.walk(dest, followlinks=True):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), dest).replace(os.sep, "/")
            if rel != MANIFEST and not _is_rendered(rel):
                out.append(rel)
    return sorted(out)


def declaration(dest: str) -> Dict[str, Any]:
    """settings.env's lines (comments too) and what its first line records: when it was declared, at which commit
    (None for both in a study older than that line; no lines without a settings.env)."""
    path = os.path.join(dest, "settings.env")
    lines: List[str] = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    m = DECLARED.match(lines[0]) if lines else None
    return {"settings.env": lines, "declared": m.group(1) if m else None, "commit": m.group(2) if m else None}


def write_manifest(dest: str, written: str) -> int:
    """Write ``dest``/manifest.json: when and how it was ``written``, the declaration (:func:`declaration`) and the
    SHA-256 of every evidence file (:func:`evidence_files`); the number of files. JSON rather than a sha256sum file:
    one file holds the hashes, the declaration and the note of when it was written (``jq -r '.sha256 |
    to_entries[] | "\\(.value)  \\(.key)"' manifest.json | sha256sum -c`` checks the hashes without this code)."""
    files = evidence_files(dest)
    if os.path.lexists(os.path.join(dest, MANIFEST)):
        raise FileExistsError(f"{dest}/{MANIFEST}: already exists; a manifest is never overwritten")
    write_json(os.path.join(dest, MANIFEST), {"written": written, "declaration": declaration(dest),
                                              "sha256": {rel: _sha256(os.path.join(dest, rel)) for rel in files}})
    return len(files)


def verify(dest: str) -> Optional[str]:
    """Check ``dest`` against its manifest: a ValueError naming the first file (in sorted order) that differs, is
    missing or is not listed, or a declaration that is not settings.env's; None when all agree, or the warning to
    print when ``dest`` has no manifest (an archive written before them)."""
    path = os.path.join(dest, MANIFEST)
    if not os.path.isfile(path):
        return (f"{dest} has no {MANIFEST} (archived before manifests, 2026-12-06): its files cannot be verified; "
                "rendering it as it is")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        listed = manifest["sha256"]
        if not isinstance(listed, dict):
            raise TypeError("sha256 is not an object")
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an archive's manifest ({e})") from None
    present = evidence_files(dest)
    for rel in sorted(set(listed) | set(present)):
        if rel not in present:
            if os.path.isfile(os.path.join(dest, rel)):  # listed, yet a render's name: it was rewritten over
                raise ValueError(f"{dest}/{rel}: listed in {MANIFEST} but a render's output; an archive's evidence "
                                 "is never at its top as .md, .csv or .png")
            raise ValueError(f"{dest}/{rel}: missing (listed in {MANIFEST}): the archive is not as written")
        if rel not in listed:
            raise ValueError(f"{dest}/{rel}: not in {MANIFEST} (an extra file): the archive is not as written")
        digest = _sha256(os.path.join(dest, rel))
        if digest != listed[rel]:
            raise ValueError(f"{dest}/{rel}: differs from {MANIFEST} (SHA-256 {digest[:12]}..., listed "
                             f"{str(listed[rel])[:12]}...): the archive is not as written")
    if manifest.get("declaration", {}).get("settings.env") != declaration(dest)["settings.env"]:
        raise ValueError(f"{path}: its declaration differs from {dest}/settings.env: the manifest is not as written")
    return None


# ---- the report's arguments against the declaration ----------------------------------------------------------


def _options(argv: Sequence[str]) -> Dict[str, str]:
    """``--name value`` (or ``--name=value``) pairs of the report's arguments."""
    out: Dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = str(argv[i])
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg.partition("=")
            out[name] = value
        elif arg.startswith("--") and i + 1 < len(argv):
            out[arg] = str(argv[i + 1])
            i += 1
        i += 1
    return out


def _models(text: str, default: Optional[Tuple[int, ...]]) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Variants as written (VARIANTS, or the report's --variants with V+electra labels) -> each variant's seeds,
    sorted (None: ``default``, itself None when not known)."""
    return {label.partition("+")[0].replace("_", "-"): tuple(sorted(own)) if own else default
            for label, own in split_variants(text)}


def contradictions(argv: Sequence[str], settings_text: str) -> List[Tuple[str, str, str]]:
    """What the report's arguments ``argv`` state that settings.env contradicts, compared by meaning
    (tupe_study.settings.canonical): (setting, the arguments' value, settings.env's). Compared where both state it;
    the declaration (ENDPOINTS, EQUIVALENCE_BITS, UPDATES_TO_TARGET) always, its absence read as none on either
    side (the report's default, and an older study's that recorded no such line). The report's other arguments
    (--title, --min-gap-bits, --finetune-grid, --unigram-bits) are not settings of the declaration."""
    from tupe_study.settings import _lines, canonical

    opts, env = _options(argv), _lines(settings_text)
    out: List[Tuple[str, str, str]] = []

    def compare(setting: str, option: str, mine: str, theirs: str) -> None:
        if canonical(setting, mine) != canonical(setting, theirs):
            out.append((setting, f"{option} {mine}", f"{setting}={theirs}"))

    for setting, option in (("ENDPOINTS", "--endpoints"), ("EQUIVALENCE_BITS", "--equivalence-bits")):
        compare(setting, option, opts.get(option, "none"), env.get(setting, "none"))
    for setting, option in (("TOTAL_UPDATES", "--total-updates"), ("WARMUP", "--warmup")):
        if option in opts and setting in env:
            compare(setting, option, opts[option], env[setting])
    if "--valid-interval" in opts and "TOTAL_UPDATES" in env and "VALID_POINTS" in env:
        try:
            every = str(int(env["TOTAL_UPDATES"]) // int(env["VALID_POINTS"]))
        except (ValueError, ZeroDivisionError):
            every = f"{env['TOTAL_UPDATES']}/{env['VALID_POINTS']}"
        if canonical("TOTAL_UPDATES", opts["--valid-interval"]) != canonical("TOTAL_UPDATES", every):
            out.append(("TOTAL_UPDATES/VALID_POINTS", f"--valid-interval {opts['--valid-interval']}",
                        f"TOTAL_UPDATES={env['TOTAL_UPDATES']} / VALID_POINTS={env['VALID_POINTS']} = {every}"))
    target, declared = opts.get("--updates-to-target"), env.get("UPDATES_TO_TARGET")
    if target is not None or declared is not None:
        try:
            same = target is not None and declared is not None and abs(float(target) - float(declared)) <= 5e-5
        except ValueError:
            same = target == declared
        if not same:
            out.append(("UPDATES_TO_TARGET", f"--updates-to-target {target or '(none)'}",
                        f"UPDATES_TO_TARGET={declared if declared is not None else '(none)'}"))
    if "--variants" in opts and ("VARIANTS" in env or "PRETRAIN_SEEDS" in env):
        out += _variant_contradictions(opts, env)
    return out


def _variant_contradictions(opts: Dict[str, str], env: Dict[str, str]) -> List[Tuple[str, str, str]]:
    """The report's models and seeds against VARIANTS and PRETRAIN_SEEDS (each compared where recorded)."""
    from tupe_study.settings import canonical

    default = canonical("PRETRAIN_SEEDS", env["PRETRAIN_SEEDS"]) if "PRETRAIN_SEEDS" in env else None
    report_default = tuple(sorted(int(s) for s in opts.get("--pretrain-seeds", "1").replace(",", " ").split()))
    try:
        mine = _models(opts["--variants"], report_default)
        theirs = _models(env.get("VARIANTS", "all"), default if isinstance(default, tuple) else None)
    except ValueError:
        return [("VARIANTS", f"--variants {opts['--variants']}", f"VARIANTS={env.get('VARIANTS', '')}")]
    declared = " ".join(f"{k}={v}" for k, v in env.items() if k in ("VARIANTS", "PRETRAIN_SEEDS"))
    setting = "/".join(k for k in ("VARIANTS", "PRETRAIN_SEEDS") if k in env)
    if "all" not in theirs and set(mine) != set(theirs):
        return [(setting, f"--variants {opts['--variants']}", declared)]
    for name, seeds in mine.items():
        own = theirs.get(name, theirs.get("all"))
        if own is not None and seeds != own:
            return [(setting, f"--variants {opts['--variants']}", declared)]
    return []


def render(dest: str) -> int:
    """Render the report of the archive ``dest`` again, with its recorded arguments (tupe_study.report's exit status),
    once its files agree with its manifest (:func:`verify`; none: a warning) and its report.json with its
    settings.env (:func:`contradictions`); a ValueError, naming the first thing that does not, otherwise."""
    from tupe_study.report import main as report

    need(dest, "folder")
    warning = verify(dest)
    if warning:
        print(f"tupe_study.archive: warning: {warning}", file=sys.stderr)
    need(os.path.join(dest, "report.json"))
    with open(os.path.join(dest, "report.json"), encoding="utf-8") as f:
        try:
            argv = [str(a) for a in json.load(f)["argv"]]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{dest}/report.json: not an archive's report.json ({e}); write it with "
                             "study.sh --archive") from None
    settings = os.path.join(dest, "settings.env")
    if os.path.isfile(settings):
        with open(settings, encoding="utf-8") as f:
            wrong = contradictions(argv, f.read())
        if wrong:
            setting, mine, theirs = wrong[0]
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            raise ValueError(f"{dest}/report.json contradicts {dest}/settings.env in {setting}: {mine} against "
                             f"{theirs}{more}; the report would render a declaration the study did not make")
    return report([dest] + argv, archived_spec(dest))


def archived_spec(dest: str) -> Optional[ReportSpec]:
    """The report specification of the archive ``dest`` (its report_spec.json), once it agrees with the declaration
    in its settings.env (a ValueError naming both files otherwise); None for an archive written before that file
    (its report arguments declare, checked by :func:`contradictions`)."""
    path = os.path.join(dest, SPEC_FILE)
    if not os.path.isfile(path):
        return None
    spec = ReportSpec.load(path)
    settings = os.path.join(dest, "settings.env")
    if os.path.isfile(settings):
        from tupe_study.settings import _lines

        with open(settings, encoding="utf-8") as f:
            try:
                declared = ReportSpec.from_settings(_lines(f.read()))
            except UsageError as e:
                raise ValueError(f"{settings}: {e}") from None
        wrong = spec.disagreement(declared)
        if wrong:
            raise ValueError(f"{path} disagrees with {settings} in {wrong}: the report would state a declaration "
                             "the study did not make")
    return spec


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__.split("\n\n")[0] + "\n\nUsage: python -m tupe_study.archive DEST (an archive written by "
              "study.sh --archive DEST)", file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    try:
        return render(args[0])
    except ValueError as e:
        print(f"tupe_study.archive: error: {e}", file=sys.stderr)
        return 1


def cli() -> None:
    """The console script ``tupe-study-archive``."""
    exit_main(main, "tupe-study-archive")


if __name__ == "__main__":
    exit_main(main, "python -m tupe_study.archive")
