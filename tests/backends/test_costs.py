import pytest
import torch

from kernel_lib.backends import costs
from kernel_lib.backends.costs import check_mlp_modes, launch_latency, mlp_modes, transfer


def test_launch_and_sync_latency_are_measured_per_launch(cpu_target):
    records = launch_latency(cpu_target, min_time_s=0.001)
    assert [(r.case, r.shape["launches"]) for r in records] == [
        ("launch_latency", 100),
        ("sync_latency", 1),
    ]
    burst = records[0]
    assert burst.metrics["us_per_launch"] == pytest.approx(burst.median_ms * 1e3 / 100)


def test_transfers_on_the_cpu_are_skipped_with_the_reason(cpu_target):
    records = transfer(cpu_target, mib=[1])
    assert len(records) == 4 and {r.status for r in records} == {"skipped"}
    assert "host memory" in records[0].reason


def test_transfer_rejects_bad_sizes(cpu_target):
    with pytest.raises(ValueError, match="transfer_mib"):
        transfer(cpu_target, mib=[0])


def test_unpinnable_host_memory_is_reported_with_the_runtime_message(monkeypatch):
    def refuse(n):
        raise RuntimeError("Found no NVIDIA driver on your system.\nmore")

    monkeypatch.setattr(costs, "_pinned", refuse)
    assert (
        costs._pin_error()
        == "pinned host memory unavailable: Found no NVIDIA driver on your system."
    )


def test_mlp_without_compile_times_eager_and_skips_the_rest(cpu_target):
    records = mlp_modes(
        cpu_target, batch=4, dim=8, dtype="float32", compile=False, min_time_s=0.001
    )
    status = {(r.case, r.implementation): (r.status, r.reason) for r in records}
    assert status[("mlp", "eager")] == ("ok", "")
    assert status[("first_call", "torch_compile_inductor")] == ("skipped", "compile_mlp=False")
    assert status[("mlp", "cuda_graph")][0] == "skipped"


def test_mlp_records_compiled_speed_relative_to_eager(monkeypatch, cpu_target):
    monkeypatch.setattr(
        torch, "compile", lambda fn, backend: fn
    )  # compiling is the notebook's job here
    records = mlp_modes(cpu_target, batch=4, dim=8, dtype="float32", min_time_s=0.001)
    compiled = next(
        r for r in records if r.case == "mlp" and r.implementation == "torch_compile_inductor"
    )
    assert compiled.baseline == "eager" and compiled.ratio_vs_baseline > 0
    first = next(r for r in records if r.case == "first_call")
    assert first.reps == 1 and first.flops is None


@pytest.mark.parametrize(("batch", "dim"), [(0, 8), (4, -1)])
def test_mlp_rejects_bad_sizes(cpu_target, batch, dim):
    with pytest.raises(ValueError, match="mlp_batch"):
        mlp_modes(cpu_target, batch=batch, dim=dim, dtype="float32")


def test_mlp_check_catches_a_wrong_compiled_output(monkeypatch, cpu_target):
    monkeypatch.setattr(torch, "compile", lambda fn, backend: lambda x: fn(x) + 1)
    with pytest.raises(AssertionError, match="torch_compile_inductor"):
        check_mlp_modes(cpu_target, batch=4, dim=8, dtype="float32")


def test_mlp_check_without_compile_has_only_eager(cpu_target):
    assert list(
        check_mlp_modes(cpu_target, batch=4, dim=8, dtype="float32", compile=False).index
    ) == ["(eager only)"]


def test_absent_device_skips_every_cost(absent):
    target = absent("nvidia")
    records = (
        launch_latency(target)
        + transfer(target, mib=[1])
        + mlp_modes(target, batch=1, dim=1, dtype="float32")
    )
    assert {r.status for r in records} == {"skipped"}
