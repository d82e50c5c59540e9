import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.fp8.formats import FORMATS, format_info
from kernel_lib.fp8.quantize import dequantize, fp8_grid, quantize
from kernel_lib.fp8.reference import quantize_reference, round_to_format
from kernel_lib.fp8.scaling import broadcast_scale

from .conftest import wide_tensor, with_extremes, with_nonfinite

GRANULARITIES = ["tensorwise", "rowwise", "blockwise"]


def _bits(t):
    return t.data.view(torch.uint8)


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 200),
    k=st.integers(6, 300),
    fmt=st.sampled_from(FORMATS),
    gran=st.sampled_from(GRANULARITIES),
    seed=st.integers(0, 999),
)
def test_quantize_is_bit_exact_with_the_fp64_oracle(m, k, fmt, gran, seed):
    x = with_extremes(wide_tensor((m, k), seed=seed))
    got = quantize(with_nonfinite(x), fmt=fmt, granularity=gran, nonfinite="nan")
    ref = quantize_reference(with_nonfinite(x), fmt=fmt, granularity=gran)
    assert torch.equal(got.scale, ref.scale) and torch.equal(got.amax, ref.amax)
    differ = (_bits(got) != _bits(ref)).sum()
    assert differ == 0, f"{differ} bytes differ"


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_to_format_fixed_points_and_ties(fmt):
    grid = fp8_grid(fmt)
    assert torch.equal(round_to_format(grid, fmt), grid), "representable values stay put"
    mid = (grid[1:] + grid[:-1]) / 2
    pick = round_to_format(mid, fmt)
    even = torch.where(torch.arange(1, len(grid)) % 2 == 0, grid[1:], grid[:-1])
    assert torch.equal(pick, even), "ties go to the even bit pattern"
    assert torch.equal(
        round_to_format(grid.float().to(format_info(fmt).dtype).double(), fmt), grid
    )


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("gran", GRANULARITIES)
def test_round_trip_error_is_within_half_an_ulp(fmt, gran):
    info = format_info(fmt)
    x = torch.randn(130, 257, generator=torch.Generator().manual_seed(7))
    q = quantize(x, fmt=fmt, granularity=gran)
    back = dequantize(q, dtype=torch.float64)
    scaled = (x * broadcast_scale(q.scale, tuple(x.shape), gran)).abs()
    normal = scaled >= info.smallest_normal  # below it the spacing is absolute, not relative
    rel = ((back - x.double()).abs() / x.double().abs())[normal]
    assert rel.max().item() <= info.eps / 2 + 1e-7, f"max relative error {rel.max().item()}"


def test_3d_rowwise_scales_per_row():
    x = torch.randn(2, 5, 32)
    q = quantize(x, granularity="rowwise")
    assert q.scale.shape == (2, 5, 1) and q.data.shape == x.shape


def test_saturates_explicitly_with_a_given_scale():
    q = quantize(torch.tensor([1.0, 100.0, -1e6]), fmt="e5m2", scale=torch.tensor(1000.0))
    assert q.data.float().tolist() == [1024.0, 57344.0, -57344.0], "e5m2 would cast 1e8 to -inf"


def test_nonfinite_raise_reports_counts():
    x = with_nonfinite(torch.randn(8, 16))
    with pytest.raises(ValueError, match=r"x has 1 NaN and 2 inf of 128"):
        quantize(x)


@pytest.mark.parametrize("fmt", FORMATS)
def test_nonfinite_nan_mode_marks_them_and_ignores_them_for_amax(fmt):
    x = with_nonfinite(torch.randn(8, 16))
    q = quantize(x, fmt=fmt, nonfinite="nan")
    back = q.data.float()
    bad = ~torch.isfinite(x)
    assert torch.isnan(back[bad]).all(), "non-finite inputs come back NaN, not +-max"
    assert torch.isfinite(back[~bad]).all()
    assert q.amax.item() == x[~bad].abs().max().item()


def test_bad_arguments_name_the_parameter():
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match="fmt"):
        quantize(x, fmt="fp8")
    with pytest.raises(ValueError, match="granularity"):
        quantize(x, granularity="columnwise")
    with pytest.raises(ValueError, match="nonfinite"):
        quantize(x, nonfinite="ignore")
    with pytest.raises(ValueError, match="scale.shape"):
        quantize(x, granularity="rowwise", scale=torch.ones(4))
    with pytest.raises(ValueError, match="blockwise"):
        quantize(torch.randn(2, 3, 4), granularity="blockwise")
    with pytest.raises(TypeError, match="floating"):
        quantize(torch.ones(4, dtype=torch.int32))


def test_empty_and_zero_tensors():
    assert quantize(torch.empty(0, 16), granularity="rowwise").data.shape == (0, 16)
    q = quantize(torch.zeros(3, 16))
    assert (q.data.float() == 0).all() and torch.isfinite(q.scale).all()
