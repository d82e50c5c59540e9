import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.fp8.formats import format_info
from kernel_lib.fp8.reference import round_to_format
from kernel_lib.fp8.scaling import (
    BLOCK,
    MX_BLOCK,
    CastStats,
    ScalingRecipe,
    amax,
    cast_stats,
    delayed_scale,
    mx_scale_from_amax,
    push_amax,
    scale_from_amax,
    scale_shape,
    scaling_recipe,
)  # fmt: skip

from .conftest import wide_tensor


def _blockwise_amax_loop(x):
    rows, cols = math.ceil(x.shape[0] / BLOCK), math.ceil(x.shape[1] / BLOCK)
    out = torch.empty(rows, cols)
    for i in range(rows):
        for j in range(cols):
            out[i, j] = x[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK].abs().max()
    return out


def _row_block_amax_loop(x, width):
    blocks = [x[..., j : j + width].abs().amax(dim=-1) for j in range(0, x.shape[-1], width)]
    return torch.stack(blocks, dim=-1)


@settings(max_examples=10, deadline=None)
@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=2),
    k=st.integers(1, 300),
    seed=st.integers(0, 99),
)
def test_row_block_amax_matches_loops_on_partial_blocks(lead, k, seed):
    x = wide_tensor((*lead, k), seed=seed)
    for gran, width in (("blockwise_1x128", BLOCK), ("mx", MX_BLOCK)):
        got = amax(x, gran)
        assert got.shape == (*lead, -(-k // width))
        assert torch.equal(got, _row_block_amax_loop(x, width)), gran


@pytest.mark.parametrize("fmt, emax", [("e4m3fn", 8), ("e5m2", 15)])
def test_mx_scale_is_the_ocp_power_of_two(fmt, emax):
    f32 = torch.finfo(torch.float32)
    amaxes = torch.tensor([448.0, 1.0, 0.75, 3.999, 4.0, 0.0, 1e-40, f32.max, f32.tiny])
    want = []
    for a in amaxes.tolist():  # 2 ** -(floor(log2(amax)) - emax), the exponent clamped to e8m0
        e = -127 if a == 0 else max(-127, min(127, math.floor(math.log2(a)) - emax))
        want.append(2.0**-e)
    assert mx_scale_from_amax(amaxes, fmt).tolist() == want


def test_mx_scale_floors_not_ceils():
    # teeth: amax 3.999 -> floor(log2) = 1, so 3.999 * 2**7 = 512 saturates at 448 (OCP's rule);
    # a ceil would give 2**6 and no saturation
    assert mx_scale_from_amax(torch.tensor(3.999), "e4m3fn").item() == 2.0**7


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 300), k=st.integers(1, 300), seed=st.integers(0, 99))
def test_amax_matches_loops(m, k, seed):
    x = wide_tensor((m, k), seed=seed)
    assert amax(x, "tensorwise").item() == x.abs().max().item()
    assert torch.equal(amax(x, "rowwise"), torch.stack([r.abs().max() for r in x]).reshape(m, 1))
    got = amax(x, "blockwise")
    assert got.shape == scale_shape(
        (m, k), scaling_recipe("tensorwise_dynamic").granularity.BLOCKWISE
    )
    assert torch.equal(got, _blockwise_amax_loop(x))


def test_scale_maps_amax_to_format_max():
    a = torch.tensor([[3.0], [0.0], [1e-3]])
    s = scale_from_amax(a, "e4m3fn")
    assert s[0].item() == pytest.approx(448 / 3.0, rel=1e-7)
    assert math.isfinite(s[1].item()), "all-zero groups get a finite scale"
    assert scale_from_amax(torch.tensor(2.0), "e5m2", margin=1).item() == 57344 / 4


def test_unknown_recipe_and_bad_fields():
    with pytest.raises(ValueError, match="recipe"):
        scaling_recipe("blockwise_delayed_x")
    with pytest.raises(ValueError, match="granularity"):
        ScalingRecipe(granularity="colwise")
    with pytest.raises(NotImplementedError, match="mx"):
        ScalingRecipe(granularity="mx", mode="delayed")
    with pytest.raises(ValueError, match="mode"):
        ScalingRecipe(mode="static")
    with pytest.raises(ValueError, match="history_len"):
        ScalingRecipe(mode="delayed", history_len=0)
    with pytest.raises(ValueError, match="margin"):
        ScalingRecipe(margin=-1)
    with pytest.raises(NotImplementedError, match="rowwise"):
        ScalingRecipe(granularity="rowwise", mode="delayed")


def test_delayed_scale_uses_history_max_after_bootstrap():
    history = torch.zeros(3)
    first = delayed_scale(history, torch.tensor(2.0), "e4m3fn")
    assert first.item() == pytest.approx(448 / 2.0), "empty history: current amax"
    push_amax(history, torch.tensor(2.0))
    push_amax(history, torch.tensor(8.0))
    assert delayed_scale(history, torch.tensor(1.0), "e4m3fn").item() == pytest.approx(448 / 8.0)
    for _ in range(3):
        push_amax(history, torch.tensor(1.0))
    assert history.tolist() == [1.0, 1.0, 1.0], "old entries drop out"
    push_amax(history, torch.tensor(float("inf")))
    assert history[-1].item() == 0.0, "non-finite amax never enters the history"


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e4m3fnuz"])
def test_cast_stats_agree_with_the_rounded_result(fmt):
    info = format_info(fmt)
    x = wide_tensor((64, 200), seed=3, binades=(-10, 3))
    scale = torch.tensor(info.max / 50.0)  # a stale scale: everything past 50 saturates
    stats = cast_stats(x, scale, fmt)
    scaled = x.float() * scale
    unclamped = round_to_format(
        scaled.clamp(-2 * info.max, 2 * info.max), fmt
    )  # reference saturates too
    grid_next = info.max + 2.0 ** math.floor(math.log2(info.max)) * info.eps
    beyond = (scaled.abs().double() >= (info.max + grid_next) / 2).sum().item()
    assert stats.saturated == beyond > 0
    assert stats.underflow == ((unclamped == 0) & (x != 0)).sum().item() > 0
    assert stats.nan == stats.inf == 0 and stats.numel == x.numel()


def test_cast_stats_count_nonfinite_before_the_cast():
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 1000.0])
    stats = cast_stats(x, torch.tensor(1.0), "e4m3fn")
    assert stats == CastStats(numel=5, nan=1, inf=2, saturated=1, underflow=0)
    assert stats.nonfinite == 3
    assert x.to(torch.float8_e4m3fn).float()[2].item() == 448.0, "the cast itself hides inf"
