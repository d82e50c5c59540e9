"""The small C kernels (fp8/quantize_c.c, moe/fused_c.c), each built once with the system C
compiler (`cc`, or $CC) for the CPU it runs on: -O3, -march=native (or the x86-64 level
ATEN_CPU_CAPABILITY holds torch to, CI's ISA pass), OpenMP; cached in .cache/c_kernels under a
key of the source, the flags, the compiler and the CPU, and loaded with ctypes. Without a compiler
that builds it, `build` raises kernel_lib.checks.Unsupported (a skipped record). `check_tensor`:
what a wrapper checks of each tensor before the C code reads it through a bare pointer."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

import torch

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


def check_tensor(
    name: str,
    value,
    dtype: torch.dtype | tuple[torch.dtype, ...],
    shape: tuple[int | str, ...] | None = None,
    *,
    contiguous: bool = True,
) -> torch.Tensor:
    """`value`, if it is a CPU tensor of `dtype` (one of them), of `shape` (a str entry, a
    letter, takes any size) and contiguous where asked: what C code indexing it through its
    pointer may read. Else TypeError (not a tensor) or ValueError, one line naming `name`."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    fits = shape is None or (
        value.dim() == len(shape)
        and all(type(want) is str or size == want for size, want in zip(value.shape, shape))
    )
    dense = not contiguous or value.is_contiguous()
    if value.dtype in dtypes and value.is_cpu and fits and dense:  # a few reads: every call
        return value
    want = "a contiguous CPU " if contiguous else "a CPU "
    want += " or ".join(str(d).removeprefix("torch.") for d in dtypes) + " tensor"
    if shape is not None:
        want += f" of shape ({', '.join(map(str, shape))}{',' * (len(shape) == 1)})"
    got = f"{str(value.dtype).removeprefix('torch.')} on {value.device.type}, shape "
    got += str(tuple(value.shape)) + ("" if value.is_contiguous() else ", not contiguous")
    raise ValueError(f"{name} must be {want}, got {got}")
