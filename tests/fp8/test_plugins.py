"""The fp8 plug-in slots (kernel_lib.plugins): a user's quantiser, FP8 linear and W8A16 linear
checked and timed in the built-ins' compares, against their references; the built-ins' records
as they are without any plug-in."""

import pytest
import torch
import torch.nn.functional as F

from kernel_lib import records as rec
from kernel_lib.checks import Unsupported
from kernel_lib.fp8 import bench, bench_weight_only, quantize_compiled
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.weight_only import dequant_linear
from kernel_lib.platform import device_facts
from kernel_lib.plugins import kernel

# two granularities and two recipes in one case each: the plug-ins' records need their suffix
CONFIG = Fp8BenchConfig.from_params(
    dict(
        fp8_quant_mib=[0.0625],  # 4 rows of 4096
        fp8_quant_granularities=["rowwise", "blockwise"],
        fp8_min_time_s=0.002,
        fp8_gemm_sizes=[64],
        fp8_recipes=["tensorwise_dynamic", "rowwise_dynamic"],
        fp8_weight_only_decode_rows=[1, 3],
        fp8_weight_only_prefill_rows=[17],
        fp8_weight_only_dims=[72, 40],
        fp8_weight_only_expert_dims=[128, 24],
    )
)
FACTS = device_facts()


@pytest.fixture(autouse=True)
def eager_inductor_paths(monkeypatch):
    """The Inductor paths run eager under their names: their compiles (tens of seconds cold) are
    test_bench.py's; here they are only neighbours whose records must not change."""

    def eager_quantize(x, *, fmt, granularity, out=None, cast="bits", fuse_rows=False):
        return quantize(x, fmt=fmt, granularity=granularity, nonfinite="nan")

    monkeypatch.setattr(quantize_compiled, "compiled_quantize", eager_quantize)
    monkeypatch.setattr(bench_weight_only, "compiled_dequant_linear", dequant_linear)


def _fp8(t: torch.Tensor, fmt: str, rowwise: bool):
    """t in FP8 with its scale fp8_max / amax (per row or per tensor), in plain torch."""
    dtype = getattr(torch, f"float8_{fmt}")
    fmax = torch.finfo(dtype).max
    mag = t.float().abs()
    amax = (mag.amax(dim=-1, keepdim=True) if rowwise else mag.amax()).clamp(min=1e-12)
    scale = torch.div(torch.full_like(amax, fmax), amax)
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype), scale


def _rowwise_quantize(x, fmt, granularity):
    if granularity != "rowwise":
        raise Unsupported(f"rowwise only, not {granularity}")
    return _fp8(x, fmt, rowwise=True)


def _off_scale(x, fmt, granularity):
    data, scale = _fp8(x, fmt, rowwise=True)
    return data, scale * 1.1


def _fp8_linear(x, w, recipe):
    rowwise = recipe.startswith("rowwise")
    (qx, sx), (qw, sw) = _fp8(x, "e4m3fn", rowwise), _fp8(w, "e4m3fn", rowwise)
    return ((qx.float() / sx) @ (qw.float() / sw).t()).to(torch.bfloat16)


def _w8a16(x, weight):
    n, k = weight.data.shape
    scale = weight.scale_inv
    if weight.scaling == "block":
        scale = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return F.linear(x, (weight.data.float() * scale).to(torch.bfloat16))


def _raises(*args):
    raise RuntimeError("my kernel: bad launch\nsecond line")


def _ours(records):
    """What a built-in's record is, whatever the timing: identity, status, check and rates."""
    return [
        (
            rec.record_id(r, "test"),
            r.status,
            r.reason if r.status != "ok" else "",
            r.check and {k: r.check[k] for k in ("reference", "tolerance", "pass")},
            r.baseline,
            r.peak_basis,
            r.bytes,
            r.flops,
            sorted(r.metrics),
        )
        for r in records
        if r.plugin is None
    ]


def _by_name(records, **shape):
    return {
        r.implementation: r
        for r in records
        if r.plugin is not None and shape.items() <= r.shape.items()
    }


def _run(section, plugins):
    """The section's records without plug-ins, then with `plugins` ({slot: {name: fn}}): the
    built-ins' alike, the ids unique."""
    alone = section(CONFIG, FACTS)
    for slot, fns in plugins.items():
        for name, fn in fns.items():
            kernel(slot, name=name)(fn)
    got = section(CONFIG, FACTS)
    assert _ours(got) == _ours(alone)
    rec.stamp(got, run_id="test", platform="test")  # raises on a shared record_id
    return got


def test_a_plugin_quantiser_is_timed_against_copy_checked_bit_exact(plugin_registry):
    got = _run(
        bench.quantize_bandwidth,
        {
            "fp8.quantize": {
                "mine": _rowwise_quantize,
                "fp8_tensor": lambda x, fmt, gran: quantize(x, fmt=fmt, granularity=gran),
                "off_scale": _off_scale,
                "no_cast": lambda x, fmt, gran: (x.clone(), torch.ones(())),
            }
        },
    )
    plugins = _by_name(got)
    mine = plugins["mine_rowwise"]
    assert mine.status == "ok" and mine.check["pass"] and mine.gbps > 0
    assert "copy" in mine.peak_basis and mine.fraction_of_peak > 0
    assert mine.baseline == "copy" and mine.ratio_low <= mine.ratio_vs_baseline
    assert mine.plugin["slot"] == "fp8.quantize" and mine.plugin["name"] == "mine"
    assert plugins["fp8_tensor_rowwise"].status == plugins["fp8_tensor_blockwise"].status == "ok"
    skipped = plugins["mine_blockwise"]
    assert skipped.status == "skipped" and skipped.reason == "rowwise only, not blockwise"
    off = plugins["off_scale_rowwise"]
    assert off.status == "wrong" and off.median_ms is None and not off.samples_ms
    assert plugins["no_cast_rowwise"].status == "failed"
    assert "must be float8" in plugins["no_cast_rowwise"].reason
    assert all(r.variant != "mine_rowwise" for r in got)  # never chosen


def test_a_plugin_fp8_linear_gets_a_ratio_over_bf16_per_recipe(plugin_registry):
    got = _run(
        bench.linear_speed,
        {
            "fp8.linear": {
                "mine": _fp8_linear,
                "too_big": lambda x, w, recipe: _fp8_linear(x, w, recipe) * 1.1,
                "broken": _raises,
            }
        },
    )
    plugins = _by_name(got)
    for recipe in CONFIG.recipes:
        mine = plugins[f"mine_{recipe}"]
        assert mine.status == "ok" and mine.baseline.startswith("bf16_linear")
        assert mine.ratio_low <= mine.ratio_vs_baseline <= mine.ratio_high
        assert mine.check["reference"].startswith("fp64 FP8 reference")
        assert mine.dtype == "float8_e4m3fn" and mine.plugin["name"] == "mine"
        ours = {r.implementation: r for r in got}[f"fp8_linear_{recipe}"]
        assert mine.check["reference"] == ours.check["reference"]
        assert mine.check["tolerance"] == ours.check["tolerance"]
        too_big = plugins[f"too_big_{recipe}"]
        assert too_big.status == "wrong" and not too_big.samples_ms and too_big.plugin
        broken = plugins[f"broken_{recipe}"]
        assert broken.status == "failed" and broken.reason == "RuntimeError: my kernel: bad launch"


def test_a_plugin_linear_runs_where_scaled_mm_does_not(plugin_registry, refused_scaled_mm):
    kernel("fp8.linear", name="mine")(_fp8_linear)
    got = {r.implementation: r for r in bench.linear_speed(CONFIG, FACTS)}
    assert got["fp8_linear_tensorwise_dynamic"].status == "skipped"
    assert got["mine_tensorwise_dynamic"].status == "ok"
    assert got["mine_tensorwise_dynamic"].ratio_vs_baseline is not None


def test_a_plugin_w8a16_linear_is_timed_in_every_weight_only_case(plugin_registry):
    got = _run(
        bench_weight_only.weight_only_speed,
        {"fp8.weight_only_linear": {"mine": _w8a16, "broken": lambda x, weight: _raises()}},
    )
    cases = [shape.as_dict() | {"scaling": s} for shape, s in CONFIG.weight_only_cases]
    for shape in cases:
        plugins = _by_name(got, **shape)
        ours = {r.implementation: r for r in got if shape.items() <= r.shape.items()}
        mine = plugins["mine"]
        assert mine.status == "ok" and mine.baseline.startswith("bf16_linear")
        assert mine.ratio_low <= mine.ratio_vs_baseline <= mine.ratio_high
        for key in ("reference", "tolerance"):
            assert mine.check[key] == ours["dequant_linear"].check[key]
        assert mine.bytes == ours["dequant_linear"].bytes and mine.fraction_of_peak > 0
        assert mine.plugin["slot"] == "fp8.weight_only_linear"
        assert plugins["broken"].status == "failed" and "bad launch" in plugins["broken"].reason
