"""`backend.matmul` plug-ins (kernel_lib.plugins) in the roofline section's GEMM sweep: fn(a, b)
on torch_mm's operands in the same compare per size, checked as it is, each ratio over torch_mm
of its own dtype, never the headline; torch_mm's records as without them."""

import dataclasses

import pytest

from kernel_lib import records as rec
from kernel_lib.backends import memory, roofline, sections
from kernel_lib.plugins import kernel

pytestmark = pytest.mark.usefixtures("plugin_registry")

BROKE = "my kernel broke"


def _raises(a, b):
    raise RuntimeError(BROKE)


def _register():
    kernel(roofline.SLOT, name="mine")(lambda a, b: a @ b)
    kernel(roofline.SLOT, name="off")(lambda a, b: 1.1 * (a @ b))
    kernel(roofline.SLOT, name="raises")(_raises)


def _key(r):
    return rec.record_id(r, "p"), r.status, r.reason, r.baseline, r.headline


def test_each_size_and_dtype_times_the_plugins_beside_torch_mm(cpu_target, tiny):
    cfg = dataclasses.replace(tiny, gemm_sizes=(16, 24))
    before = sections.roof(cpu_target, cfg).records
    _register()
    after = sections.roof(cpu_target, cfg).records
    assert [_key(r) for r in after if r.plugin is None] == [_key(r) for r in before]
    theirs = {(r.implementation, r.dtype, r.shape["N"]): r for r in after if r.plugin}
    assert len(theirs) == 3 * 2 * 2 and not any(r.headline for r in theirs.values())
    ours = {(r.dtype, r.shape["N"]): r for r in after if r.case == "gemm" and not r.plugin}
    for (name, dtype, n), r in theirs.items():
        assert r.plugin["slot"] == roofline.SLOT and r.plugin["name"] == name
        if name == "mine":
            assert r.status == "ok" and r.ratio_low <= r.ratio_vs_baseline <= r.ratio_high
            assert r.baseline == roofline.MM and r.flops == ours[(dtype, n)].flops
            checked = ("reference", "tolerance")
            assert [r.check[k] for k in checked] == [ours[(dtype, n)].check[k] for k in checked]
        elif name == "off":
            assert r.status == "wrong" and r.median_ms is None and not r.samples_ms
        else:
            assert r.status == "failed" and r.reason == f"RuntimeError: {BROKE}"


def test_without_fp32_each_plugin_still_has_its_ratio_over_torch_mm(cpu_target, tiny):
    _register()
    records = roofline.gemm_sweep(cpu_target, dataclasses.replace(tiny, gemm_dtypes=("bfloat16",)))
    by_name = {r.implementation: r for r in records}
    assert by_name[roofline.MM].ratio_vs_baseline is None
    assert by_name["mine"].ratio_vs_baseline > 0 and by_name["mine"].baseline == roofline.MM


def test_a_size_that_does_not_fit_skips_the_plugins_with_its_reason(monkeypatch, cpu_target, tiny):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 0)
    _register()
    records = roofline.gemm_sweep(cpu_target, tiny)
    assert {r.status for r in records} == {"skipped"} and len({r.reason for r in records}) == 1
    assert [r.plugin["name"] for r in records if r.plugin] == ["mine", "off", "raises"] * 2
