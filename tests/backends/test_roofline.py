import pytest
import torch

from kernel_lib.backends import roofline
from kernel_lib.backends.roofline import bandwidth, check_gemm, gemm_sweep, with_ceilings


def test_gemm_sweep_records_rates_per_dtype_and_size(cpu_target):
    records = gemm_sweep(
        cpu_target, sizes=[32, 64], dtypes=["float32", "bfloat16"], min_time_s=0.001
    )
    assert [(r.dtype, r.shape["N"]) for r in records] == [
        ("float32", 32),
        ("float32", 64),
        ("bfloat16", 32),
        ("bfloat16", 64),
    ]
    assert all(
        r.status == "ok" and r.tflops > 0 and r.flops == 2.0 * r.shape["N"] ** 3 for r in records
    )


def _oom_above(monkeypatch, numel: int):
    """torch.randn in roofline raises OutOfMemoryError for tensors larger than `numel`."""
    real = torch.randn

    def randn(*shape, **kwargs):
        if torch.Size(shape).numel() > numel:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(*shape, **kwargs)

    monkeypatch.setattr(roofline.torch, "randn", randn)


def test_gemm_sweep_step_out_of_memory_is_skipped_and_the_sweep_goes_on(monkeypatch, cpu_target):
    _oom_above(monkeypatch, 48 * 48)
    records = gemm_sweep(cpu_target, sizes=[32, 64, 16], dtypes=["float32"], min_time_s=0.001)
    assert [(r.shape["N"], r.status, r.reason) for r in records] == [
        (32, "ok", ""),
        (64, "skipped", "out of memory"),
        (16, "ok", ""),
    ]


def test_bandwidth_out_of_memory_is_skipped_and_the_sweep_goes_on(monkeypatch, cpu_target):
    _oom_above(monkeypatch, 2**20 // 4)
    records = bandwidth(cpu_target, mib=[1, 2], min_time_s=0.001)
    assert [(r.case, r.shape["MiB"], r.status) for r in records] == [
        ("copy", 1, "ok"),
        ("triad", 1, "ok"),
        ("copy", 2, "skipped"),
        ("triad", 2, "skipped"),
    ]
    assert records[0].bytes == 8.0 * 2**20 / 4 and records[1].bytes == 12.0 * 2**20 / 4


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"sizes": [0], "dtypes": ["float32"]}, "gemm_sizes"),
        ({"sizes": [8], "dtypes": ["float64"]}, "dtype='float64'"),
    ],
)
def test_gemm_sweep_rejects_bad_input_before_any_work(cpu_target, kwargs, name):
    with pytest.raises(ValueError, match=name):
        gemm_sweep(cpu_target, **kwargs)


def test_bandwidth_rejects_bad_sizes(cpu_target):
    with pytest.raises(ValueError, match="bandwidth_mib"):
        bandwidth(cpu_target, mib=[-1])


def test_absent_device_skips_every_roofline_case(absent):
    target = absent("xpu")
    records = gemm_sweep(target, sizes=[8], dtypes=["float32"]) + bandwidth(target, mib=[1])
    assert {r.status for r in records} == {"skipped"} and len(records) == 3


def test_ceilings_are_the_best_measured_rate_per_case_and_dtype(cpu_target):
    records = gemm_sweep(cpu_target, sizes=[16, 64], dtypes=["float32"], min_time_s=0.001)
    records = with_ceilings(
        records + bandwidth(cpu_target, mib=[1], min_time_s=0.001), cpu_target.facts
    )
    gemm = [r.fraction_of_peak for r in records if r.case == "gemm"]
    assert max(gemm) == 1.0 and all(0 < f <= 1.0 for f in gemm)
    assert all(r.fraction_of_datasheet is None for r in records)  # no datasheet for this CPU


def test_check_gemm_passes_within_tolerance_and_raises_above(cpu_target):
    assert list(check_gemm(cpu_target, ["float32", "bfloat16"], n=64)["check"]) == ["PASS", "PASS"]
    with pytest.raises(AssertionError, match="bfloat16"):
        check_gemm(cpu_target, ["bfloat16"], n=64, tolerances={"bfloat16": 1e-9})


def test_check_gemm_on_an_absent_device_says_skipped(absent):
    assert (
        check_gemm(absent("amd"), ["float32"])["check"]
        .iloc[0]
        .startswith("skipped: no amd device")
    )
