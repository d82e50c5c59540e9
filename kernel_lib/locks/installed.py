"""Which environment measured a run: the lock this Python's environment was installed from
(`make setup` copies it into the venv) and how the installed distributions differ from it."""

from __future__ import annotations

import functools
import importlib.metadata
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from kernel_lib.locks.files import canonical, digest, read_lock

INSTALLED = "kernel-workbook-lock"  # <venv>/kernel-workbook-lock/<name>.txt: the lock installed
INSTALLER = frozenset({"pip"})  # what made the venv, never in a lock


@dataclass(frozen=True)
class LockState:
    """The environment against its lock: `label` is what run.json and each record carry."""

    name: str | None  # the lock's name (files.LOCKS); None: no lock installed this environment
    digest: str | None
    differs: tuple[str, ...] = ()  # one line a package: 'name installed (lock: version)'

    @property
    def label(self) -> str:
        if self.name is None:
            return "no lock"
        count = len(self.differs)
        state = (
            "locked"
            if not count
            else f"{count} package{'s' * (count != 1)} differ{'s' * (count == 1)} from the lock"
        )
        return f"{self.name} {self.digest}, {state}"


def installed_lock(prefix: Path | None = None) -> Path | None:
    """The lock file `make setup` installed into the environment at `prefix` (sys.prefix)."""
    found = sorted(Path(prefix or sys.prefix, INSTALLED).glob("*.txt"))
    return found[0] if len(found) == 1 else None


def extras(pins: dict, installed: dict[str, str]) -> list[str]:
    """The packages installed and not in the lock, the installer aside."""
    return sorted(installed.keys() - pins.keys() - INSTALLER)


def differences(pins: dict, installed: dict[str, str]) -> list[str]:
    """Each package whose installed version is not its pin: another version, not installed, or
    installed and not in the lock."""
    lines = [
        f"{name} {installed.get(name, 'not installed')} (lock: {pin.version})"
        for name, pin in sorted(pins.items())
        if installed.get(name) != pin.version
    ]
    return lines + [f"{n} {installed[n]} (not in the lock)" for n in extras(pins, installed)]


def installed_versions() -> dict[str, str]:
    """name -> version of each distribution installed in this environment: its site-packages,
    not the rest of sys.path (setuptools puts its vendored packages there when imported)."""
    paths = sysconfig.get_paths()
    found = importlib.metadata.distributions(path=sorted({paths["purelib"], paths["platlib"]}))
    return {canonical(d.metadata["Name"]): d.version for d in found if d.metadata["Name"]}


@functools.cache
def lock_state() -> LockState:
    """This Python's environment against the lock it was installed from."""
    lock = installed_lock()
    if lock is None:
        return LockState(None, None)
    return LockState(
        lock.stem, digest(lock), tuple(differences(read_lock(lock), installed_versions()))
    )
