"""The XLA path for real: .venv-xla with PJRT_DEVICE=CPU (`make xla-test`); skipped elsewhere."""

import pytest

pytest.importorskip("torch_xla")

import torch  # noqa: E402

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


def test_each_new_length_compiles_and_buckets_compile_once_each(xla_target):
    records = xla.recompiles(xla_target, seq_lens=[5, 9, 13, 19], bucket=16, dim=12)
    table = xla.compile_table(records)
    assert table.loc["unpadded", "compiles"] == 4 and table.loc["bucketed", "compiles"] == 2
    assert set(table["outputs_match"]) == {"PASS"}


def test_compile_phases_see_one_compile_on_the_first_call(xla_target):
    records = {
        r.implementation: r
        for r in xla.compile_phases(xla_target, batch=3, dim=20, dtype="float32", min_time_s=0.01)
    }
    assert records["first_call"].metrics["compiles"] >= 1
    assert records["cached_call"].metrics["compiles"] == 0
    assert records["compile"].method == "torch_xla metric CompileTime"


def test_matmul_precision_is_restored(xla_target):
    import torch_xla.backends

    before = torch_xla.backends.get_mat_mul_precision()
    records = xla.matmul_precision(xla_target, n=32, min_time_s=0.01)
    assert [r.implementation for r in records] == list(xla.PRECISIONS)
    assert torch_xla.backends.get_mat_mul_precision() == before


def test_lazy_outputs_are_computed_by_the_timed_call(xla_target):
    records = roofline.bandwidth(xla_target, mib=[1], min_time_s=0.01)
    assert [r.implementation for r in records] == ["torch_clone", "torch_add"]
    assert all(r.status == "ok" and r.gbps > 0 for r in records)
    mlp = costs.mlp_modes(
        xla_target, batch=4, dim=8, dtype="float32", compile=False, min_time_s=0.01
    )
    assert mlp[0].status == "ok"


def test_probes_on_xla_answer_without_crashing(xla_target):
    records = {
        (r.implementation, r.dtype): r.metrics for r in probes.probe(xla_target, compile=False)
    }
    assert records[("matmul", "bfloat16")]["supported"] == "yes"
    assert records[("_grouped_mm", "bfloat16")]["detail"].startswith("not run")
    assert "not honoured on xla" in records[("sdpa_flash", "bfloat16")]["detail"]


def test_gemm_on_xla_matches_float64(xla_target):
    assert roofline.gemm_error(64, "float32", device=xla_target.facts.device) < 1e-5
    assert torch.device(xla_target.facts.device).type == "xla"


def test_full_fp32_sets_the_highest_matmul_precision(xla_target):
    import torch_xla.backends

    before = torch_xla.backends.get_mat_mul_precision()
    try:
        assert xla.use_full_fp32(xla_target) == "highest"
    finally:
        torch_xla.backends.set_mat_mul_precision(before)
