"""The environments' locks (`locks/<name>.txt`): which input each is resolved from and for which
platform, and a lock file read back as its pins (name -> version and hashes)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from kernel_lib import ROOT

LOCKS_DIR = "locks"


@dataclass(frozen=True)
class Lock:
    """One environment's lock: `uv pip compile` of `input` for one Python and platform."""

    name: str  # the environment: cpu, cuda, macos (.venv), xla, tpu (.venv-xla), cloud, device
    input: str  # the human-edited list of direct dependencies, relative to the root
    platform: str  # uv's --python-platform
    python: str = "3.11"  # the project machine's (the device host's image: 3.12)
    torch_cpu: bool = False  # torch's +cpu wheel, from TORCH_CPU_WHEELS (a find-links location)
    free: tuple[str, ...] = ()  # packages (fnmatch patterns) it may pin apart from the others
    excludes: str | None = None  # a list of packages left out of the resolution (uv --excludes)
    environ: tuple[tuple[str, str], ...] = ()  # variables uv resolves under

    @property
    def path(self) -> str:
        return f"{LOCKS_DIR}/{self.name}.txt"


LINUX, MACOS = "x86_64-manylinux_2_28", "aarch64-apple-darwin"
MACOS_14 = (("MACOSX_DEPLOYMENT_TARGET", "14.0"),)  # torch 2.13's macOS wheels: macOS 14 and up
TORCH_FAMILY = ("torch", "triton", "nvidia-*")  # what torch-xla's own torch release pins apart
SKYPILOT_PINS = ("click", "python-dateutil")  # SkyPilot's caps; in .venv-cloud its own come first
# Each lock keeps the versions of the locks before it (their pins are its constraints), less
# those it may pin apart: any two agree on every package they share.
LOCKS = {
    lock.name: lock
    for lock in (
        Lock("cpu", "requirements.txt", LINUX, torch_cpu=True),
        Lock("cuda", "requirements.txt", LINUX),
        Lock("macos", "requirements.txt", MACOS, environ=MACOS_14),
        Lock("cloud", "requirements-cloud.txt", LINUX, free=SKYPILOT_PINS),
        Lock("xla", "requirements-tpu.txt", LINUX, free=TORCH_FAMILY),
        # libtpu's wheels are manylinux_2_31 (TPU VMs: Ubuntu 22.04)
        Lock("tpu", "requirements-tpu-vm.txt", "x86_64-manylinux_2_31", free=TORCH_FAMILY),
        Lock(
            "device",
            "requirements-device.txt",
            LINUX,
            python="3.12",
            excludes="requirements-device-image.txt",
        ),
    )
}


class LockError(ValueError):
    """A lock file that cannot be read: its path and line."""


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: frozenset[str]


_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """A version without its local label: torch's 2.13.0+cpu is PyPI's 2.13.0 built for CPUs."""
    return version.split("+", 1)[0]


def read_lock(path: Path) -> dict[str, Pin]:
    """name -> Pin of each `name==version` line and its `--hash=` lines (LockError otherwise)."""
    pins: dict[str, tuple[str, set]] = {}
    name = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip().removesuffix("\\").strip()
        if not text:
            continue
        if text.startswith("--hash=") and name:
            pins[name][1].add(text.removeprefix("--hash="))
        elif match := _PIN.fullmatch(text.split(";", 1)[0].strip()):
            name = canonical(match[1])
            pins[name] = (match[2], set())
        else:
            raise LockError(f"{path}:{number}: not a pin or its hash: {line.strip()}")
    return {n: Pin(version, frozenset(hashes)) for n, (version, hashes) in pins.items()}


def digest(path: Path) -> str:
    """The lock's identity in a run's environment: its sha256, 12 hex digits."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def lock_path(lock: Lock, root: Path = ROOT) -> Path:
    return root / lock.path
