"""The C quantiser: bit-exact with `quantize` on odd shapes, every format, both granularities,
any thread count; the AVX2 build's plain loops as well (the build itself: tests/test_c_kernels.py)."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib import c_kernels
from kernel_lib.fp8 import quantize_c
from kernel_lib.fp8.formats import FORMATS
from kernel_lib.fp8.quantize import fp8_grid, quantize
from kernel_lib.fp8.quantize_c import c_quantize

from .conftest import wide_tensor, with_extremes, with_nonfinite

GRANULARITIES = ("tensorwise", "rowwise")


def _assert_same(got, ref):
    assert got.scale.dtype == ref.scale.dtype == got.amax.dtype == torch.float32
    assert torch.equal(got.scale, ref.scale) and torch.equal(got.amax, ref.amax)
    assert got.data.dtype == ref.data.dtype
    assert torch.equal(got.data.view(torch.uint8), ref.data.view(torch.uint8))


@pytest.fixture(params=["native", "plain"])
def build(request, monkeypatch, tmp_path_factory):
    """The library as built for this CPU, then held to AVX2 (CI's ISA pass, CPUs without
    AVX-512): the plain loops, not the intrinsics, built into a folder of their own."""
    if request.param == "native":
        yield
        return
    if not c_kernels.is_x86():
        pytest.skip("x86 builds only")
    folder = tmp_path_factory.getbasetemp() / "plain_build"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(folder))
    quantize_c._library.cache_clear()
    try:
        yield
        assert [p.name.startswith("quantize_c-") for p in folder.glob("*.so")] == [True]
    finally:
        quantize_c._library.cache_clear()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("gran", GRANULARITIES)
def test_bit_exact_with_quantize(fmt, gran, build):
    x = with_nonfinite(with_extremes(wide_tensor((37, 300), seed=2, binades=(-9, 5))))
    _assert_same(
        c_quantize(x, fmt=fmt, granularity=gran),
        quantize(x, fmt=fmt, granularity=gran, nonfinite="nan"),
    )


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(0, 40), min_size=1, max_size=3),
    fmt=st.sampled_from(FORMATS),
    gran=st.sampled_from(GRANULARITIES),
    seed=st.integers(0, 2**16),
)
def test_bit_exact_on_random_shapes(shape, fmt, gran, seed):
    """Odd and empty shapes (rows of one element, no rows, rows of nothing), 1-3 dims; an empty
    group (no amax to take) is a ValueError where `quantize` raises too."""
    x = wide_tensor(tuple(shape), seed=seed) if shape[-1] else torch.zeros(shape)
    try:
        ref = quantize(x, fmt=fmt, granularity=gran, nonfinite="nan")
    except (IndexError, RuntimeError):
        with pytest.raises(ValueError, match="empty group"):
            c_quantize(x, fmt=fmt, granularity=gran)
        return
    _assert_same(c_quantize(x, fmt=fmt, granularity=gran), ref)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ties_and_near_ties_round_like_torch(fmt):
    """Every grid value, every midpoint and the fp32 values either side of it, both signs, at
    scale 1 (+-max is in the row)."""
    grid = fp8_grid(fmt).float()
    mid = (grid[:-1] + grid[1:]) / 2
    below, above = torch.nextafter(mid, torch.tensor(0.0)), torch.nextafter(mid, torch.tensor(1e9))
    values = torch.cat([grid, mid, below, above])
    x = torch.cat([values, -values]).reshape(1, -1)
    got = c_quantize(x, fmt=fmt, granularity="rowwise")
    assert got.scale.item() == 1.0
    assert torch.equal(got.data.view(torch.uint8), x.to(got.data.dtype).view(torch.uint8))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_same_bits_on_any_thread_count(threads):
    x = wide_tensor((1000, 257), seed=3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        got = [c_quantize(x, granularity=g) for g in GRANULARITIES]
    finally:
        torch.set_num_threads(before)
    for g, q in zip(GRANULARITIES, got):
        _assert_same(q, quantize(x, granularity=g, nonfinite="nan"))


def test_writes_into_out_and_checks_its_inputs():
    x = torch.randn(37, 300)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    assert c_quantize(x, out=out).data is out
    with pytest.raises(ValueError, match="out must be"):
        c_quantize(x, out=torch.empty(x.shape, dtype=torch.float8_e5m2))
    with pytest.raises(ValueError, match="float32"):
        c_quantize(x.bfloat16())
    with pytest.raises(ValueError, match="not contiguous"):
        c_quantize(x.t())
    with pytest.raises(ValueError, match="granularity"):
        c_quantize(x, granularity="blockwise")


def test_a_wrong_constant_gives_wrong_codes(monkeypatch):
    """Teeth: the kernel reads its format constants from cast_constants; one saturation bound
    off (a lower max) and the largest values come out wrong."""
    real = quantize_c.cast_constants
    monkeypatch.setattr(
        quantize_c,
        "cast_constants",
        lambda fmt: dataclasses.replace(real(fmt), max_bits=real(fmt).max_bits - (1 << 20)),
    )
    x = torch.randn(8, 64)
    got, ref = c_quantize(x), quantize(x, nonfinite="nan")
    assert not torch.equal(got.data.view(torch.uint8), ref.data.view(torch.uint8))
