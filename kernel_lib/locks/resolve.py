"""The locks resolved from their inputs by uv (`make lock`), and what `make lock-check` finds
wrong with them: a lock stale against its input, two locks that pin a shared package apart."""

from __future__ import annotations

import fnmatch
import functools
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from itertools import combinations
from pathlib import Path

from kernel_lib import ROOT
from kernel_lib.locks.files import LOCKS, Lock, lock_path, public, read_lock

WORK = Path(".cache") / "locks"  # the constraints handed to uv, the check's resolutions
# torch's +cpu wheel for locks/cpu.txt: a find-links location (the Makefile's TORCH_CPU_WHEELS)
TORCH_CPU_ENV = "TORCH_CPU_WHEELS"


@functools.cache
def uv() -> str:
    """The uv installed beside this Python (requirements.txt pins it)."""
    from uv import find_uv_bin  # only `make lock` and `make lock-check` need it

    return find_uv_bin()


def _free(lock: Lock, name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in lock.free)


def _constraints(lock: Lock, root: Path) -> Path | None:
    """The pins of the locks before `lock` (their releases: a +cpu build's is PyPI's), less those
    it may pin apart, as uv's -c file (relative to the root, so that the lock's annotations name
    the same file wherever it is made); None for the first lock."""
    before = list(LOCKS)[: list(LOCKS).index(lock.name)]
    if not before:
        return None
    pins = {}
    for name in reversed(before):
        if lock_path(LOCKS[name], root).exists():
            pins |= {
                n: public(p.version) for n, p in read_lock(lock_path(LOCKS[name], root)).items()
            }
    path = WORK / f"{lock.name}.constraints.txt"
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{n}=={v}" for n, v in sorted(pins.items()) if not _free(lock, n)]
    (root / path).write_text(f"# the locks before {lock.path}\n" + "\n".join(lines) + "\n")
    return path


def compile_command(
    lock: Lock, output: Path, root: Path = ROOT, *, upgrade: bool = False
) -> list[str]:
    """uv pip compile of the lock's input into `output` (relative to the root): every version
    pinned with its hashes; an existing `output`'s versions are kept wherever they still satisfy
    the input, unless `upgrade`."""
    command = [
        *(uv(), "pip", "compile", "--quiet", "--generate-hashes", lock.input, "-o", str(output)),
        *("--python-version", lock.python, "--python-platform", lock.platform),
        *("--custom-compile-command", "make lock"),
    ]
    if lock.torch_cpu:
        wheels = os.environ.get(TORCH_CPU_ENV)
        if not wheels:
            raise ValueError(
                f"{TORCH_CPU_ENV} is not set: it names torch's +cpu wheels (make lock)"
            )
        command += ["--find-links", wheels]
    if constraints := _constraints(lock, root):
        command += ["-c", str(constraints)]
    if lock.excludes:
        command += ["--excludes", lock.excludes]
    return [*command, "--upgrade"] if upgrade else command


def resolve(lock: Lock, output: Path, root: Path = ROOT, *, upgrade: bool = False) -> str:
    """Resolve `lock` into `output`; '' or uv's error, in one line."""
    env = {**os.environ, "UV_NATIVE_TLS": "1", **dict(lock.environ)}
    command = compile_command(lock, output, root, upgrade=upgrade)
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode == 0:
        return ""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return f"{lock.path}: uv could not resolve {lock.input}: " + " ".join(lines[:3])


def make_locks(names: list[str], root: Path = ROOT, *, upgrade: bool = False) -> list[str]:
    """`make lock`: each named lock resolved again from its input (`upgrade`: to the newest
    versions it allows), in LOCKS' order (a lock keeps the pins of those before it); the errors."""
    order = [n for n in LOCKS if n in names]
    return [
        e for n in order if (e := resolve(LOCKS[n], Path(LOCKS[n].path), root, upgrade=upgrade))
    ]


def stale(lock: Lock, root: Path = ROOT) -> list[str]:
    """What `lock` pins that a resolution of its input, keeping the lock's versions wherever
    they still satisfy it, does not: a package it lacks, holds too many, pins at another version,
    or a hash the index does not serve for that version."""
    current = lock_path(lock, root)
    if not current.exists():
        return [f"{lock.path}: missing (make lock)"]
    fresh = WORK / "check" / f"{lock.name}.txt"
    (root / fresh).parent.mkdir(parents=True, exist_ok=True)
    (root / fresh).write_bytes(current.read_bytes())
    if error := resolve(lock, fresh, root):
        return [error]
    have, want = read_lock(current), read_lock(root / fresh)
    problems = [
        f"{n} {want[n].version}: in {lock.input}'s closure, not in the lock"
        for n in sorted(want.keys() - have.keys())
    ]
    problems += [
        f"{n} {have[n].version}: in the lock, not in {lock.input}'s closure"
        for n in sorted(have.keys() - want.keys())
    ]
    for name in sorted(have.keys() & want.keys()):
        if have[name].version != want[name].version:
            problems.append(
                f"{name}: {have[name].version} in the lock, {want[name].version} resolved"
            )
        elif not have[name].hashes or have[name].hashes - want[name].hashes:
            problems.append(f"{name} {have[name].version}: a hash the index does not serve for it")
    return [f"{lock.path} is stale against {lock.input}: {p} (make lock)" for p in problems]


def disagreements(root: Path = ROOT) -> list[str]:
    """Each package two locks pin at different versions (local labels aside: torch's +cpu
    build is its release), unless one of them may pin it apart (Lock.free)."""
    pins = {
        n: read_lock(lock_path(lock, root))
        for n, lock in LOCKS.items()
        if lock_path(lock, root).exists()
    }
    problems = []
    for a, b in combinations(pins, 2):
        for name in sorted(pins[a].keys() & pins[b].keys()):
            va, vb = pins[a][name].version, pins[b][name].version
            if public(va) != public(vb) and not (_free(LOCKS[a], name) or _free(LOCKS[b], name)):
                problems.append(f"{name}: {va} in {LOCKS[a].path}, {vb} in {LOCKS[b].path}")
    return problems


def check_locks(root: Path = ROOT) -> list[str]:
    """`make lock-check`'s findings about the lock files (every lock resolved side by side)."""
    uv()  # found once: sysconfig's first read is not safe from threads
    with ThreadPoolExecutor(len(LOCKS)) as pool:
        found = [
            p
            for problems in pool.map(stale, LOCKS.values(), [root] * len(LOCKS))
            for p in problems
        ]
    return found + disagreements(root)
