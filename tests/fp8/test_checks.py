import pytest
import torch

from kernel_lib.fp8 import checks, linear
from kernel_lib.fp8.checks import linear_check, scaled_mm_check
from kernel_lib.fp8.quantize import Fp8Tensor
from kernel_lib.fp8.shapes import GemmShape

from .conftest import refuse_ragged

RECIPES = ["tensorwise_dynamic", "rowwise_dynamic", "tensorwise_delayed"]


def test_scaled_mm_check_passes():
    table = scaled_mm_check(
        [GemmShape(21, 32, 48), GemmShape(64, 128, 16)], granularities=["tensorwise", "rowwise"]
    )
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
    table = scaled_mm_check([GemmShape(37, 64, 32)], granularities=["tensorwise", "rowwise"])
    assert (table["check"] == "FAIL").all(), table.to_string()


def test_fp32_output_bound_follows_the_device():
    """A CPU's oneDNN runs FP8 GEMMs in fp32; FP8 tensor cores accumulate in ~14 bits (H100: up to
    2.8e-4 against the fp64 FP8 reference); bf16 outputs keep their own bound everywhere."""
    assert checks.out_tolerance("tensorwise", torch.float32, "cpu").value == 2**-16
    assert checks.out_tolerance("tensorwise", torch.float32, "cuda:0").value == 2**-10
    assert checks.out_tolerance("rowwise", torch.float32, "cuda").value == 2**-7
    assert checks.block_tolerances("mxfp8", torch.float32, "cuda")[0].value == 2**-10


def test_the_tensor_core_bound_still_fails_e5m2_operands(monkeypatch):
    real_quantize, real_bound = checks.quantize, checks.out_tolerance
    monkeypatch.setattr(
        checks,
        "quantize",
        lambda x, *, fmt, granularity: real_quantize(x, fmt="e5m2", granularity=granularity),
    )
    monkeypatch.setattr(checks, "out_tolerance", lambda g, dt, device: real_bound(g, dt, "cuda"))
    table = scaled_mm_check([GemmShape(37, 64, 32)], granularities=["tensorwise"])
    assert (table["check"] == "FAIL").all(), table.to_string()


@pytest.mark.parametrize("broken", ["inverted", "dropped"])
def test_wrong_scales_fail_both_checks(monkeypatch, broken):
    scale = (lambda t: t.scale) if broken == "inverted" else (lambda t: t.scale * 0 + 1)
    monkeypatch.setattr(Fp8Tensor, "inverse_scale", property(scale))
    assert (
        scaled_mm_check([GemmShape(37, 64, 32)], granularities=["tensorwise"])["check"] == "FAIL"
    ).all()
    assert (linear_check(recipes=RECIPES)["check"] == "FAIL").all()


def test_a_case_onednn_refuses_is_skipped_in_its_own_row(monkeypatch):
    """The probe passed, one call is refused: that row is skipped, naming it; the rest are checked."""
    monkeypatch.setattr(torch, "_scaled_mm", refuse_ragged(torch._scaled_mm))
    mm = scaled_mm_check(
        [GemmShape(37, 64, 32), GemmShape(32, 64, 32)], granularities=["tensorwise"]
    )
    assert list(mm["check"]) == ["skipped", "PASS"]
    assert "no FP8 matmul for 37x64x32" in mm["reason"].iloc[0]
    lin = linear_check(recipes=RECIPES, batch=3, seq=5)  # 15 rows: every forward refused
    assert (lin["check"] == "skipped").all() and list(lin["recipe"]) == RECIPES
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: 1 / 0)  # any other error: failed
    assert scaled_mm_check([GemmShape(32, 64, 32)], granularities=["tensorwise"])[
        "reason"
    ].tolist() == ["ZeroDivisionError: division by zero"]


def test_checks_skip_every_case_where_scaled_mm_cannot_run(monkeypatch):
    """One skipped row per case, named as where it runs, so its record keeps its id."""
    monkeypatch.setattr(linear, "fp8_matmul_support", lambda device: "unsupported")
    mm = scaled_mm_check([GemmShape(32, 64, 32)], granularities=["tensorwise", "rowwise"])
    lin = linear_check(recipes=["tensorwise_dynamic", "rowwise_dynamic"])
    assert list(mm["granularity"]) == ["tensorwise", "rowwise"] and (mm["M"] == 32).all()
    assert list(lin["recipe"]) == ["tensorwise_dynamic", "rowwise_dynamic"]
    for table in (mm, lin):
        assert (table["check"] == "skipped").all()
        assert (
            table["reason"]
            .str.startswith("unsupported: torch._scaled_mm needs FP8 matrix units")
            .all()
        )
