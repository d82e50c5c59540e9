import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.fp8 import scaling
from kernel_lib.fp8.formats import FORMATS, format_info
from kernel_lib.fp8.quantize import MX_FORMATS, dequantize, fp8_grid, quantize
from kernel_lib.fp8.reference import quantize_reference, round_to_format
from kernel_lib.fp8.scaling import GRANULARITIES, broadcast_scale

from .conftest import wide_tensor, with_extremes, with_nonfinite

quantize_module = importlib.import_module("kernel_lib.fp8.quantize")  # fp8.quantize: the function
MX_NAMES = [f.value for f in MX_FORMATS]
SCALED = [g for g in GRANULARITIES if g != "mx"]  # scale = fp8_max / amax


def _bits(t):
    return t.data.view(torch.uint8)


def _same(got, ref):
    return (
        torch.equal(got.scale, ref.scale)
        and torch.equal(got.amax, ref.amax)
        and torch.equal(_bits(got), _bits(ref))
    )


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 200),
    k=st.integers(6, 300),
    fmt=st.sampled_from(FORMATS),
    gran=st.sampled_from(GRANULARITIES),
    seed=st.integers(0, 999),
)
def test_quantize_is_bit_exact_with_the_fp64_oracle(m, k, fmt, gran, seed):
    if gran == "mx" and fmt not in MX_NAMES:
        fmt = "e4m3fn"
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
@pytest.mark.parametrize("gran", SCALED)
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


@pytest.mark.parametrize("gran", ["blockwise_1x128", "mx"])
@pytest.mark.parametrize("fmt", MX_NAMES)
def test_row_blocks_on_3d_odd_k_are_bit_exact(gran, fmt):
    x = with_nonfinite(with_extremes(wide_tensor((3, 5, 161), seed=4)))  # K = 161: partial block
    got = quantize(x, fmt=fmt, granularity=gran, nonfinite="nan")
    assert _same(got, quantize_reference(x, fmt=fmt, granularity=gran))


@pytest.mark.parametrize("gran", ["blockwise", "blockwise_1x128", "mx"])
def test_all_zero_blocks_stay_zero_with_finite_scales(gran):
    x = torch.zeros(130, 300)
    x[0, 200] = 5.0  # one nonzero block; the rest all zero
    q = quantize(x, granularity=gran)
    assert torch.isfinite(q.scale).all() and (q.scale > 0).all()
    assert torch.equal(q.dequantize(), x)


@pytest.mark.parametrize("gran", ["blockwise_1x128", "mx"])
def test_an_outlier_only_coarsens_its_own_block(gran):
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))
    spiked = x.clone()
    spiked[1, 3] = 1e4
    q, q_spiked = quantize(x, granularity=gran), quantize(spiked, granularity=gran)
    width = scaling.BLOCK_SHAPES[scaling.Granularity(gran)][1]
    differ = (q.scale != q_spiked.scale).nonzero().tolist()
    assert differ == [[1, 0]], f"{differ}: only row 1's first {width}-block rescales"
    rows = torch.arange(4) != 1
    assert torch.equal(_bits(q)[rows], _bits(q_spiked)[rows])


def test_mx_scales_are_e8m0_exactly():
    q = quantize(torch.randn(8, 96) * 1e3, granularity="mx", fmt="e5m2")
    e8m0 = q.e8m0_scale()
    assert e8m0.dtype == torch.float8_e8m0fnu and e8m0.shape == (8, 3)
    assert torch.equal(e8m0.float() * q.scale, torch.ones(8, 3))
    with pytest.raises(ValueError, match="e8m0"):
        quantize(torch.randn(4, 32)).e8m0_scale()


def test_mx_refuses_formats_it_does_not_define():
    with pytest.raises(ValueError, match="fmt='e4m3fnuz'"):
        quantize(torch.randn(4, 32), fmt="e4m3fnuz", granularity="mx")


@pytest.mark.parametrize("gran, width", [("blockwise_1x128", 64), ("mx", 16)])
def test_a_wrong_block_width_fails_the_bit_exact_check(monkeypatch, gran, width):
    x = wide_tensor((6, 256), seed=2)
    ref = quantize_reference(x, granularity=gran)
    g = scaling.Granularity(gran)
    monkeypatch.setitem(scaling.BLOCK_SHAPES, g, (1, width))
    got = quantize(x, granularity=gran)
    assert not (got.scale.shape == ref.scale.shape and _same(got, ref))


def test_ceil_scale_rounding_fails_the_bit_exact_check(monkeypatch):
    x = wide_tensor((6, 256), seed=2)
    ref = quantize_reference(x, granularity="mx")

    def ceil_scale(amax, fmt):  # ceil(log2(amax)) where amax is no power of two: half the scale
        return scaling.mx_scale_from_amax(amax, fmt) / 2

    monkeypatch.setattr(quantize_module, "mx_scale_from_amax", ceil_scale)
    assert not _same(quantize(x, granularity="mx"), ref)


INDUCTOR_128X128 = pytest.mark.xfail(
    strict=False,  # measured failing on AMD EPYC (AVX-512 and AVX2); other CPUs may differ
    reason="torch 2.13 Inductor (CPU) miscompiles the 128x128 amax fused into the scaled cast "
    "when K is not a multiple of 128: later column blocks read garbage",
)


@pytest.mark.parametrize("shape", [(9, 200), (1, 200), (2, 3, 130)])  # partial last blocks
@pytest.mark.parametrize(
    "gran", [pytest.param("blockwise", marks=INDUCTOR_128X128), "blockwise_1x128", "mx"]
)
def test_the_fast_path_compiles_bit_exact(gran, shape):
    if gran == "blockwise" and len(shape) != 2:
        pytest.skip("128x128 blocks need a 2-D x")

    def codes(x):
        q = quantize(x, granularity=gran, nonfinite="nan")
        return q.data.view(torch.uint8), q.scale

    x = with_nonfinite(with_extremes(wide_tensor(shape, seed=5)))
    got = torch.compile(codes, fullgraph=True, dynamic=False)(x)
    ref = quantize_reference(x, granularity=gran)
    assert torch.equal(got[0], _bits(ref)) and torch.equal(got[1], ref.scale)
