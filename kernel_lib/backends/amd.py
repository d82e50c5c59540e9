"""AMD specifics: HIP/ROCm facts, hipBLASLt vs rocBLAS on one GEMM, and the fnuz FP8 formats."""

from __future__ import annotations

import contextlib

import pandas as pd
import torch

from kernel_lib.backends.roofline import torch_dtype
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.records import Record, measured, skipped, with_baseline
from kernel_lib.timing import time_fn

# torch's names for the BLAS libraries on ROCm: "cublas" selects rocBLAS, "cublaslt" hipBLASLt.
BLAS_LIBRARIES = {"rocblas": "cublas", "hipblaslt": "cublaslt"}
FP8_FORMATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def amd_facts() -> dict:
    """Facts of ROCm device 0 beyond DeviceFacts: HIP version, gfx arch, preferred BLAS library."""
    props = torch.cuda.get_device_properties(0)
    return {
        "hip": torch.version.hip,
        "gcn_arch": getattr(props, "gcnArchName", "unknown"),
        "L2_MiB": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
        "preferred_blas": torch.backends.cuda.preferred_blas_library().name,
    }


@contextlib.contextmanager
def preferred_blas(library: str):
    """GEMMs through `library` (a BLAS_LIBRARIES key) inside the block; yields torch's name of the
    library it reports in use ('cublas', 'cublaslt', 'ck'; it may keep another one)."""
    before = torch.backends.cuda.preferred_blas_library()
    try:
        yield torch.backends.cuda.preferred_blas_library(BLAS_LIBRARIES[library]).name.lower()
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def blas_libraries(
    target: Target, *, n: int, dtype: str = "bfloat16", min_time_s: float = 0.2
) -> list[Record]:
    """The same n^3 GEMM through rocBLAS (baseline) and hipBLASLt; a library torch will not select
    here is recorded skipped with what torch kept instead."""
    if n <= 0:
        raise ValueError(f"blas_size={n} must be > 0")
    dt = torch_dtype(dtype)
    if not target.present:
        return [target.absent("blas_library", name) for name in BLAS_LIBRARIES]
    facts, device = target.facts, target.facts.device
    shape = {"M": n, "N": n, "K": n}
    a, b = torch.randn(n, n, device=device, dtype=dt), torch.randn(n, n, device=device, dtype=dt)
    records = []
    for name, torch_name in BLAS_LIBRARIES.items():
        with preferred_blas(name) as in_use:
            if in_use != torch_name:
                records.append(
                    skipped(
                        TOPIC,
                        "blas_library",
                        name,
                        f"torch kept {in_use}",
                        facts=facts,
                        dtype=dtype,
                        shape=shape,
                    )
                )
                continue
            timing = time_fn(lambda: a @ b, device=device, min_time_s=min_time_s)
        records.append(
            measured(
                TOPIC,
                "blas_library",
                name,
                timing,
                facts=facts,
                dtype=dtype,
                shape=shape,
                flops=2.0 * n**3,
            )
        )
    base = records[0]
    return [base] + [
        with_baseline(r, base) if r.status == "ok" == base.status else r for r in records[1:]
    ]


def fp8_formats(*, seed: int = 0) -> pd.DataFrame:
    """The OCP FP8 formats beside the fnuz ones MI300 computes in: largest value, machine epsilon
    and the round-trip error of seeded N(0,1) values. fnuz has no -0 and no inf, a single NaN and
    an exponent bias one larger, so its largest value is about half (e4m3: 240 vs 448). Errors are
    over
    |x| >= 1/32, inside every format's normal range."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(seed))
    x = x[x.abs() >= 1 / 32]
    rows = {}
    for name in FP8_FORMATS:
        dt = getattr(torch, name)
        back = x.to(dt).float()
        rows[name] = {
            "max": torch.finfo(dt).max,
            "eps": torch.finfo(dt).eps,
            "max_rel_err": round(((back - x).abs() / x.abs()).max().item(), 4),
        }
    return pd.DataFrame(rows).T
