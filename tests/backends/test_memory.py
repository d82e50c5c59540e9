import pytest
import torch

from kernel_lib.backends import memory
from kernel_lib.checks import Unsupported


def test_what_fits_is_allocated():
    assert memory.allocate(lambda: torch.zeros(4), nbytes=16, device="cpu").shape == (4,)


def test_a_size_above_free_memory_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2**30)
    calls = []
    with pytest.raises(Unsupported, match=r"needs 2\.0 GiB, 1\.0 GiB free"):
        memory.allocate(lambda: calls.append(1), nbytes=2 * 2**30, device="cpu")
    assert calls == []


def test_an_allocation_that_runs_out_of_memory_anyway_is_unsupported():
    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")

    with pytest.raises(Unsupported, match="out of memory: CUDA out of memory"):
        memory.allocate(oom, nbytes=1, device="cpu")


def test_other_errors_are_not_taken_for_out_of_memory():
    def broken():
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        memory.allocate(broken, nbytes=1, device="cpu")


def test_free_memory_of_this_host_is_known():
    assert memory.free_bytes("cpu") > 0
