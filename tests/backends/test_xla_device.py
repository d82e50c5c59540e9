"""The XLA path for real: .venv-xla with PJRT_DEVICE=CPU (`make xla-test`); skipped elsewhere."""

import dataclasses

import pytest

pytest.importorskip("torch_xla")

from kernel_lib.backends import costs, probes, roofline, xla  # noqa: E402
from kernel_lib.backends.target import find_target  # noqa: E402


@pytest.fixture(scope="module")
def xla_target():
    target = find_target("tpu")
    assert target.present, target.reason
    return target


def test_the_tpu_notebook_target_is_the_xla_device(xla_target):
    assert xla_target.facts.device.startswith("xla:") and xla_target.facts.backend in (
        "tpu",
        "xla",
    )
    assert xla.xla_facts()["devices"] >= 1


def test_each_new_length_compiles_and_buckets_compile_once_each(xla_target, tiny):
    records = xla.recompiles(xla_target, tiny)  # lengths 5, 9, 13, 19; bucket 16
    table = xla.compile_table(records)
    assert table.loc["unpadded", "compiles"] == 4 and table.loc["bucketed", "compiles"] == 2
    assert set(table["outputs_match"]) == {"PASS"}
    assert records[1].baseline == "unpadded"


def test_compile_phases_compile_on_every_first_call_and_never_when_cached(xla_target, tiny):
    cfg = dataclasses.replace(tiny, mlp_batch=3, mlp_dim=20)
    records = {r.implementation: r for r in xla.compile_phases(xla_target, cfg)}
    assert {r.status for r in records.values()} == {"ok"}
    first = records["first_call"]
    assert first.metrics["compiles"] >= first.reps and first.metrics["xla_compile_ms_median"] > 0
    assert records["cached_call"].baseline == "first_call"
    assert records["trace"].method.startswith("perf_counter + cpu")


def test_matmul_precision_is_checked_and_restored(xla_target, tiny):
    import torch_xla.backends

    before = torch_xla.backends.get_mat_mul_precision()
    records = xla.matmul_precision(xla_target, tiny)
    assert [r.implementation for r in records] == list(xla.PRECISIONS)
    assert all(r.status == "ok" and r.check["pass"] for r in records)
    assert torch_xla.backends.get_mat_mul_precision() == before


def test_lazy_outputs_are_computed_by_the_timed_call(xla_target, tiny):
    records = roofline.bandwidth(xla_target, tiny)
    assert [r.implementation for r in records] == ["torch_clone", "torch_add"]
    assert all(r.status == "ok" and r.gbps > 0 and r.check["pass"] for r in records)
    mlp = costs.mlp_modes(xla_target, tiny)
    assert mlp[0].status == "ok"


def test_gemm_sweep_on_xla_is_checked(xla_target, tiny):
    records = roofline.gemm_sweep(xla_target, tiny)
    assert [(r.dtype, r.status) for r in records] == [("float32", "ok"), ("bfloat16", "ok")]


def test_probes_on_xla_answer_without_crashing(xla_target):
    records = {
        (r.implementation, r.dtype): r.metrics for r in probes.probe(xla_target, compile=False)
    }
    assert records[("matmul", "bfloat16")]["supported"] == "yes"
    assert records[("_grouped_mm", "bfloat16")]["detail"].startswith("not run")
    assert "not honoured on xla" in records[("sdpa_flash", "bfloat16")]["detail"]


def test_full_fp32_sets_the_highest_matmul_precision(xla_target):
    import torch_xla.backends

    before = torch_xla.backends.get_mat_mul_precision()
    try:
        assert xla.use_full_fp32(xla_target) == "highest"
    finally:
        torch_xla.backends.set_mat_mul_precision(before)
