"""The backend notebooks' suites, one per notebook (`SUITES["cpu"]`, ...): the sections common to all
five in their order (facts, capabilities, roofline, overheads, mlp), then the backend's own. Each
notebook cell runs one by name (`SUITE.run("roofline", ctx)`, ctx from `setup`); `python -m
kernel_lib bench device` runs the suite of the detected device's notebook (`run_suite`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from kernel_lib.backends import allocation, amd, nvidia, sections, xla
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.target import ACCEPTS, Target, find_target
from kernel_lib.platform import detect_backend
from kernel_lib.records import Record
from kernel_lib.suite import Context, Section, Suite

# detected backend -> the backend notebook that measures it ("xla": the TPU notebook on XLA:CPU)
NOTEBOOK_BACKEND = {detected: backend for backend, seen in ACCEPTS.items() for detected in seen}


@dataclass(frozen=True)
class Setup:
    """A backend suite's `Context.config`: the device the notebook measures (present or not; its
    facts are the Context's) and the notebook's validated parameters."""

    target: Target
    cfg: BackendBenchConfig


def context(backend: str, params: dict, *, progress: bool = False) -> Context[Setup]:
    """The `backend` notebook's context: its parameters validated (a bad one: a one-line
    ValueError naming it), its device (find_target) and, for the TPU notebook, XLA's fp32 matmuls at
    full precision from here on (xla.use_full_fp32), so its float32 rows are fp32."""
    cfg = BackendBenchConfig.from_params(params)
    target = find_target(backend)
    if backend == "tpu":
        xla.use_full_fp32(target)
    return Context(Setup(target, cfg), target.facts, progress=progress)


def setup(backend: str, params: dict) -> Context[Setup]:
    """The notebook's context (`context` of its globals(), with progress bars); pandas shows
    long cells (reasons, ISA flags) whole."""
    pd.set_option("display.max_colwidth", 120)
    return context(backend, params, progress=True)


def _on(ctx: Context[Setup]) -> tuple[Target, BackendBenchConfig]:
    """The (target, cfg) that the sections.* functions and each backend's own measurements take."""
    return ctx.config.target, ctx.config.cfg


def _shown(measure: Callable[[Target, BackendBenchConfig], list[Record]]):
    """A backend's own measurement as a suite section: its records with the common table."""
    return lambda ctx: sections.show(measure(*_on(ctx)))


COMMON = (
    Section("facts", lambda ctx: sections.facts(ctx.config.target), "the device facts record"),
    Section("capabilities", lambda ctx: sections.capabilities(*_on(ctx)),
            "each dtype and feature, decided by a tiny checked op"),
    Section("roofline", lambda ctx: sections.roof(*_on(ctx), progress=ctx.progress),
            "GEMM per n and dtype, copy and triad vs their ceilings; headline: bf16 GEMM vs fp32"),
    Section("overheads", lambda ctx: sections.overheads(*_on(ctx), progress=ctx.progress),
            "launch and sync latency, host<->device transfers"),
    Section("mlp", lambda ctx: sections.mlp(*_on(ctx)),
            "small MLP eager, compiled, CUDA graph, first call; headline: compiled vs eager"),
)  # fmt: skip
OWN = {
    "cpu": (Section("allocators", _shown(allocation.allocator_effect),
                    "fresh-output workload per host allocator, one process each, vs glibc's"),),
    "nvidia": (Section("tf32", _shown(nvidia.tf32_effect), "fp32 GEMM with TF32 off and on"),),
    "amd": (Section("blas", _shown(amd.blas_libraries), "bf16 GEMM: rocBLAS vs hipBLASLt"),),
    "tpu": (
        Section("compile_phases", _shown(xla.compile_phases), "MLP: trace, first, cached call"),
        Section("recompiles", _shown(xla.recompiles), "compiles per pass: bucketed, unpadded"),
        Section("matmul_precision", _shown(xla.matmul_precision), "fp32 matmul per precision"),
    ),
    "xpu": (),
}  # fmt: skip
SUITES = {backend: Suite(f"backend_{backend}", COMMON + own) for backend, own in OWN.items()}


def run_suite(params: dict, *, progress: bool = False) -> list[Record]:
    """Every record of the detected device's backend notebook: its suite's sections, in order."""
    backend = NOTEBOOK_BACKEND[detect_backend()]
    return SUITES[backend].run_all(context(backend, params, progress=progress))
