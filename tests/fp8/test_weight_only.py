"""The weight-only FP8 linear (W8A16): the C kernel and the plain paths against the fp64 reference
at odd shapes with subnormal, max-finite and NaN weights, in the build for this CPU and the AVX2
one; a kernel broken on purpose fails its check; the section's records."""

import types

import pytest
import torch

from kernel_lib import c_kernels
from kernel_lib import records as rec
from kernel_lib.checks import Unsupported, against, relative_error
from kernel_lib.fp8 import bench_weight_only, quantize_compiled, weight_only_c, weight_only_peers
from kernel_lib.fp8.checks import TOLERANCES
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.weight_only import (
    dequant_linear,
    dequantize_weight,
    quantize_weight,
    weight_only_reference,
)  # fmt: skip
from kernel_lib.fp8.weight_only_c import (
    c_dequant_linear,
    c_dequantize_weight,
    c_w8a16_linear,
    c_w8a16_prefetch_linear,
    c_w8a16_streamed_linear,
)  # fmt: skip
from kernel_lib.platform import device_facts
from kernel_lib.profiling.capture import profiled
from kernel_lib.profiling.pending import PROFILE_ENV

SHAPES = [(1, 200, 72), (3, 131, 259), (4, 136, 33), (17, 300, 130)]  # (M, K, N): ragged K, N
PATHS = {"c_w8a16_linear": c_w8a16_linear, "c_dequant_linear": c_dequant_linear}
PATHS["c_w8a16_prefetch_linear"] = c_w8a16_prefetch_linear
PATHS["c_w8a16_streamed_linear"] = c_w8a16_streamed_linear
PATHS["dequant_linear"] = dequant_linear
SPECIAL = {1: "smallest subnormal", 0x87: "-largest subnormal", 0x7E: "max", 0xFE: "-max"}


def _paths() -> dict:
    """PATHS this build runs: streamed rows only with the bf16 dot products."""
    if weight_only_c.isa() == "avx512_vbmi_bf16":
        return PATHS
    return {name: path for name, path in PATHS.items() if name != "c_w8a16_streamed_linear"}


@pytest.fixture(params=["native", "avx2"])
def build(request, monkeypatch, tmp_path_factory):
    """The library as built for this CPU, then held to AVX2 (CI's ISA pass, CPUs without
    AVX-512): the fp32-FMA build, in a folder of its own."""
    if request.param == "avx2":
        if not c_kernels.is_x86():
            pytest.skip("x86 builds only")
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
        monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "avx2"))
    weight_only_c._library.cache_clear()
    yield request.param
    weight_only_c._library.cache_clear()


def _weight(n, k, scaling, *, seed=0, special=True, nan=False):
    """A quantised seeded (N, K) weight over many binades; with `special`, the codes of SPECIAL
    written into row 0 (the product keeps them in range); with `nan`, a NaN code in row 1."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-3, 1, k)
    qw = quantize_weight(w, scaling)
    bits = qw.data.view(torch.uint8).clone()
    if special:
        bits[0, : len(SPECIAL)] = torch.tensor(list(SPECIAL), dtype=torch.uint8)
    if nan:
        bits[1, k // 2] = 0xFF
    return qw._replace(data=bits.view(torch.float8_e4m3fn))


def _x(m, k, seed=1):
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


@pytest.mark.parametrize("scaling", ["channel", "block"])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_every_path_matches_the_fp64_reference_at_odd_shapes(m, k, n, scaling, build):
    qw, x = _weight(n, k, scaling), _x(m, k)
    ref = weight_only_reference(x, qw)
    assert weight_only_c.isa() in weight_only_c.ISAS
    if build == "avx2":
        assert weight_only_c.isa() == "avx2"
    for name, path in _paths().items():
        got = path(x, qw)
        assert got.dtype == torch.bfloat16 and got.shape == (m, n), name
        assert relative_error(got.double(), ref) <= TOLERANCES["bf16_out"].value, name


@pytest.mark.parametrize("scaling", ["channel", "block"])
def test_nan_weights_give_nan_in_their_output_column_only(scaling, build):
    m, k, n = 3, 131, 37
    qw, x = _weight(n, k, scaling, nan=True), _x(m, k)
    ref = weight_only_reference(x, qw)
    for name, path in _paths().items():
        got = path(x, qw).double()
        assert torch.equal(got.isnan(), ref.isnan()) and got[:, 1].isnan().all(), name
        finite = ~ref.isnan()
        error = (got[finite] - ref[finite]).abs().max() / ref[finite].abs().max()
        assert error <= TOLERANCES["bf16_out"].value, name


def test_every_finite_code_converts_to_its_e4m3fn_value(build):
    """Each of the 254 finite codes (subnormals and max-finite included) read out through one-hot
    rows of x, in registers (M <= 2) and through the converted tile (M = 128). (A NaN code makes
    its whole dot product NaN: test_nan_weights_...)"""
    codes = torch.arange(256, dtype=torch.uint8).view(2, 128)
    codes[:, 127] = 0  # 0x7f, 0xff: NaN
    data = codes.view(torch.float8_e4m3fn)
    qw = quantize_weight(torch.ones(2, 128))._replace(data=data, scale_inv=torch.ones(2, 1))
    want = data.float().t()  # (K, N): row j holds code j of each weight row
    eye = torch.eye(128, dtype=torch.bfloat16)
    tile = c_w8a16_linear(eye, qw).float()
    direct = torch.cat([c_w8a16_linear(eye[j : j + 2], qw) for j in range(0, 128, 2)]).float()
    assert want.abs().max() == 448 and want[1:8, 0].min() == 2.0**-9  # max, subnormals
    assert torch.equal(tile, want) and torch.equal(direct, want)


def test_the_c_conversion_is_the_plain_one_bit_for_bit(build):
    for scaling in ("channel", "block"):
        qw = _weight(130, 300, scaling, nan=True)
        got, want = c_dequantize_weight(qw), dequantize_weight(qw, torch.bfloat16)
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_prefetching_changes_no_bit_and_a_negative_distance_is_refused(build):
    for scaling in ("channel", "block"):
        for m in (1, 5):  # registers, and the converted-tile buffer
            qw, x = _weight(67, 300, scaling), _x(m, 300)
            assert torch.equal(c_w8a16_prefetch_linear(x, qw), c_w8a16_linear(x, qw))
    with pytest.raises(ValueError, match="prefetch=-1"):
        c_w8a16_linear(x, qw, prefetch=-1)


def test_streamed_rows_are_skipped_where_not_built(build):
    qw, x = _weight(67, 300, "block"), _x(9, 300)  # 9 rows: two groups of 4 and one
    if weight_only_c.isa() != "avx512_vbmi_bf16":
        with pytest.raises(Unsupported, match="AVX512-VBMI and -BF16 only"):
            c_w8a16_streamed_linear(x, qw)
        return
    ref = weight_only_reference(x, qw)
    assert (
        relative_error(c_w8a16_streamed_linear(x, qw).double(), ref)
        <= TOLERANCES["bf16_out"].value
    )


def test_any_thread_count_gives_the_same_bits():
    qw, x = _weight(67, 300, "block"), _x(5, 300)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = c_w8a16_linear(x, qw)
        torch.set_num_threads(2)
        assert torch.equal(c_w8a16_linear(x, qw), one)
    finally:
        torch.set_num_threads(before)


class _OffByOneScale:
    """The library with each output reading the scale of the next channel (or block row): the
    kind of indexing slip the check must catch."""

    def __init__(self, lib):
        self.lib = lib

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def w8a16_linear(self, x, m, k, w, n, channel, block, out, *rest):
        shift = lambda p: None if p is None else p + 4  # noqa: E731 - one float further
        return self.lib.w8a16_linear(x, m, k, w, n, shift(channel), shift(block), out, *rest)


@pytest.mark.parametrize("scaling", ["channel", "block"])
def test_a_broken_kernel_fails_its_check(scaling, monkeypatch):
    """Teeth: the kernel with its scales off by one must fail the check the section times it
    with (the last scale reads a padding float: the scales are given one more)."""
    qw, x = _weight(300, 400, scaling, special=False), _x(3, 400)
    padded = torch.cat([qw.scale_inv.flatten(), torch.ones(1)])
    qw = qw._replace(scale_inv=padded[:-1].view(qw.scale_inv.shape))
    check = against(
        lambda: weight_only_reference(x, qw), reference="fp64", tolerance=TOLERANCES["bf16_out"]
    )
    assert check(c_w8a16_linear(x, qw)).passed
    lib = weight_only_c._library()
    monkeypatch.setattr(weight_only_c, "_library", lambda: _OffByOneScale(lib))
    assert not check(c_w8a16_linear(x, qw)).passed
    assert not check(c_w8a16_prefetch_linear(x, qw)).passed
    assert not check(c_w8a16_streamed_linear(x, qw)).passed


def test_bad_operands_raise_one_line():
    qw = _weight(8, 32, "channel")
    with pytest.raises(ValueError, match="bfloat16"):
        c_w8a16_linear(torch.randn(2, 32), qw)
    with pytest.raises(ValueError, match="K=16"):
        c_w8a16_linear(_x(2, 16), qw)
    with pytest.raises(ValueError, match="scaling="):
        quantize_weight(torch.randn(8, 32), "tensor")


TINY = Fp8BenchConfig.from_params(
    dict(
        fp8_min_time_s=0.01,
        fp8_weight_only_decode_rows=[1, 3],
        fp8_weight_only_prefill_rows=[17],
        fp8_weight_only_dims=[72, 40],
        fp8_weight_only_expert_dims=[128, 24],
    )
)


@pytest.mark.slow
def test_the_section_times_every_path_with_bytes_and_declares_the_decode_headline():
    records = bench_weight_only.weight_only_speed(TINY, device_facts())
    frame = rec.to_frame(records)
    compared = frame[frame["case"] == "weight_only_linear"]
    assert set(compared["implementation"]) == {
        "bf16_linear", "copy", "read", "aten_int8pack_mm", "dequant_linear",
        *bench_weight_only.VARIANTS,
    }  # fmt: skip
    assert len(compared) == (5 + len(bench_weight_only.VARIANTS)) * len(TINY.weight_only_cases)
    off = frame["status"] != "ok"  # ATen's int8 kernel is never called at K = 72
    assert (frame[off]["implementation"] == "aten_int8pack_mm").all()
    assert (frame[off]["shape.K"] == 72).all() and off.sum() == 3
    assert frame[off]["reason"].str.contains("not a multiple of 16").all()
    fp8 = frame[frame["dtype"] == "float8_e4m3fn"]
    assert (fp8["metrics.weight_bytes_vs_bf16"] < 0.6).all()  # FP8 bytes and fp32 scales
    int8 = compared[(compared["implementation"] == "aten_int8pack_mm") & ~off]
    assert len(int8) == 1 and (int8["metrics.weight_bytes_vs_bf16"] < 0.6).all()
    assert int8["check.pass"].all()
    timed = compared[(compared["implementation"] != "copy") & ~off]
    assert timed["fraction_of_peak"].notna().all()
    heads = frame[frame["headline"].notna()].set_index("headline")
    assert sorted(heads.index) == [
        "fp8.weight_only_decode_vs_bf16",
        "fp8.weight_only_decode_vs_read",
    ]
    assert (heads["implementation"] == heads["variant"]).all()
    assert (heads["shape.M"] == 1).all() and (heads["shape.scaling"] == "channel").all()
    read = heads.loc["fp8.weight_only_decode_vs_read"]
    assert read["case"] == "weight_only_vs_read" and read["baseline"] == "read"
    vs_read = frame[frame["case"] == "weight_only_vs_read"]  # ids whatever is chosen here
    assert sorted(vs_read["implementation"]) == sorted(bench_weight_only.VARIANTS)
    assert read["ratio_low"] <= read["ratio_vs_baseline"] <= read["ratio_high"]
    assert read["fraction_of_peak"] > 0 and read["bytes"] == read["metrics.weight_bytes"]


def test_the_read_ceiling_reads_the_weights_bytes_and_the_int8_peer_is_checked():
    """The read covers the FP8 data and its scales; ATen's int8 GEMM on an int8 copy passes
    against its own fp64 reference, and fails it with its scales dropped (teeth)."""
    with pytest.raises(Unsupported, match="K=72"):  # out of bounds there: never called
        weight_only_peers.aten_int8_linear(
            _x(1, 72), *weight_only_peers.int8_weight(torch.ones(8, 72))
        )
    qw = _weight(48, 80, "channel", special=False)
    buffer = weight_only_peers.read_buffer(qw)
    assert buffer.dtype == torch.int32 and buffer.nbytes >= qw.nbytes > buffer.nbytes - 4
    assert weight_only_peers.read(buffer) == buffer.max()
    x, w = _x(3, 80), torch.randn(48, 80)
    q, scales = weight_only_peers.int8_weight(w)
    check = against(
        lambda: weight_only_peers.int8_reference(x, q, scales),
        reference="fp64",
        tolerance=TOLERANCES["bf16_out"],
    )
    assert check(weight_only_peers.aten_int8_linear(x, q, scales)).passed
    assert not check(weight_only_peers.aten_int8_linear(x, q, torch.ones_like(scales))).passed


@pytest.mark.slow
def test_the_c_paths_are_skipped_with_the_reason_they_cannot_build(monkeypatch, tmp_path):
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(weight_only_c, "_library", weight_only_c._library.__wrapped__)
    monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
    got = {r.implementation: r for r in bench_weight_only.weight_only_speed(TINY, device_facts())}
    for name in bench_weight_only.VARIANTS[1:]:
        assert got[name].status == "skipped" and "no C compiler" in got[name].reason
    assert got["bf16_linear"].status == got["compiled_dequant_linear"].status == "ok"


def test_the_exact_division_key_is_found_in_either_spelling():
    """torch 2.10 spells it emulate_divison_rounding (sic); newer torch eager_numerics.*."""
    old = types.SimpleNamespace(emulate_divison_rounding=False)
    new = types.SimpleNamespace(eager_numerics=types.SimpleNamespace(division_rounding=False))
    assert quantize_compiled.division_key(old) == "emulate_divison_rounding"
    assert quantize_compiled.division_key(new) == "eager_numerics.division_rounding"
    assert (
        quantize_compiled.division_key(types.SimpleNamespace())
        == "eager_numerics.division_rounding"
    )
    assert quantize_compiled.EXACT_DIVISION == {quantize_compiled.division_key(): True}


@pytest.mark.parametrize(
    "cache, fp8_bytes, copies",
    [
        (32 * 2**20, 16 * 2**20, 4),
        (32 * 2**20, 64 * 2**20, 1),
        (32 * 2**20, 4096, 64),
        (None, 2**26, 8),
    ],
)
def test_the_timed_weights_add_up_to_twice_the_cache(monkeypatch, cache, fp8_bytes, copies):
    """A 4096 x 4096 FP8 weight (16 MiB) fits a 32 MiB cache: timed alone, every call would read
    it from the cache, not memory as decoding does; cycled copies add up to twice the cache."""
    monkeypatch.setattr(bench_weight_only, "last_level_cache_bytes", lambda device: cache)
    assert bench_weight_only.weight_copies(fp8_bytes) == copies


def test_each_timed_call_reads_the_next_copy():
    seen = []
    call = bench_weight_only.rotating(seen.append, ["a", "b", "c"])
    for _ in range(4):
        call()
    assert seen == ["a", "b", "c", "a"]


@pytest.mark.slow
def test_both_decode_headlines_get_the_profile_of_their_one_timed_call(monkeypatch, tmp_path):
    """The read-ceiling headline is made from the chosen variant's samples: it is profiled with
    that call, never flagged as having none."""
    monkeypatch.setenv(PROFILE_ENV, "headlines")
    monkeypatch.setenv(rec.RESULTS_DIR_ENV, str(tmp_path))
    records = profiled(bench_weight_only.weight_only_speed(TINY, device_facts()))
    heads = {r.headline: r for r in records if r.headline}
    assert set(heads) == {"fp8.weight_only_decode_vs_bf16", "fp8.weight_only_decode_vs_read"}
    assert all(r.profile and not r.flags for r in heads.values())
