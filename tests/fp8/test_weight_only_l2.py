"""The W8A16 weight copies are sized from the cache before the device's memory: a GPU's L2 (its
device properties), not the host CPU's last-level cache."""

from types import SimpleNamespace

import pytest
import torch

from kernel_lib import platform
from kernel_lib.fp8 import bench_weight_only

H100_L2 = 50 * 2**20


@pytest.fixture
def gpu(monkeypatch):
    """A fake CUDA device with an H100's L2, and a host CPU whose cache would give other counts."""
    seen = []

    def properties(device):
        seen.append(device)
        return SimpleNamespace(name="NVIDIA H100 80GB HBM3", L2_cache_size=H100_L2)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(platform, "Path", lambda _: pytest.fail("read the host's caches"))
    return seen


def test_a_gpus_cache_is_its_l2(gpu):
    assert platform.last_level_cache_bytes("cuda:0") == H100_L2
    assert gpu == ["cuda:0"]


def test_the_weight_copies_on_a_gpu_add_up_to_twice_its_l2(gpu):
    # a 4096 x 4096 FP8 weight (16 MiB) against 2 x 50 MiB: 7 copies, whatever the host CPU has
    assert bench_weight_only.weight_copies(16 * 2**20, "cuda:0") == 7


def test_a_device_that_does_not_say_gets_the_default(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace())
    assert platform.last_level_cache_bytes("cuda:0") is None
    assert platform.last_level_cache_bytes("xla:0") is None
    assert bench_weight_only.weight_copies(16 * 2**20, "cuda:0") == 32  # 2 x 256 MiB / 16 MiB


def test_the_cpu_keeps_its_largest_cache(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: pytest.fail("asked a GPU")
    )
    assert platform.last_level_cache_bytes("cpu") == platform.last_level_cache_bytes()
