import pytest
import torch

from kernel_lib.backends import amd
from kernel_lib.backends.amd import amd_facts, blas_libraries, fp8_formats
from kernel_lib.platform import detect_backend, detect_platform, device_facts


@pytest.fixture
def mi300x(monkeypatch, fake_cuda, gpu_properties):
    props = fake_cuda(
        gpu_properties("AMD Instinct MI300X", 9, 4, gcnArchName="gfx942:sramecc+:xnack-"),
        hip="6.4.43482",
    )
    monkeypatch.setattr(
        torch.backends.cuda,
        "preferred_blas_library",
        lambda backend=None: torch._C._BlasBackend.Cublaslt,
    )
    return props


def test_rocm_is_detected_from_torch_version_hip(mi300x):
    assert detect_backend() == "amd"
    facts = device_facts()
    assert (facts.arch, facts.compute_unit_kind) == ("gfx942:sramecc+:xnack-", "CUs")
    assert detect_platform(facts) == "amd-mi300x"


def test_amd_facts_from_fake_mi300x(mi300x):
    facts = amd_facts()
    assert facts["hip"] == "6.4.43482" and facts["gcn_arch"].startswith("gfx942")
    assert facts["preferred_blas"] == "Cublaslt"


def test_fnuz_formats_have_half_the_range_and_the_same_precision():
    table = fp8_formats()
    assert (
        table.loc["float8_e4m3fn", "max"] == 448.0 and table.loc["float8_e4m3fnuz", "max"] == 240.0
    )
    assert table.loc["float8_e5m2fnuz", "max"] == 57344.0
    assert table.loc["float8_e4m3fnuz", "eps"] == table.loc["float8_e4m3fn", "eps"]
    assert (table["max_rel_err"] <= table["eps"]).all()


def test_a_blas_library_torch_will_not_select_is_skipped_with_what_it_kept(
    mi300x, cpu_target, tiny
):
    records = blas_libraries(cpu_target, tiny)  # the fake always keeps hipBLASLt
    assert (records[0].implementation, records[0].status, records[0].reason) == (
        "rocblas",
        "skipped",
        "torch kept cublaslt",
    )
    assert (records[1].implementation, records[1].status) == ("hipblaslt", "ok")
    assert records[1].check["pass"]


def test_a_wrong_blas_result_is_recorded_wrong(monkeypatch, mi300x, cpu_target, tiny):
    monkeypatch.setattr(amd, "mm_through", lambda library, a, b: (a @ b).neg())
    assert [r.status for r in blas_libraries(cpu_target, tiny)] == ["skipped", "wrong"]


def test_blas_on_an_absent_device_is_skipped(absent, tiny):
    assert [(r.implementation, r.status) for r in blas_libraries(absent("amd"), tiny)] == [
        ("rocblas", "skipped"),
        ("hipblaslt", "skipped"),
    ]
