"""The host memory allocator, an explicit and recorded choice of the platform.

glibc's malloc serves a block of 32 MiB or more (above its mmap threshold, which grows only up to
32 MiB) with a fresh mmap and hands it back on free, so every such allocation page-faults again:
a fresh 8192 x 2048 bf16 `torch.relu` output costs its page faults on every call. A timing then
includes page faults, unequally between a subject that allocates and a baseline that does not.
The choices (`allocator:` in a platform file's `workbook:` block, applied by the runner to each
notebook kernel's environment before it starts):
- `system`: glibc malloc as it comes;
- `system_kept`: glibc malloc that keeps freed memory (mmap and trim thresholds raised to 4 GiB);
- `jemalloc`, `tcmalloc`: LD_PRELOAD of Debian's libjemalloc2 / libtcmalloc-minimal4, as PyTorch's
  CPU performance tuning guide recommends (jemalloc with the guide's MALLOC_CONF).
A preloaded library that is not installed is bad input: the run refuses with one line naming the
apt package (`Missing`); the backend_cpu section records it `skipped` instead.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Name of the workbook key and of the variable that tells a notebook kernel what it was given.
ENV = "KERNEL_WORKBOOK_ALLOCATOR"
KEPT = str(4 * 2**30)  # glibc thresholds: no block up to this size is mmap'ed or trimmed
# PyTorch CPU performance tuning guide ("Switch Memory allocator"): jemalloc settings.
JEMALLOC_CONF = (
    "oversize_threshold:1,background_thread:true,metadata_thp:auto,"
    "dirty_decay_ms:9000000000,muzzy_decay_ms:9000000000"
)
# Every variable a choice may set: cleared first, so one choice never inherits another's.
VARIABLES = ("LD_PRELOAD", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_CONF")


@dataclass(frozen=True)
class Allocator:
    """One choice: the environment it needs and, for a preloaded one, its library and package."""

    name: str
    env: tuple[tuple[str, str], ...] = ()
    library: str | None = None  # shared object name for LD_PRELOAD
    package: str | None = None  # the Debian/Ubuntu package that installs it


ALLOCATORS = {
    a.name: a
    for a in (
        Allocator("system"),
        Allocator(
            "system_kept", (("MALLOC_MMAP_THRESHOLD_", KEPT), ("MALLOC_TRIM_THRESHOLD_", KEPT))
        ),
        Allocator(
            "jemalloc", (("MALLOC_CONF", JEMALLOC_CONF),), "libjemalloc.so.2", "libjemalloc2"
        ),
        Allocator("tcmalloc", (), "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    )
}
DEFAULT = "system"  # a platform file without the key


class Missing(ValueError):
    """The chosen allocator's library is not installed (one line naming its apt package)."""


def _library_dirs() -> list[Path]:
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [Path("/usr/lib") / multiarch, Path("/lib") / multiarch, Path("/usr/local/lib")]
    return [d for d in (*dirs, Path("/usr/lib")) if str(d)]


def library_path(allocator: Allocator, dirs: list[Path] | None = None) -> Path | None:
    """Where the allocator's library is installed, or None (also for the system allocator)."""
    if allocator.library is None:
        return None
    return next(
        (
            d / allocator.library
            for d in dirs or _library_dirs()
            if (d / allocator.library).exists()
        ),
        None,
    )


def lookup(name: str) -> Allocator:
    """The allocator called `name`; ValueError listing the valid ones."""
    if name not in ALLOCATORS:
        raise ValueError(f"allocator={name!r} must be one of {', '.join(ALLOCATORS)}")
    return ALLOCATORS[name]


def environment(name: str, base: dict | None = None, dirs: list[Path] | None = None) -> dict:
    """`base` (default os.environ) with the allocator's variables in place of any of VARIABLES set
    before (so `system` is glibc as it comes), and ENV naming it. Raises Missing when its library
    is not installed."""
    allocator = lookup(name)
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in VARIABLES}
    if allocator.library is not None:
        path = library_path(allocator, dirs)
        if path is None:
            raise Missing(
                f"allocator {name}: {allocator.library} is not installed "
                f"(apt-get install {allocator.package})"
            )
        env["LD_PRELOAD"] = str(path)
    env.update(dict(allocator.env))
    env[ENV] = name
    return env


def describe(name: str) -> str:
    """'system_kept (MALLOC_MMAP_THRESHOLD_=..., MALLOC_TRIM_THRESHOLD_=...)': the choice and the
    variables it sets, as the report header shows it."""
    allocator = lookup(name)
    settings = [f"{k}={v}" for k, v in allocator.env]
    if allocator.library:
        settings.insert(0, f"LD_PRELOAD={allocator.library}")
    return name + (f" ({', '.join(settings)})" if settings else "")


def _mapped(library: str) -> bool | None:
    """Whether `library` is mapped into this process (None where /proc/self/maps is absent)."""
    try:
        return library in Path("/proc/self/maps").read_text()
    except OSError:
        return None


def in_effect() -> str:
    """The allocator this process runs with: the runner's choice (ENV), checked against the
    libraries really loaded; without ENV, read from the malloc variables it was started with."""
    name = os.environ.get(ENV)
    if name is None:
        preload = os.environ.get("LD_PRELOAD", "")
        found = [a.name for a in ALLOCATORS.values() if a.library and a.library in preload]
        kept = "MALLOC_MMAP_THRESHOLD_" in os.environ
        name = found[0] if found else ("system_kept" if kept else "system")
        settings = [f"{k}={os.environ[k]}" for k in VARIABLES if os.environ.get(k)]
        return name + (f" ({', '.join(settings)})" if settings else "")
    allocator = ALLOCATORS.get(name)
    if allocator is None:
        return f"unknown ({ENV}={name})"
    if allocator.library and _mapped(allocator.library) is False:
        return f"{describe(name)}: NOT loaded in this process"
    return describe(name)
