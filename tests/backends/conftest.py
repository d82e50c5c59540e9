"""Targets for the backend tests: this CPU (present), absent devices, and fake GPU properties."""

from types import SimpleNamespace

import pytest

from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.target import Target
from kernel_lib.platform import DeviceFacts, device_facts

# The smallest parameters that still run every section.
TINY = dict(
    gemm_sizes=[16],
    gemm_dtypes=["float32", "bfloat16"],
    bandwidth_mib=[1],
    transfer_mib=[1],
    mlp_batch=4,
    mlp_dim=8,
    mlp_dtype="float32",
    compile_mlp=False,
    probe_compile=False,
    min_time_s=0.001,
    allocators=["system"],
    allocator_shape=[8, 4, 8],
    allocator_rounds=6,
    tf32_size=16,
    blas_size=16,
    xla_seq_lens=[5, 9, 13, 19],
    xla_bucket=16,
    xla_precision_size=32,
)


@pytest.fixture
def tiny() -> BackendBenchConfig:
    """BackendBenchConfig with TINY sizes; dataclasses.replace(tiny, ...) for one test's change."""
    return BackendBenchConfig.from_params(TINY)


@pytest.fixture
def cpu_target() -> Target:
    """The host CPU as a present target, also in the XLA venv (where the detected one is xla)."""
    return Target("cpu", device_facts("cpu"), present=True)


@pytest.fixture
def absent():
    """absent("nvidia") -> a Target that is not present, as on a machine without that device."""

    def make(backend: str) -> Target:
        facts = DeviceFacts(backend=backend, device="none", name=f"no {backend} device")
        return Target(
            backend, facts, present=False, reason=f"no {backend} device (this machine: cpu)"
        )

    return make


def _gpu_properties(name: str, major: int, minor: int, **extra) -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        major=major,
        minor=minor,
        total_memory=80 * 2**30,
        multi_processor_count=132,
        L2_cache_size=50 * 2**20,
        **extra,
    )


@pytest.fixture
def gpu_properties():
    """gpu_properties(name, major, minor, **extra): what torch.cuda.get_device_properties returns,
    for the fields the facts read."""
    return _gpu_properties


@pytest.fixture
def fake_cuda(monkeypatch):
    """fake_cuda(props, hip=None): torch.cuda reports one device with `props` (ROCm if hip set)."""
    import torch

    def install(props: SimpleNamespace, hip: str | None = None):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: props)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.version, "cuda", None if hip else "12.8")
        return props

    return install
