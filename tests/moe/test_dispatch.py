import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.moe.capacity import apply_capacity
from kernel_lib.moe.dispatch import (
    dispatch_loop,
    dispatch_packed_segments,
    dispatch_padded,
    dispatch_sorted_grouped,
    dispatch_sorted_segments,
    sum_slots,
)  # fmt: skip
from kernel_lib.moe.experts import ACTIVATIONS
from kernel_lib.moe.per_core import dispatch_per_core
from tests.moe.conftest import as_fp64, make_experts, random_routing

DIFFERENTIABLE = [dispatch_sorted_grouped, dispatch_sorted_segments, dispatch_padded]
FAST = [*DIFFERENTIABLE, dispatch_packed_segments, dispatch_per_core]
ANY_SHAPE = [
    dispatch_loop, dispatch_sorted_segments, dispatch_packed_segments, dispatch_padded,
    dispatch_per_core,
]  # fmt: skip


def _check(fn, x, routing, experts, *, rtol=2e-5):
    ref = dispatch_loop(x.double(), routing, as_fp64(experts))
    out = fn(x, routing, experts)
    assert out.shape == x.shape and out.dtype == x.dtype
    err = (out.double() - ref).abs().max().item() if ref.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 1.0
    assert err <= rtol * max(scale, 1.0), f"{fn.__name__}: max err {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("fn", FAST)
def test_clamped_swiglu_past_its_limit(fn):
    ex = make_experts(4, 16, 24, activation="swiglu_clamped")
    x = 6 * torch.randn(40, 16)  # pre-activations ~N(0, 36): many past the limit 7
    assert ((x @ ex.w_in[0]).abs() > 7).float().mean() > 0.1
    _check(fn, x, random_routing(40, 4, 2), ex)


@settings(max_examples=15, deadline=None)
@given(
    tokens=st.integers(1, 37),
    hidden4=st.integers(1, 9),
    ffn4=st.integers(1, 9),
    experts=st.integers(1, 6),
    data=st.data(),
)
def test_grouped_matches_fp64_reference_on_random_shapes(tokens, hidden4, ffn4, experts, data):
    top_k = data.draw(st.integers(1, experts))
    act = data.draw(st.sampled_from(ACTIVATIONS))
    ex = make_experts(experts, 4 * hidden4, 4 * ffn4, activation=act)  # fp32: 16-byte rows
    x = torch.randn(tokens, 4 * hidden4)
    for fn in FAST:
        _check(fn, x, random_routing(tokens, experts, top_k, seed=tokens), ex)


@settings(max_examples=15, deadline=None)
@given(
    tokens=st.integers(1, 29),
    hidden=st.integers(1, 19),
    ffn=st.integers(1, 23),
    experts=st.integers(1, 5),
    data=st.data(),
)
def test_strategies_match_reference_on_odd_shapes(tokens, hidden, ffn, experts, data):
    top_k = data.draw(st.integers(1, experts))
    ex = make_experts(experts, hidden, ffn, activation=data.draw(st.sampled_from(ACTIVATIONS)))
    x = torch.randn(tokens, hidden)
    for fn in ANY_SHAPE:
        _check(fn, x, random_routing(tokens, experts, top_k, seed=hidden), ex)


@pytest.mark.parametrize("fn", [dispatch_loop, *FAST])
def test_zero_tokens(fn):
    ex = make_experts(4, 8, 16)
    out = fn(torch.zeros(0, 8), random_routing(0, 4, 2), ex)
    assert out.shape == (0, 8)


@pytest.mark.parametrize("fn", FAST)
def test_expert_with_no_tokens(fn):
    ex = make_experts(5, 8, 16)
    _check(fn, torch.randn(23, 8), random_routing(23, 5, 2, skip_expert=2), ex)


@pytest.mark.parametrize("fn", FAST)
def test_all_tokens_to_one_expert(fn):
    ex = make_experts(4, 8, 16)
    _check(fn, torch.randn(31, 8), random_routing(31, 4, 1, only_expert=3), ex)


@pytest.mark.parametrize("fn", FAST)
def test_capacity_mode_routing(fn):
    ex = make_experts(4, 8, 16)
    routing = apply_capacity(random_routing(40, 4, 2, only_expert=0), 12)
    assert routing.dropped.sum() > 0
    _check(fn, torch.randn(40, 8), routing, ex)


@pytest.mark.parametrize("fn", FAST)
def test_bf16_close_to_reference(fn):
    ex = make_experts(4, 32, 64, dtype=torch.bfloat16)
    _check(fn, torch.randn(50, 32, dtype=torch.bfloat16), random_routing(50, 4, 2), ex, rtol=3e-2)


@pytest.mark.parametrize("fn", DIFFERENTIABLE)
def test_gradients_match_reference(fn):
    ex = make_experts(4, 8, 12, activation="swiglu").requires_grad_(True)
    ex64 = as_fp64(ex).requires_grad_(True)
    x = torch.randn(19, 8)
    routing = random_routing(19, 4, 2)
    g = torch.randn(19, 8)
    fn(x, routing, ex).backward(g)
    dispatch_loop(x.double(), routing, ex64).backward(g.double())
    for p, p64 in ((ex.w_in, ex64.w_in), (ex.w_out, ex64.w_out)):
        torch.testing.assert_close(p.grad.double(), p64.grad, rtol=1e-4, atol=1e-5)


def test_grouped_rejects_misaligned_hidden():
    ex = make_experts(2, 6, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="hidden"):
        dispatch_sorted_grouped(
            torch.randn(3, 6, dtype=torch.bfloat16), random_routing(3, 2, 1), ex
        )


def test_grouped_rejects_fp64():
    ex = make_experts(2, 8, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="dtype"):
        dispatch_sorted_grouped(
            torch.randn(3, 8, dtype=torch.float64), random_routing(3, 2, 1), ex
        )


def test_padded_rejects_capacity_below_load():
    ex = make_experts(2, 8, 8)
    with pytest.raises(ValueError, match="capacity"):
        dispatch_padded(torch.randn(9, 8), random_routing(9, 2, 1, only_expert=0), ex, capacity=4)


def test_token_count_mismatch():
    with pytest.raises(ValueError, match="num_tokens"):
        dispatch_loop(torch.randn(4, 8), random_routing(3, 2, 1), make_experts(2, 8, 8))


@pytest.mark.parametrize("fn", FAST)
def test_expert_choice_routing(fn):
    from kernel_lib.moe.routing import route_expert_choice

    routing = route_expert_choice(torch.randn(30, 4), capacity=9)
    _check(fn, torch.randn(30, 8), routing, make_experts(4, 8, 16))


def test_packed_segments_refuses_to_train():
    ex, x, routing = make_experts(3, 8, 16), torch.randn(11, 8), random_routing(11, 3, 2)
    ex.requires_grad_(True)  # a training layer's weights: the output would not reach them
    with pytest.raises(ValueError, match="packed_segments is inference only"):
        dispatch_packed_segments(x, routing, ex)
    with torch.no_grad():
        _check(dispatch_packed_segments, x, routing, ex)


def test_packed_weights_follow_an_in_place_weight_change():
    ex, x, routing = make_experts(3, 8, 16), torch.randn(11, 8), random_routing(11, 3, 2)
    _check(dispatch_packed_segments, x, routing, ex)
    with torch.no_grad():
        ex.w_out.mul_(-2)  # a stale packing would give the old output
    _check(dispatch_packed_segments, x, routing, ex)


@settings(max_examples=30, deadline=None)
@given(
    tokens=st.integers(0, 41),
    slots=st.integers(1, 5),
    width=st.integers(1, 37),
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
)
def test_sum_slots_is_the_reduction_bit_for_bit(tokens, slots, width, dtype):
    # Top-2's single add must give the reduction's bits: fp32 accumulation, one rounding.
    grid = (torch.randn(tokens, slots, width) * torch.logspace(-3, 3, width)).to(dtype)
    out = sum_slots(grid)
    assert out.dtype == dtype and torch.equal(out, grid.sum(1))


def test_sum_slots_reads_every_slot():
    grid = torch.zeros(3, 2, 4, dtype=torch.bfloat16)
    grid[:, 1] = 1  # a sum that skips the second slot returns zeros
    assert torch.equal(sum_slots(grid), torch.ones(3, 4, dtype=torch.bfloat16))
