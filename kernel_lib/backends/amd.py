"""AMD specifics: HIP/ROCm facts, hipBLASLt vs rocBLAS on one GEMM, and the fnuz FP8 formats."""

from __future__ import annotations

import contextlib
from functools import partial

import pandas as pd
import torch

from kernel_lib.backends import tolerances
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.roofline import gemm_check, gemm_operands
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.checks import Unsupported
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.records import Record

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


def mm_through(library: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b through BLAS `library` (a BLAS_LIBRARIES key), selected for this call only."""
    with preferred_blas(library):
        return a @ b


def blas_libraries(
    target: Target, cfg: BackendBenchConfig, *, dtype: str = "bfloat16"
) -> list[Record]:
    """The same n^3 GEMM (n = blas_size) through rocBLAS (baseline) and hipBLASLt, interleaved,
    each output checked against float64; a library torch will not select here is recorded
    skipped with what torch kept instead."""
    if not target.present:
        return [target.absent("blas_library", name) for name in BLAS_LIBRARIES]
    n = cfg.blas_size
    case = Case(TOPIC, "blas_library", {"M": n, "N": n, "K": n}, dtype=dtype)
    try:
        a, b = gemm_operands(n, dtype, target.facts.device, outputs=0)
    except Unsupported as why:
        return [
            target.skip("blas_library", name, str(why), dtype=dtype, shape=case.shape)
            for name in BLAS_LIBRARIES
        ]
    candidates = []
    for name, torch_name in BLAS_LIBRARIES.items():
        with preferred_blas(name) as in_use:
            kept = in_use != torch_name
        candidates.append(
            target.skip(
                "blas_library", name, f"torch kept {in_use}", dtype=dtype, shape=case.shape
            )
            if kept
            else Candidate(
                name,
                partial(mm_through, name, a, b),
                gemm_check(a, b, tolerances.GEMM[dtype]),
                flops=2.0 * n**3,
            )
        )
    return check_then_time(
        case, candidates, facts=target.facts, baseline="rocblas", min_time_s=cfg.min_time_s
    )


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
