from types import SimpleNamespace

import pytest
import torch

from kernel_lib import platform
from kernel_lib.platform import (
    DeviceFacts,
    datasheet_for,
    detect_backend,
    detect_platform,
    device_facts,
)


def fake_gpu(monkeypatch, name, *, hip=None, major=9, minor=0, arch=None):
    props = SimpleNamespace(
        name=name,
        major=major,
        minor=minor,
        total_memory=80 * 2**30,
        multi_processor_count=132,
        gcnArchName=arch,
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.version, "cuda", None if hip else "12.8")


def test_this_machine_without_accelerators_is_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    facts = device_facts()
    assert (facts.backend, facts.device, facts.compute_unit_kind) == ("cpu", "cpu", "threads")
    assert detect_platform(facts) == "cpu"


def test_nvidia_facts(monkeypatch):
    fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3")
    facts = device_facts()
    assert detect_backend() == "nvidia"
    assert (facts.arch, facts.compute_units, facts.compute_unit_kind) == ("sm_90", 132, "SMs")
    assert detect_platform(facts) == "h100"


def test_rocm_is_amd_with_gfx_arch(monkeypatch):
    fake_gpu(monkeypatch, "AMD Instinct MI300X", hip="6.4", arch="gfx942:sramecc+:xnack-")
    facts = device_facts()
    assert (facts.backend, facts.arch, facts.compute_unit_kind) == (
        "amd",
        "gfx942:sramecc+:xnack-",
        "CUs",
    )
    assert detect_platform(facts) == "amd-mi300x"


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA L4", "gcp-l4"), ("NVIDIA A10G", "aws-a10g"),
])  # fmt: skip
def test_platform_by_device_name(name, expected):
    assert detect_platform(DeviceFacts(backend="nvidia", device="cuda:0", name=name)) == expected


def test_l40s_is_not_an_l4():
    with pytest.raises(ValueError, match="L40S"):
        detect_platform(DeviceFacts(backend="nvidia", device="cuda:0", name="NVIDIA L40S"))
    assert datasheet_for("NVIDIA L40S") is None


def test_unknown_gpu_names_the_device():
    with pytest.raises(ValueError, match="A100"):
        detect_platform(
            DeviceFacts(backend="nvidia", device="cuda:0", name="NVIDIA A100-SXM4-80GB")
        )


def test_xla_platforms():
    assert (
        detect_platform(DeviceFacts(backend="tpu", device="xla:0", name="XLA:TPU v5litepod-8"))
        == "gcp-tpu-v5e"
    )
    with pytest.raises(ValueError, match="v4-8"):
        detect_platform(DeviceFacts(backend="tpu", device="xla:0", name="XLA:TPU v4-8"))
    assert detect_platform(DeviceFacts(backend="xla", device="xla:0", name="XLA:CPU")) == "xla-cpu"


def test_datasheet_prefers_the_specific_part():
    assert datasheet_for("NVIDIA H100 PCIe").memory_gbps == 2000
    assert datasheet_for("NVIDIA H100 80GB HBM3").memory_gbps == 3350
    assert datasheet_for("AMD EPYC 9B14") is None  # CPUs: "unknown"
    assert all(
        "datasheet" in s.source or "documentation" in s.source or "AWS" in s.source
        for s in platform.DATASHEETS
    )


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend"):
        device_facts("quantum")
