from types import SimpleNamespace

import torch

from kernel_lib.backends.xpu import xpu_facts
from kernel_lib.platform import detect_backend, detect_platform, device_facts

MAX_1550 = SimpleNamespace(
    name="Intel(R) Data Center GPU Max 1550",
    total_memory=128 * 10**9,
    gpu_subslice_count=128,
    gpu_eu_count=1024,
    driver_version="1.3.29735",
    has_fp64=True,
)


def test_xpu_facts_and_platform_from_fake_max_1550(monkeypatch):
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "get_device_properties", lambda index=0: MAX_1550)
    assert detect_backend() == "xpu"
    facts = device_facts()
    assert (facts.compute_units, facts.compute_unit_kind) == (128, "Xe cores")
    assert detect_platform(facts) == "intel-max1550"
    extra = xpu_facts()
    assert extra["gpu_eu_count"] == 1024 and extra["has_fp64"] is True
    assert "max_work_group_size" not in extra  # only fields this build exposes
