import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.checks import Unsupported, relative_error
from kernel_lib.fp8 import block_scaled, checks, scaling
from kernel_lib.fp8.block_scaled import (
    block_scaled_mm,
    blocked_scales,
    check_block_dims,
    k_block,
    quantize_operands,
    recipe_granularities,
    split_k_scaled_mm,
)  # fmt: skip
from kernel_lib.fp8.checks import TOLERANCES, block_gemm_check
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.reference import fp8_linear_reference
from kernel_lib.fp8.shapes import GemmShape

RECIPES = ["blockwise", "mxfp8"]


def _reference(x, w, recipe):
    gran_x, gran_w = (g.value for g in recipe_granularities(recipe))
    return fp8_linear_reference(x, w, granularity=gran_x, weight_granularity=gran_w)


@settings(max_examples=6, deadline=None)
@given(
    m=st.integers(1, 40),
    blocks=st.integers(1, 3),
    n=st.sampled_from([16, 48, 144]),  # 144: a partial last 128-row weight block
    recipe=st.sampled_from(RECIPES),
    seed=st.integers(0, 99),
)
def test_split_k_matches_the_fp64_reference_on_odd_shapes(m, blocks, n, recipe, seed):
    gen = torch.Generator().manual_seed(seed)
    k = blocks * k_block(recipe)
    x, w = torch.randn(m, k, generator=gen) * 30, torch.randn(n, k, generator=gen) / 30
    out = split_k_scaled_mm(*quantize_operands(x, w, recipe=recipe))
    err = relative_error(out, _reference(x, w, recipe))
    assert err <= TOLERANCES["fp32_out"].value, f"{recipe} M={m} K={k} N={n}: {err:.2e}"


def test_zero_operands_give_zero():
    for recipe in RECIPES:
        x, w = torch.zeros(5, 256), torch.randn(32, 256)
        assert torch.equal(
            split_k_scaled_mm(*quantize_operands(x, w, recipe=recipe)), torch.zeros(5, 32)
        )


def test_block_recipes_beat_rowwise_on_outlier_channels():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 512, generator=gen), torch.randn(64, 512, generator=gen)
    x[:, 7] *= 1e5  # one outlier channel: rowwise scales every row by it, 1x128 only its block
    w[:, 7] = 0  # and it carries no signal, so the error shows what the rest lost
    full = x.double() @ w.double().t()
    rowwise = fp8_linear_reference(x, w, granularity="rowwise")
    blockwise = split_k_scaled_mm(*quantize_operands(x, w, recipe="blockwise"))
    assert relative_error(blockwise, full) < relative_error(rowwise, full)


def test_k_not_a_whole_number_of_blocks_is_refused():
    assert check_block_dims(256, "blockwise") is None
    assert check_block_dims(160, "mxfp8") is None
    assert "K=160 is not a multiple of the blockwise recipe's 128" in check_block_dims(
        160, "blockwise"
    )
    qx, qw = quantize_operands(torch.randn(4, 160), torch.randn(16, 160), recipe="blockwise")
    with pytest.raises(ValueError, match="K=160"):
        split_k_scaled_mm(qx, qw)


def test_bad_recipe_and_mismatched_operands():
    with pytest.raises(ValueError, match="recipe='nvfp4'"):
        recipe_granularities("nvfp4")
    a = quantize(torch.randn(4, 128), granularity="rowwise")
    b = quantize(torch.randn(16, 128), granularity="blockwise")
    with pytest.raises(ValueError, match="match no block recipe"):
        split_k_scaled_mm(a, b)


def test_native_path_is_refused_on_cpu_with_the_reason():
    qx, qw = quantize_operands(torch.randn(4, 128), torch.randn(16, 128), recipe="blockwise")
    with pytest.raises(
        Unsupported, match="unsupported: torch._scaled_mm on cpu refuses blockwise"
    ):
        block_scaled_mm(qx, qw)


def test_blocked_scales_follow_the_cublas_tile_layout():
    scale = torch.arange(130 * 6, dtype=torch.float32).reshape(130, 6)
    flat = blocked_scales(scale)
    assert flat.numel() == 256 * 8  # rows padded to 128, columns to 4
    for r, c in [(0, 0), (1, 0), (31, 3), (32, 0), (127, 3), (129, 5), (45, 2)]:
        tile = (r // 128) * 2 + c // 4  # tiles row-major over (row tile, column tile)
        rr, cc = r % 128, c % 4
        assert flat[tile * 512 + 16 * (rr % 32) + 4 * (rr // 32) + cc] == scale[r, c], (r, c)


def test_block_check_passes_and_skips_the_native_path_on_cpu():
    table = block_gemm_check([GemmShape(37, 256, 144)], recipes=RECIPES)
    split = table[table["implementation"] == "split_k_scaled_mm"]
    native = table[table["implementation"] == "block_scaled_mm"]
    assert (split["check"] == "PASS").all(), table.to_string()
    assert (native["check"] == "skipped").all() and native["reason"].str.startswith(
        "unsupported"
    ).all()


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_wrong_weight_scale_layout_fails_the_check(monkeypatch, recipe):
    # teeth: the scale of the next K block (a transposed or misread layout) for W
    real = block_scaled._columns
    monkeypatch.setattr(block_scaled, "_columns", lambda b, j, n: real(b, (j + 1) % 2, n))
    table = block_gemm_check([GemmShape(21, 256, 144)], recipes=[recipe])
    assert (table[table["implementation"] == "split_k_scaled_mm"]["check"] == "FAIL").all()


@pytest.mark.parametrize("recipe, width", [("blockwise", 256), ("mxfp8", 64)])
def test_a_wrong_block_size_fails_the_check(monkeypatch, recipe, width):
    # teeth: the quantiser and GEMM agree on a K block the recipe does not define
    gran = recipe_granularities(recipe)[0]
    monkeypatch.setitem(scaling.BLOCK_SHAPES, gran, (1, width))
    table = block_gemm_check([GemmShape(21, 256, 32)], recipes=[recipe])
    assert (table[table["implementation"] == "split_k_scaled_mm"]["check"] == "FAIL").all()


def test_a_path_that_raises_costs_only_its_own_row(monkeypatch):
    def broken(a, b, *, out_dtype):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED\nsecond line")

    monkeypatch.setitem(checks.BLOCK_PATHS, "split_k_scaled_mm", (broken, torch.float32))
    table = block_gemm_check([GemmShape(37, 256, 144)], recipes=RECIPES)
    split = table[table["implementation"] == "split_k_scaled_mm"]
    assert (split["check"] == "failed").all(), table.to_string()
    assert (split["reason"] == "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED").all()
    assert (table[table["implementation"] == "block_scaled_mm"]["check"] == "skipped").all()


def test_block_linear_raises_on_nan_by_default_and_passes_it_through_without_a_sync(monkeypatch):
    monkeypatch.setattr(block_scaled, "block_scaled_mm", split_k_scaled_mm)  # runs on the CPU
    x, w = torch.randn(5, 128), torch.randn(16, 128)
    x[2, 7] = float("nan")
    with pytest.raises(ValueError, match="1 NaN"):
        block_scaled.block_linear(x, w, recipe="blockwise")
    out = block_scaled.block_linear(x, w, recipe="blockwise", nonfinite="nan")
    assert out[2].isnan().all() and not out[[0, 1, 3, 4]].isnan().any()
