"""NVIDIA specifics: tensor-core generation and what TF32 does to fp32 GEMM's speed and error."""

from __future__ import annotations

import contextlib

import torch

from kernel_lib.backends.roofline import gemm_error
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.records import Record, measured, with_baseline
from kernel_lib.timing import time_fn

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


def tf32_effect(target: Target, *, n: int, min_time_s: float = 0.2) -> list[Record]:
    """An n^3 fp32 GEMM with TF32 off ('ieee', the baseline) and on ('tf32'): time and max relative
    error against float64 (metrics.max_rel_err)."""
    if n <= 0:
        raise ValueError(f"tf32_size={n} must be > 0")
    if not target.present:
        return [target.absent("tf32", "ieee"), target.absent("tf32", "tf32")]
    facts, device = target.facts, target.facts.device
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    records = []
    for mode in ("ieee", "tf32"):
        with fp32_precision(mode):
            timing = time_fn(lambda: a @ b, device=device, min_time_s=min_time_s)
            err = gemm_error(256, "float32", device=device)
        records.append(
            measured(
                TOPIC,
                "tf32",
                mode,
                timing,
                facts=facts,
                dtype="float32",
                shape={"M": n, "N": n, "K": n},
                flops=2.0 * n**3,
                metrics={"max_rel_err": err},
            )
        )
    return [records[0], with_baseline(records[1], records[0])]
