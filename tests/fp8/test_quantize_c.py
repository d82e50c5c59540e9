"""The C quantiser: bit-exact with `quantize` on odd shapes, every format, both granularities,
any thread count; the AVX2 build's plain loops as well (the build itself: tests/test_c_kernels.py).
Its arguments (tests/c_worker.py): over shapes and damaged x, out, fmt and granularity, every case
is `quantize`'s answer or one clear exception, in a worker process that no case may kill."""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib import c_kernels
from kernel_lib.fp8 import quantize_c
from kernel_lib.fp8.formats import FORMATS, format_info
from kernel_lib.fp8.quantize import Fp8Tensor, fp8_grid, quantize
from kernel_lib.fp8.quantize_c import c_quantize
from tests.c_worker import KINDS, alone, damaged, module_worker

from .conftest import wide_tensor, with_extremes, with_nonfinite

GRANULARITIES = ("tensorwise", "rowwise")
CASES = 200
DAMAGES = {
    "x": ("meta", "strided", "expanded", "list", "float64", "bfloat16"),  # flat: a valid shape
    "out": (*KINDS, "float32", "uint8", "float8_e5m2", "a row more"),
    "fmt": ("e4m3", "E4M3FN"),
    "granularity": ("blockwise", "channel"),
}
NO_GROUP = "an empty group"  # not a damage done: the shape has no amax to take, `quantize` raises

worker = module_worker("tests.fp8.test_quantize_c")


def _differs(got, ref) -> str | None:
    """What got has other than ref's scale, amax and FP8 bits, or None."""
    if not isinstance(got, Fp8Tensor):
        return f"a {type(got).__name__}, not an Fp8Tensor"
    if not got.scale.dtype == ref.scale.dtype == got.amax.dtype == torch.float32:
        return f"scale {got.scale.dtype}, amax {got.amax.dtype}"
    if not (torch.equal(got.scale, ref.scale) and torch.equal(got.amax, ref.amax)):
        return "another scale or amax"
    if got.data.dtype != ref.data.dtype or got.data.device.type != "cpu":
        return f"data {got.data.dtype} on {got.data.device}"
    same = torch.equal(got.data.view(torch.uint8), ref.data.view(torch.uint8))
    return None if same else "other FP8 codes"


def _assert_same(got, ref):
    assert not (why := _differs(got, ref)), why


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


@st.composite
def cases(draw) -> dict:
    shape = draw(st.lists(st.integers(0, 40), max_size=3))
    gran = draw(st.sampled_from(GRANULARITIES))
    kinds = [(name, kind) for name, some in DAMAGES.items() for kind in some]
    damage = draw(st.lists(st.sampled_from(kinds), max_size=2, unique_by=lambda d: d[0]))
    group = shape[-1:] if gran == "rowwise" else [math.prod(shape)]  # what one amax spans
    if group in ([], [0]):
        damage.append(("x", NO_GROUP))
    return dict(
        shape=shape,
        fmt=draw(st.sampled_from(FORMATS)),
        granularity=gran,
        nonfinite=draw(st.booleans()),
        out=draw(st.booleans()),
        threads=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
        damage=damage,
    )


def prepare(case: dict):
    """The case's x (many binades, NaN/inf where asked), then its damage; c_quantize of it and
    the check against `quantize` of the same arguments."""
    torch.set_num_threads(case["threads"])
    shape, fmt, gran = tuple(case["shape"]), case["fmt"], case["granularity"]
    x = wide_tensor(shape, seed=case["seed"]) if shape and shape[-1] else torch.ones(shape)
    ops = {
        "x": with_nonfinite(x) if case["nonfinite"] and x.numel() > 2 else x,
        "out": torch.empty(shape, dtype=format_info(fmt).dtype),
        "fmt": fmt,
        "granularity": gran,
    }
    damage = dict(case["damage"])
    for name, kind in case["damage"]:
        if name in ("fmt", "granularity"):
            ops[name] = kind
        elif kind == "a row more":
            ops[name] = torch.empty((1, *shape), dtype=ops[name].dtype)
        elif kind != NO_GROUP:
            ops[name] = damaged(ops[name], kind)
    out = ops["out"] if case["out"] or "out" in damage else None
    args = dict(fmt=ops["fmt"], granularity=ops["granularity"])

    def check(got):
        wrong = _differs(got, quantize(ops["x"], **args, nonfinite="nan"))
        return wrong or (None if out is None or got.data is out else "not written into out")

    return lambda: c_quantize(ops["x"], **args, out=out), check


@settings(max_examples=CASES, deadline=None)
@given(case=cases())
def test_every_case_is_right_or_one_clear_error(case, worker):
    worker.check(case)


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize(
    "case",
    alone(dict(shape=[7, 33], fmt="e4m3fn", nonfinite=True, out=True, threads=2, seed=0), DAMAGES),
)
def test_each_damage_alone_is_right_or_one_clear_error(case, granularity, worker):
    worker.check(dict(case, granularity=granularity))
