"""The wheels a GPU host lacks (locks/device.txt): pip's offline install into a target folder
(once: a stamp), the project's Jupyter kernel registered there, the variables that put both in
reach, and the check that the wheel set needs nothing the host's image does not hold."""

from __future__ import annotations

import email.parser
import json
import zipfile
import zlib
from collections import defaultdict
from pathlib import Path

from packaging.requirements import Requirement

from kernel_lib import ROOT
from kernel_lib.locks import LOCKS, canonical, read_lock

REQUIREMENTS = ROOT / LOCKS["device"].path  # their closure, each wheel with its hashes
STAMP = ".installed.json"
KERNEL_NAME = "kernel-workbook"  # run.execute.KERNEL_NAME (it imports papermill, installed here)
# The GPU host's Python and platform: device.mk's `pip download` tags and the markers that pick
# which of a wheel's requirements apply there.
HOST_TAGS = tuple(
    "--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 "
    "--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --only-binary=:all:".split()
)
HOST_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


def image_provides(path: Path = ROOT / LOCKS["device"].excludes) -> frozenset[str]:
    """What the host's image holds already (requirements-device-image.txt), left out of the lock."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return frozenset(canonical(line) for line in lines if line)


def pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """name -> version of each wheel the lock pins."""
    return {name: pin.version for name, pin in read_lock(path).items()}


def install_command(wheels: Path, target: Path, *, python: str, dry_run: bool) -> list[str]:
    """pip installing exactly the pinned wheels from `wheels` into `target`, never from an index
    (--no-deps: the file is the whole set). dry_run: only resolve them for the host's Python."""
    command = [
        python,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-index",
        "--no-deps",
        "--find-links",
        str(wheels),
        "--target",
        str(target),
        "-r",
        str(REQUIREMENTS),
    ]
    return [*command, "--dry-run", *HOST_TAGS] if dry_run else [*command, "-q", "--upgrade"]


def stamp_text(wheels: Path, python: str) -> str:
    """What an install into the target was made of: the interpreter, the pins and the files."""
    names = sorted(p.name for p in wheels.glob("*.whl"))
    return json.dumps({"python": python, "requirements": pins(), "wheels": names}, indent=1)


def installed(wheels: Path, target: Path, python: str) -> bool:
    """True when `target` holds an install of exactly these wheels for `python`."""
    stamp = target / STAMP
    return stamp.exists() and stamp.read_text() == stamp_text(wheels, python)


def kernel_command(target: Path, python: str) -> list[str]:
    """Register the project's Jupyter kernel (`python` with the target on its path) in the
    target's share/jupyter/kernels, which JUPYTER_PATH puts first."""
    return [
        *(python, "-m", "ipykernel", "install", "--prefix", str(target)),
        *("--name", KERNEL_NAME, "--display-name", f"Python ({KERNEL_NAME})"),
    ]


def environment(target: Path, environ: dict, *, on_path: bool) -> dict:
    """The variables that give this process's children and their notebook kernels the target:
    JUPYTER_PATH its share/jupyter (nbconvert's templates, the kernel spec), and PYTHONPATH the
    target itself where `on_path` (not when only rehearsing on another Python)."""

    def first(path: Path, variable: str) -> str:
        rest = [p for p in environ.get(variable, "").split(":") if p and p != str(path)]
        return ":".join([str(path), *rest])

    variables = {"JUPYTER_PATH": first(target / "share" / "jupyter", "JUPYTER_PATH")}
    return {**variables, "PYTHONPATH": first(target, "PYTHONPATH")} if on_path else variables


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """(name, version, Requires-Dist lines) from a wheel's METADATA; ValueError naming the wheel
    when it is no readable wheel (damaged, cut short, without a METADATA naming it)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            meta = email.parser.BytesParser().parsebytes(archive.read(member))
    except (OSError, EOFError, StopIteration, zipfile.BadZipFile, zlib.error) as err:
        why = "no .dist-info/METADATA" if isinstance(err, StopIteration) else err
        raise ValueError(f"{wheel.name} is not a readable wheel ({why})") from None
    if not meta["Name"] or not meta["Version"]:
        raise ValueError(f"{wheel.name} is not a readable wheel (no Name or Version in METADATA)")
    return meta["Name"], meta["Version"], meta.get_all("Requires-Dist") or []


def unmet(dists: dict, available: dict, markers: dict | None = None) -> list[str]:
    """'<name> needs <requirement> (missing | found <version>)' for each requirement of `dists`
    (name -> Requires-Dist lines) that applies under `markers` (default: this Python's), with the
    extras that the others' plain requirements ask for (`bleach[css]`), and that `available`
    (name -> version; None: present, version unknown) does not meet."""

    def applies(req, extra: str = "") -> bool:
        return req.marker is None or req.marker.evaluate({**(markers or {}), "extra": extra})

    parsed = {canonical(n): [Requirement(r) for r in lines] for n, lines in dists.items()}
    extras = defaultdict(set)
    for req in (r for requirements in parsed.values() for r in requirements if applies(r)):
        extras[canonical(req.name)] |= req.extras
    problems = []
    for name, requirements in parsed.items():
        for req in requirements:
            if not any(applies(req, extra) for extra in ("", *extras[name])):
                continue
            key = canonical(req.name)
            if key not in available:
                problems.append(f"{name} needs {req} (missing)")
            elif available[key] is not None and not req.specifier.contains(
                available[key], prereleases=True
            ):
                problems.append(f"{name} needs {req} (found {available[key]})")
    return problems


def check_wheels(wheels: Path) -> list[str]:
    """Why the wheels in `wheels` would not install and run on the host, offline: a pin without
    its wheel, or a requirement (for the host's Python) that neither a wheel nor the image meets."""
    found = {}
    for wheel in sorted(wheels.glob("*.whl")):
        name, version, requires = wheel_metadata(wheel)
        found[canonical(name)] = (version, requires)
    problems = [
        f"{name}=={version} is pinned, its wheel is not in {wheels}"
        for name, version in pins().items()
        if found.get(name, (None,))[0] != version
    ]
    available = {**dict.fromkeys(image_provides()), **{n: v for n, (v, _) in found.items()}}
    requires = {name: lines for name, (_, lines) in found.items()}
    return problems + unmet(requires, available, HOST_MARKERS)
