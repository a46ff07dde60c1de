"""The carried environment of ``make gpu-check``: wheels for a GPU machine that has Python and its own torch but
no network (``make gpu-wheels``), and their offline install there.

``download`` derives the requirement list from this environment's installed metadata: the project's
``install_requires`` and ``pytest`` (the CUDA tests), followed through every dependency's own requirements
(markers evaluated for the target Python on Linux x86_64), each pinned to its version in ``constraints.txt``.
It stops at torch: torch, the packages torch itself requires, torchaudio and torchvision (built for one torch
version) and the CUDA wheels (``nvidia-*``, triton) come with the machine's torch and are never downloaded.
Of the rest it downloads what the borrowed machine lacks: ``ON_MACHINE`` lists what that machine's image
holds (scipy, scikit-learn and numpy alone would take 61 MiB of the 64 a borrowed machine takes); ``--all``
downloads everything but torch, for another machine. Binary wheels come from the package index for the target
Python and platform (``pip download --only-binary=:all:``); a pure-Python package published as source only is
built here into a ``py3-none-any`` wheel. ``requirements.txt`` in the folder lists every derived requirement,
each marked carried or expected on the machine.

``install`` puts every wheel of the folder into ``--target`` (``pip install --no-index --no-deps --target``)
with the interpreter that runs it: nothing is looked up on an index and torch is never touched. It then lists
the expected packages the machine lacks or holds at another version; the check runs with
``PYTHONPATH=TARGET:.``.

    python bench/gpu_wheels.py download --dir .gpu-wheels --python-version 3.12
    python bench/gpu_wheels.py install --dir .gpu-wheels --target .gpu-site
    python bench/gpu_wheels.py list --python-version 3.12      # the derived requirements, nothing downloaded
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "tupe_plugin"
EXTRA_ROOTS = ("pytest",)  # the check runs the CUDA tests
# Never downloaded: the machine's torch brings these (and torch's own requirements, read from its metadata).
TORCH_FAMILY = {"torch", "torchaudio", "torchvision", "triton"}
# The project's dependencies that the borrowed GPU machine's image already holds (its pip list, 2026-11):
# not carried unless --all; ``install`` reports any of them missing there.
ON_MACHINE = {
    "click", "cloudpickle", "colorama", "cython", "iniconfig", "joblib", "lxml", "matplotlib", "narwhals",
    "numpy", "packaging", "pluggy", "portalocker", "pygments", "pytest", "pyyaml", "regex", "sacrebleu",
    "scikit-learn", "scipy", "sentencepiece", "tabulate", "tensorboard", "threadpoolctl", "tqdm",
    "contourpy", "cycler", "fonttools", "kiwisolver", "pillow", "pyparsing", "python-dateutil", "six",
    "absl-py", "grpcio", "markdown", "markupsafe", "protobuf", "tensorboard-data-server", "werkzeug",
}
# Manylinux tags a current x86_64 Linux with glibc 2.28 or later accepts.
PLATFORMS = ("manylinux2014_x86_64",) + tuple(f"manylinux_2_{minor}_x86_64" for minor in range(17, 29))
LIMIT_MIB = 56  # the folder; the work tree and the rest of the 64 MiB take the remainder


def pins(path: Path = ROOT / "constraints.txt") -> Dict[str, str]:
    """name (canonical) -> exact version, from the ``name==version`` lines of constraints.txt."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[canonicalize_name(name)] = version.strip()
    return out


def target_environment(python_version: str) -> Dict[str, str]:
    """Marker variables of CPython ``python_version`` on Linux x86_64 (for evaluating ``; python_version < ...``)."""
    env = default_environment()
    env.update(python_version=python_version, python_full_version=f"{python_version}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", os_name="posix",
               implementation_name="cpython", platform_python_implementation="CPython")
    return env


def requirements_of(dist: str, env: Dict[str, str], extras: Iterable[str] = ()) -> List[str]:
    """Canonical names ``dist`` requires in ``env`` (with ``extras``), from its installed metadata."""
    names = []
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate(dict(env, extra=e)) for e in ("", *extras)):
            names.append(canonicalize_name(req.name))
    return names


def derive(python_version: str) -> Dict[str, str]:
    """name -> pinned version of every package the project needs besides torch's (module docstring)."""
    env = target_environment(python_version)
    skip: Set[str] = set(TORCH_FAMILY) | set(requirements_of("torch", env))
    pinned = pins()
    todo, found = [PROJECT], {}
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found or name in skip or name.startswith("nvidia-"):
            continue
        if name != canonicalize_name(PROJECT):
            if name not in pinned:
                raise SystemExit(f"constraints.txt: no pin for {name!r}, a dependency of this project; add its "
                                 f"version (pip freeze) and run again")
            found[name] = pinned[name]
        try:
            todo += requirements_of(name, env) + (list(EXTRA_ROOTS) if name == canonicalize_name(PROJECT) else [])
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed here, so its requirements are unknown: run `make install` "
                             "first (the list is derived from the installed metadata)") from None
    return dict(sorted(found.items()))


def carried(wanted: Dict[str, str], everything: bool = False) -> Dict[str, str]:
    """The part of ``wanted`` that goes into the folder: all of it, or what the machine lacks (``ON_MACHINE``)."""
    return {n: v for n, v in wanted.items() if everything or n not in ON_MACHINE}


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True)


def download(folder: Path, python_version: str, limit_mib: float, everything: bool = False) -> List[Path]:
    """Fill ``folder`` (emptied of wheels first) with the carried wheels; returns them. Exits 1 with pip's
    message when one has no wheel for the target, or when the folder outgrows ``limit_mib``."""
    wanted = derive(python_version)
    carry = carried(wanted, everything)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    abi = "cp" + python_version.replace(".", "")
    target = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
              "--abi", abi, "--abi", "abi3", "--abi", "none", *[a for p in PLATFORMS for a in ("--platform", p)]]
    specs = [f"{n}=={v}" for n, v in carry.items()]
    p = pip("download", "--no-deps", "-q", "-d", str(folder), *target, *specs)
    if p.returncode != 0:  # one pip call for speed; on failure, package by package to build the source-only ones
        for spec in specs:
            if wheel_of(spec.split("==")[0], folder) is None:
                p = pip("download", "--no-deps", "-q", "-d", str(folder), *target, spec)
                if p.returncode != 0:
                    build_pure_wheel(spec, folder)
    wheels = sorted(folder.glob("*.whl"))
    check_folder(wheels, carry, limit_mib)
    (folder / "requirements.txt").write_text(
        f"# bench/gpu_wheels.py download --python-version {python_version}{' --all' if everything else ''}: "
        "every requirement besides torch's; 'carried' ones are wheels of this folder\n"
        + "".join(f"{n}=={v}  # {'carried' if n in carry else 'expected on the machine'}\n" for n, v in wanted.items()),
        encoding="utf-8")
    return wheels


def wheel_of(name: str, folder: Path) -> Optional[Path]:
    """The wheel of package ``name`` in ``folder``, or None."""
    return next((w for w in folder.glob("*.whl") if parse_wheel_filename(w.name)[0] == canonicalize_name(name)), None)


def build_pure_wheel(spec: str, folder: Path) -> None:
    """A wheel of ``spec`` built here from its source; only a pure-Python one (``none-any``) fits any machine."""
    with tempfile.TemporaryDirectory() as tmp:
        p = pip("wheel", "--no-deps", "-q", "--no-binary", ":all:", "-w", tmp, spec)
        built = list(Path(tmp).glob("*.whl"))
        if p.returncode != 0 or not built:
            raise SystemExit(f"{spec}: no wheel for the target and no source build here:\n{p.stderr[-2000:]}")
        tags = parse_wheel_filename(built[0].name)[3]
        if not all(t.abi == "none" and t.platform == "any" for t in tags):
            raise SystemExit(f"{spec}: no wheel for the target, and the one built here is for this machine only "
                             f"({built[0].name})")
        shutil.move(str(built[0]), folder / built[0].name)


def check_folder(wheels: List[Path], carry: Dict[str, str], limit_mib: float) -> None:
    """One wheel per carried package at its pinned version, no torch or CUDA wheel, under ``limit_mib``."""
    have = {}
    for w in wheels:
        name, version = parse_wheel_filename(w.name)[:2]
        have[name] = str(version)
        if name in TORCH_FAMILY or name.startswith("nvidia-"):
            raise SystemExit(f"{w}: torch and CUDA wheels must never be carried (the machine's torch stays)")
    missing = {n: v for n, v in carry.items() if have.get(n) != v}
    if missing:
        raise SystemExit(f"wheels missing or at another version: {missing}")
    mib = sum(w.stat().st_size for w in wheels) / 2**20
    if mib > limit_mib:
        biggest = sorted(wheels, key=lambda w: -w.stat().st_size)[:5]
        raise SystemExit(f"the wheels take {mib:.1f} MiB, over the {limit_mib} MiB limit; the largest: "
                         + ", ".join(f"{w.name} {w.stat().st_size / 2**20:.1f} MiB" for w in biggest))


def read_requirements(folder: Path) -> Dict[str, Tuple[str, bool]]:
    """name -> (version, carried) from the folder's requirements.txt."""
    out = {}
    for line in (folder / "requirements.txt").read_text(encoding="utf-8").splitlines():
        spec, _, note = line.partition("#")
        if "==" in spec:
            name, version = spec.strip().split("==")
            out[canonicalize_name(name)] = (version, note.strip() == "carried")
    return out


def install(folder: Path, target: Path) -> List[str]:
    """Every wheel of ``folder`` into ``target``, offline, without dependencies (the folder and the machine
    hold the full set). Returns one line per expected package the machine lacks or holds at another version."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels or not (folder / "requirements.txt").is_file():
        raise SystemExit(f"{folder}: no wheels or no requirements.txt; run `make gpu-wheels` on a machine with "
                         "network first")
    p = pip("install", "--isolated", "--no-index", "--no-deps", "--no-compile", "-q", "--upgrade", "--target", str(target),
            *map(str, wheels))
    if p.returncode != 0:
        raise SystemExit(f"pip install from {folder} failed:\n{p.stdout[-2000:]}{p.stderr[-4000:]}")
    found = {canonicalize_name(d.metadata["Name"]): d.version
             for d in metadata.distributions(path=[str(target)] + sys.path)}
    notes = []
    for name, (version, is_carried) in read_requirements(folder).items():
        if name not in found:
            notes.append(f"{name}=={version}: missing ({'carried but not installed' if is_carried else 'expected on the machine'})")
        elif found[name] != version:
            notes.append(f"{name}: {found[name]} here, {version} pinned")
    return notes


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("download", "list"):
        p = sub.add_parser(name)
        p.add_argument("--python-version", default="3.12", help="the target machine's Python (default 3.12)")
        p.add_argument("--all", action="store_true", help="also the packages the borrowed machine holds (ON_MACHINE)")
        if name == "download":
            p.add_argument("--dir", type=Path, default=ROOT / ".gpu-wheels", help="the wheel folder")
            p.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="largest folder size allowed")
    p = sub.add_parser("install")
    p.add_argument("--dir", type=Path, default=ROOT / ".gpu-wheels", help="the wheel folder")
    p.add_argument("--target", type=Path, required=True, help="folder to install into (put it on PYTHONPATH)")
    args = ap.parse_args(argv)
    if args.command == "list":
        wanted = derive(args.python_version)
        keep = carried(wanted, args.all)
        print("\n".join(f"{n}=={v}{'' if n in keep else '  # expected on the machine'}" for n, v in wanted.items()))
    elif args.command == "download":
        wheels = download(args.dir, args.python_version, args.limit_mib, args.all)
        mib = sum(w.stat().st_size for w in wheels) / 2**20
        print(f"{len(wheels)} wheels for CPython {args.python_version}, {mib:.1f} MiB, in {args.dir}")
    else:
        notes = install(args.dir, args.target)
        print(f"installed {len(list(args.dir.glob('*.whl')))} wheels from {args.dir} into {args.target}")
        for line in notes:
            print(f"warning: {line}")


if __name__ == "__main__":
    main()
