import pytest

from kernel_lib.fp8 import checks, linear
from kernel_lib.fp8.checks import linear_check, scaled_mm_check
from kernel_lib.fp8.quantize import Fp8Tensor

RECIPES = ["tensorwise_dynamic", "rowwise_dynamic", "tensorwise_delayed"]


def test_scaled_mm_check_passes():
    table = scaled_mm_check([(21, 32, 48), (64, 128, 16)], granularities=["tensorwise", "rowwise"])
    assert (table["check"] == "PASS").all(), table.to_string()


def test_linear_check_passes():
    table = linear_check(recipes=RECIPES)
    assert (table["check"] == "PASS").all(), table.to_string()


def test_e5m2_operands_fail_the_gemm_check(monkeypatch):
    real = checks.quantize
    monkeypatch.setattr(
        checks,
        "quantize",
        lambda x, *, fmt, granularity: real(x, fmt="e5m2", granularity=granularity),
    )
    table = scaled_mm_check([(37, 64, 32)], granularities=["tensorwise", "rowwise"])
    assert (table["check"] == "FAIL").all(), table.to_string()


@pytest.mark.parametrize("broken", ["inverted", "dropped"])
def test_wrong_scales_fail_both_checks(monkeypatch, broken):
    scale = (lambda t: t.scale) if broken == "inverted" else (lambda t: t.scale * 0 + 1)
    monkeypatch.setattr(Fp8Tensor, "inverse_scale", property(scale))
    assert (scaled_mm_check([(37, 64, 32)], granularities=["tensorwise"])["check"] == "FAIL").all()
    assert (linear_check(recipes=RECIPES)["check"] == "FAIL").all()


def test_checks_skip_where_scaled_mm_cannot_run(monkeypatch):
    monkeypatch.setattr(linear, "fp8_matmul_support", lambda device: "unsupported")
    for table in (
        scaled_mm_check([(32, 64, 32)], granularities=["tensorwise"]),
        linear_check(recipes=["tensorwise_dynamic"]),
    ):
        assert list(table["check"]) == ["skipped"]
        assert table["reason"][0].startswith(
            "unsupported: torch._scaled_mm needs FP8 matrix units"
        )
