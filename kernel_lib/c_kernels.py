"""The small C kernels (fp8/quantize_c.c, moe/fused_c.c), each built once with the system C
compiler (`cc`, or $CC) for the CPU it runs on: -O3, -march=native (or the x86-64 level
ATEN_CPU_CAPABILITY holds torch to, CI's ISA pass), OpenMP; cached in .cache/c_kernels under a
key of the source, the flags, the compiler and the CPU, and loaded with ctypes. Without a compiler
that builds it, `build` raises kernel_lib.checks.Unsupported (a skipped record)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

from kernel_lib.checks import Unsupported
from kernel_lib.params import ROOT
from kernel_lib.platform import device_facts

CACHE_ENV = "KERNEL_WORKBOOK_C_CACHE"  # a folder; default .cache/c_kernels in the repository
X86_LEVELS = {"avx2": "-march=x86-64-v3", "default": "-march=x86-64"}


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def flags() -> list[str]:
    """-O3 and OpenMP for this CPU: on x86 the level ATEN_CPU_CAPABILITY holds torch to, if set
    (CI's AVX2 pass), with 512-bit vectors preferred where the target has them."""
    if not is_x86():
        return ["-O3", "-mcpu=native", "-fopenmp"]
    level = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    return ["-O3", X86_LEVELS.get(level, "-march=native"), "-mprefer-vector-width=512", "-fopenmp"]


def cpu() -> str:

    facts = device_facts("cpu")
    return f"{facts.name} {facts.arch}"


def build_key(source: Path, compiler: str, flags: list[str]) -> str:
    """What a library depends on: source, flags, compiler version and CPU (-march=native)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    text = "\n".join([source.read_text(), " ".join(flags), version.split("\n")[0], cpu()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(source: Path, kernel: str) -> Path:
    """The shared library of `source`, built if not cached; `kernel` names it in errors."""

    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        raise Unsupported(f"{kernel}: no C compiler (cc, or $CC) on PATH")
    options = flags()
    folder = Path(os.environ.get(CACHE_ENV) or ROOT / ".cache" / "c_kernels")
    path = folder / f"{source.stem}-{build_key(source, compiler, options)}.so"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    command = [compiler, *options, "-shared", "-fPIC", str(source), "-o", str(tmp)]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        lines = built.stderr.strip().splitlines() or ["no message"]
        why = next((line for line in lines if "error" in line), lines[-1])[:160]
        raise Unsupported(f"{kernel}: {Path(compiler).name} could not build it: {why}")
    tmp.replace(path)  # atomic: a concurrent run never loads half a file
    return path
