import dataclasses

import pytest
import torch

from kernel_lib.backends import costs
from kernel_lib.backends.costs import launch_latency, mlp_modes, transfer


def _mlp_records(records):
    return {(r.case, r.implementation): r for r in records}


def test_launch_and_sync_latency_are_checked_and_measured_per_launch(cpu_target, tiny):
    records = launch_latency(cpu_target, tiny)
    assert [(r.case, r.shape["launches"], r.check["pass"]) for r in records] == [
        ("launch_latency", 100, True),
        ("sync_latency", 1, True),
    ]
    burst = records[0]
    assert burst.metrics["us_per_launch"] == pytest.approx(burst.median_ms * 1e3 / 100)


def test_the_sync_latency_waits_for_the_device_in_every_call(monkeypatch, cpu_target, tiny):
    waits = []
    monkeypatch.setattr(costs, "synchronize", lambda device: waits.append(str(device)))
    records = launch_latency(cpu_target, tiny)
    assert len(waits) >= records[1].reps and set(waits) == {"cpu"}


def test_a_dropped_launch_is_recorded_wrong(monkeypatch, cpu_target, tiny):
    real = costs.add_chain
    monkeypatch.setattr(costs, "add_chain", lambda x, n: real(x, n - 1) if n > 1 else real(x, n))
    assert [r.status for r in launch_latency(cpu_target, tiny)] == ["wrong", "ok"]


def test_transfers_on_the_cpu_are_skipped_with_the_reason(cpu_target, tiny):
    records = transfer(cpu_target, tiny)
    assert len(records) == 4 and {r.status for r in records} == {"skipped"}
    assert "host memory" in records[0].reason


def test_unpinnable_host_memory_is_reported_with_the_runtime_message(monkeypatch):
    def refuse(n):
        raise RuntimeError("Found no NVIDIA driver on your system.\nmore")

    monkeypatch.setattr(costs, "_pinned", refuse)
    assert costs._pin_error() == (
        "pinned host memory unavailable: Found no NVIDIA driver on your system."
    )


def test_transfer_copies_are_checked_bit_exact(cpu_target):
    host_src, host_dst = costs._host_buffers(64, "pageable")
    dev_src, dev_dst = costs._random_bytes(64, seed=4), torch.empty(64, dtype=torch.uint8)
    candidates = costs._transfer_candidates(cpu_target, 64, "pageable", dev_src, dev_dst)
    h2d, d2h = candidates["host_to_device"], candidates["device_to_host"]
    assert h2d.check(h2d.fn()).passed and d2h.check(d2h.fn()).passed
    assert not h2d.check(dev_dst.clone().add_(1)).passed


def test_mlp_modes_are_interleaved_against_eager_with_an_interval(monkeypatch, cpu_target, tiny):
    monkeypatch.setattr(
        torch, "compile", lambda fn, backend: fn
    )  # compiling is the notebook's job
    records = _mlp_records(mlp_modes(cpu_target, dataclasses.replace(tiny, compile_mlp=True)))
    compiled = records[("mlp", "torch_compile_inductor")]
    assert compiled.baseline == "eager" and compiled.check["pass"]
    assert compiled.ratio_low <= compiled.ratio_vs_baseline <= compiled.ratio_high
    eager = records[("mlp", "eager")]
    assert "interleaved" in eager.method and eager.reps >= 10  # never a handful of eager reps
    first = records[("first_call", "torch_compile_inductor")]
    assert first.reps == costs.FIRST_CALL_ROUNDS and first.flops is None and first.check["pass"]


def test_a_wrong_compiled_output_is_recorded_wrong(monkeypatch, cpu_target, tiny):
    monkeypatch.setattr(torch, "compile", lambda fn, backend: lambda x: fn(x) + 1)
    records = _mlp_records(mlp_modes(cpu_target, dataclasses.replace(tiny, compile_mlp=True)))
    assert records[("mlp", "eager")].status == "ok"
    assert records[("mlp", "torch_compile_inductor")].status == "wrong"
    assert records[("first_call", "torch_compile_inductor")].status == "wrong"


def test_mlp_without_compile_times_eager_and_skips_the_rest(cpu_target, tiny):
    records = _mlp_records(mlp_modes(cpu_target, tiny))
    assert records[("mlp", "eager")].status == "ok"
    for key in [("mlp", "torch_compile_inductor"), ("first_call", "torch_compile_inductor")]:
        assert (records[key].status, records[key].reason) == ("skipped", "compile_mlp=False")
    assert records[("mlp", "cuda_graph")].status == "skipped"


def test_absent_device_skips_every_cost(absent, tiny):
    target = absent("nvidia")
    records = launch_latency(target, tiny) + transfer(target, tiny) + mlp_modes(target, tiny)
    assert {r.status for r in records} == {"skipped"}
