import dataclasses

import torch

from kernel_lib.backends import memory, roofline
from kernel_lib.backends.roofline import bandwidth, gemm_check, gemm_sweep, spread, with_ceilings
from kernel_lib.backends.tolerances import GEMM


def _by(records):
    return {(r.case, r.dtype, tuple(sorted(r.shape.items()))): r for r in records}


def test_gemm_sweep_interleaves_dtypes_per_size_with_fp32_the_baseline(cpu_target, tiny):
    cfg = dataclasses.replace(tiny, gemm_sizes=(16, 33), gemm_dtypes=("bfloat16", "float32"))
    records = gemm_sweep(cpu_target, cfg)
    assert [(r.dtype, r.shape["N"]) for r in records] == [
        ("float32", 16),
        ("bfloat16", 16),
        ("float32", 33),
        ("bfloat16", 33),
    ]
    assert all(
        r.status == "ok" and r.check["pass"] and r.flops == 2.0 * r.shape["N"] ** 3
        for r in records
    )
    bf16 = records[1]
    assert bf16.baseline == "torch_mm (float32)" and bf16.ratio_low <= bf16.ratio_vs_baseline
    assert records[0].ratio_vs_baseline is None


def test_without_fp32_the_sweep_has_no_ratios(cpu_target, tiny):
    records = gemm_sweep(cpu_target, dataclasses.replace(tiny, gemm_dtypes=("bfloat16",)))
    assert [r.ratio_vs_baseline for r in records] == [None]


def test_a_broken_gemm_is_recorded_wrong_and_not_timed(monkeypatch, cpu_target, tiny):
    monkeypatch.setattr(roofline, "mm", lambda a, b, out: torch.mm(a, b, out=out).mul_(1.05))
    records = gemm_sweep(cpu_target, tiny)
    assert {r.status for r in records} == {"wrong"} and all(r.median_ms is None for r in records)


def test_a_bf16_rounding_error_is_caught_at_the_fp32_bound(monkeypatch, cpu_target, tiny):
    def through_bf16(a, b, out):
        return out.copy_((a.bfloat16() @ b.bfloat16()).to(out.dtype))

    monkeypatch.setattr(roofline, "mm", through_bf16)
    records = gemm_sweep(cpu_target, dataclasses.replace(tiny, gemm_sizes=(64,)))
    status = {r.dtype: r.status for r in records}
    assert status == {"float32": "wrong", "bfloat16": "ok"}


def test_large_gemms_are_checked_on_a_spread_block_of_rows_and_columns():
    n = 600
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = a @ b
    check = gemm_check(a, b, GEMM["float32"])
    assert check(out).passed and "64 x 256 output block" in check(out).reference
    out[599, 599] += 1.0  # the last row and column are in the block
    assert not check(out).passed


def test_spread_keeps_first_and_last_index():
    assert spread(10, 4).tolist() == [0, 3, 6, 9] and spread(3, 8).tolist() == [0, 1, 2]


def test_spread_stays_in_range_for_buffers_beyond_float32_integers():
    n = 64 * 2**20 // 4  # a 64 MiB fp32 buffer: indices near 2^24 round up in float32
    assert int(spread(n, 2**22).max()) == n - 1


def test_a_gemm_too_big_for_free_memory_is_skipped_and_the_sweep_goes_on(
    monkeypatch, cpu_target, tiny
):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 3 * 48 * 48 * 4 / memory.HEADROOM)
    records = gemm_sweep(
        cpu_target, dataclasses.replace(tiny, gemm_sizes=(32, 64, 16), gemm_dtypes=("float32",))
    )
    assert [(r.shape["N"], r.status) for r in records] == [(32, "ok"), (64, "skipped"), (16, "ok")]
    assert records[1].reason.startswith("out of memory: needs")


def test_an_allocation_out_of_memory_is_skipped(monkeypatch, cpu_target, tiny):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(roofline.torch, "empty", oom)
    records = gemm_sweep(cpu_target, tiny) + bandwidth(cpu_target, tiny)
    assert {r.status for r in records} == {"skipped"}
    assert all(r.reason.startswith("out of memory: CUDA out of memory") for r in records)


def test_copy_and_triad_are_exact_and_counted_in_bytes(cpu_target, tiny):
    records = bandwidth(cpu_target, tiny)
    assert [(r.case, r.status, r.check["max_abs_error"]) for r in records] == [
        ("copy", "ok", 0.0),
        ("triad", "ok", 0.0),
    ]
    n = 2**20 // 4
    assert records[0].bytes == 8.0 * n and records[1].bytes == 12.0 * n


def test_a_broken_copy_is_recorded_wrong(monkeypatch, cpu_target, tiny):
    def drops_one(dst, src):
        return dst.copy_(src).index_fill_(0, torch.tensor([dst.numel() - 1]), 0.5)

    monkeypatch.setattr(roofline, "copy", drops_one)
    records = bandwidth(cpu_target, tiny)
    assert [(r.case, r.status) for r in records] == [("copy", "wrong"), ("triad", "ok")]


def test_a_triad_off_by_one_ulp_is_recorded_wrong(monkeypatch, cpu_target, tiny):
    def sloppy(x, y, out):
        return torch.add(x, y, alpha=2.0, out=out).nextafter_(torch.tensor(float("inf")))

    monkeypatch.setattr(roofline, "triad", sloppy)
    assert [r.status for r in bandwidth(cpu_target, tiny)] == ["ok", "wrong"]


def test_big_buffers_are_checked_on_spread_elements(cpu_target, tiny, monkeypatch):
    monkeypatch.setattr(roofline, "CHECK_ELEMENTS", 1000)
    copy = bandwidth(cpu_target, tiny)[0]
    assert copy.check["reference"] == f"exact, 1000 of {2**20 // 4} elements"


def test_absent_device_skips_every_roofline_case(absent, tiny):
    target = absent("xpu")
    records = gemm_sweep(target, tiny) + bandwidth(target, tiny)
    assert {r.status for r in records} == {"skipped"} and len(records) == 3


def test_ceilings_are_the_best_measured_rate_per_case_and_dtype(cpu_target, tiny):
    cfg = dataclasses.replace(tiny, gemm_sizes=(16, 64), gemm_dtypes=("float32",))
    records = with_ceilings(
        gemm_sweep(cpu_target, cfg) + bandwidth(cpu_target, cfg), cpu_target.facts
    )
    gemm = [r.fraction_of_peak for r in records if r.case == "gemm"]
    assert max(gemm) == 1.0 and all(0 < f <= 1.0 for f in gemm)
    assert all(r.fraction_of_datasheet is None for r in records)  # no datasheet for this CPU
