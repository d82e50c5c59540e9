"""NVIDIA specifics: tensor-core generation and what TF32 does to fp32 GEMM's speed and error."""

from __future__ import annotations

import contextlib
from functools import partial

import torch

from kernel_lib.backends import tolerances
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.roofline import gemm_check, gemm_operands
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.checks import Unsupported
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.records import Record

# Compute capability (major, minor) -> tensor-core generation, from NVIDIA's architecture papers.
# A name for the reader; nothing is enabled or assumed from it (the probes decide that by trying).
TENSOR_CORES = {
    (7, 0): "1st gen (Volta)", (7, 2): "1st gen (Volta)", (7, 5): "2nd gen (Turing)",
    (8, 0): "3rd gen (Ampere)", (8, 6): "3rd gen (Ampere)", (8, 7): "3rd gen (Ampere)",
    (8, 9): "4th gen (Ada)", (9, 0): "4th gen (Hopper)", (10, 0): "5th gen (Blackwell)",
    (10, 3): "5th gen (Blackwell)", (12, 0): "5th gen (Blackwell)",
}  # fmt: skip


def tensor_core_generation(major: int, minor: int) -> str:
    """The tensor-core generation of compute capability major.minor ('none' before Volta)."""
    if major < 7:
        return "none (before sm_70)"
    return TENSOR_CORES.get((major, minor), f"unknown for sm_{major}{minor}")


def _clock_mhz() -> str:
    """The SM clock now, via NVML (nvidia-ml-py) where installed; else why it is not readable."""
    try:
        return f"{torch.cuda.clock_rate(0)} MHz (now)"
    except (ModuleNotFoundError, RuntimeError) as err:  # no nvidia-ml-py; driver not loaded
        return f"not readable: {str(err).splitlines()[0]}"


def _nccl_version() -> str:
    try:
        return ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):  # a build without NCCL
        return "not built in"


def nvidia_facts() -> dict:
    """CUDA device 0 beyond DeviceFacts: compute capability, tensor cores, L2, libraries."""
    props = torch.cuda.get_device_properties(0)
    return {
        "compute_capability": f"{props.major}.{props.minor}",
        "tensor_cores": tensor_core_generation(props.major, props.minor),
        "L2_MiB": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
        "sm_clock": _clock_mhz(),
        "cudnn": torch.backends.cudnn.version(),
        "nccl": _nccl_version(),
    }


@contextlib.contextmanager
def fp32_precision(mode: str):
    """cuBLAS fp32 matmuls in `mode` ('ieee' or 'tf32') inside the block, restored afterwards."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = mode
    try:
        yield
    finally:
        matmul.fp32_precision = before


def mm_at(mode: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with cuBLAS fp32 precision `mode` ('ieee' or 'tf32'), set for this call only."""
    with fp32_precision(mode):
        return a @ b


def tf32_effect(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """An n^3 fp32 GEMM (n = tf32_size) with TF32 off ('ieee', the baseline) and on ('tf32'),
    interleaved; each output checked against float64 (TF32 with its own, looser bound: the check's
    rel_error is what TF32 costs)."""
    if not target.present:
        return [target.absent("tf32", "ieee"), target.absent("tf32", "tf32")]
    n = cfg.tf32_size
    case = Case(TOPIC, "tf32", {"M": n, "N": n, "K": n}, dtype="float32")
    try:
        a, b = gemm_operands(n, "float32", target.facts.device, outputs=0)
    except Unsupported as why:
        return [
            target.skip("tf32", mode, str(why), dtype="float32", shape=case.shape)
            for mode in ("ieee", "tf32")
        ]
    bounds = {"ieee": tolerances.GEMM["float32"], "tf32": tolerances.TF32}
    candidates = [
        Candidate(mode, partial(mm_at, mode, a, b), gemm_check(a, b, bound), flops=2.0 * n**3)
        for mode, bound in bounds.items()
    ]
    return check_then_time(
        case, candidates, facts=target.facts, baseline="ieee", min_time_s=cfg.min_time_s
    )
