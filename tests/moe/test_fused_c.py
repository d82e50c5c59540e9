"""The fused C expert kernel against the fp64 loop over experts, bf16: odd shapes (row tiles,
vector lanes and K pairs with tails), empty experts, all tokens on one expert, capacity drops,
expert choice, the clamped SwiGLU past its limits; wrong packing or a wrong activation fails the check; skipped with a reason where
it cannot run."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib import c_kernels
from kernel_lib.moe import fused_c
from kernel_lib.moe.capacity import apply_capacity
from kernel_lib.moe.dispatch import dispatch_loop
from kernel_lib.moe.fused_c import dispatch_fused_c, fused_unavailable
from kernel_lib.moe.routing import route_expert_choice
from kernel_lib.moe.strategies import unavailable
from kernel_lib.moe.tolerances import TOLERANCES
from tests.moe.conftest import as_fp64, make_experts, random_routing

BF16 = torch.bfloat16
RTOL = TOLERANCES[("forward", "bfloat16")].value
REASON = fused_unavailable(torch.zeros(1, 16, dtype=BF16), make_experts(1, 16, 16, dtype=BF16))
needs_kernel = pytest.mark.skipif(REASON is not None, reason=f"{REASON}")


def _error(x, routing, experts) -> float:
    """max |fused - fp64 loop| / max |fp64 loop| (0 for an empty output)."""
    ref = dispatch_loop(x.double(), routing, as_fp64(experts))
    out = dispatch_fused_c(x, routing, experts)
    assert out.shape == x.shape and out.dtype == x.dtype
    if not ref.numel():
        return 0.0
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _experts(n, hidden, ffn, activation="swiglu"):
    return make_experts(n, hidden, ffn, activation=activation, dtype=BF16)


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(
    tokens=st.integers(0, 45),
    hidden=st.integers(1, 70),
    ffn=st.integers(1, 40),
    experts=st.integers(1, 6),
    data=st.data(),
)
def test_matches_fp64_reference_on_odd_shapes(tokens, hidden, ffn, experts, data):
    top_k = data.draw(st.integers(1, experts))
    ex = _experts(experts, hidden, ffn, data.draw(st.sampled_from(sorted(fused_c.ACTIVATIONS))))
    x = torch.randn(tokens, hidden, dtype=BF16)
    assert _error(x, random_routing(tokens, experts, top_k, seed=hidden), ex) <= RTOL


@needs_kernel
@pytest.mark.parametrize(
    "routing",
    [
        random_routing(43, 5, 2, skip_expert=2),  # an empty expert
        random_routing(43, 5, 1, only_expert=4),  # skewed: every token on one expert
        apply_capacity(random_routing(43, 5, 2, only_expert=0), 12),  # drops: empty slots
        route_expert_choice(torch.randn(43, 5), capacity=9),
    ],
    ids=["empty_expert", "one_expert", "capacity_drops", "expert_choice"],
)
def test_routings(routing):
    assert _error(torch.randn(43, 24, dtype=BF16), routing, _experts(5, 24, 40)) <= RTOL


@needs_kernel
def test_clamped_swiglu_past_its_limit():
    ex = _experts(4, 16, 24, "swiglu_clamped")
    x = 6 * torch.randn(40, 16, dtype=BF16)  # pre-activations ~N(0, 36): many past the limit 7
    assert ((x @ ex.w_in[0]).abs() > 7).float().mean() > 0.1
    assert _error(x, random_routing(40, 4, 2), ex) <= RTOL
    with pytest.MonkeyPatch.context() as mp:  # the same gate without its clamps
        mp.setitem(fused_c.ACTIVATIONS, "swiglu_clamped", fused_c.ACTIVATIONS["swiglu"])
        assert _error(x, random_routing(40, 4, 2), ex) > RTOL


@needs_kernel
def test_wrong_packing_or_activation_fails_the_check(monkeypatch):
    x, routing = torch.randn(29, 32, dtype=BF16), random_routing(29, 4, 2)
    assert _error(x, routing, _experts(4, 32, 48, "gelu")) <= RTOL
    real = fused_c.pack
    monkeypatch.setattr(fused_c, "pack", lambda w: real(w).flip(-1))  # pair order swapped
    assert _error(x, routing, _experts(4, 32, 48, "gelu")) > RTOL
    monkeypatch.setattr(fused_c, "pack", real)
    monkeypatch.setitem(fused_c.ACTIVATIONS, "gelu", fused_c.ACTIVATIONS["relu"])
    assert _error(x, routing, _experts(4, 32, 48, "gelu")) > RTOL


@needs_kernel
def test_packed_weights_follow_an_in_place_weight_change():
    ex, x, routing = _experts(3, 16, 24), torch.randn(11, 16, dtype=BF16), random_routing(11, 3, 2)
    assert _error(x, routing, ex) <= RTOL
    with torch.no_grad():
        ex.w_out.mul_(-2)  # a stale packing would give the old output
    assert _error(x, routing, ex) <= RTOL


@needs_kernel
def test_refuses_to_train():
    ex, x, routing = _experts(3, 16, 24), torch.randn(11, 16, dtype=BF16), random_routing(11, 3, 2)
    with pytest.raises(ValueError, match="fused_c is inference only"):
        dispatch_fused_c(x.requires_grad_(True), routing, ex)
    with torch.no_grad():
        assert _error(x, routing, ex) <= RTOL


def test_unavailable_says_why(monkeypatch, tmp_path):
    x, ex = torch.randn(4, 16, dtype=BF16), _experts(2, 16, 32)
    assert "bfloat16" in fused_unavailable(x.float(), ex.float())
    assert "forward only" in unavailable("fused_c", x, ex, backward=True)
    assert "torch.compile" in unavailable("fused_c", x, ex, compiled=True)
    with pytest.raises(ValueError, match="bfloat16"):
        dispatch_fused_c(x.float(), random_routing(4, 2, 1), ex.float())
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    fused_c._library.cache_clear()
    try:
        monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
        assert "no C compiler" in fused_unavailable(x, ex)
        if c_kernels.is_x86():  # CI's ISA pass: the library builds, the kernel is not in it
            monkeypatch.undo()
            monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
            monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
            fused_c._library.cache_clear()
            assert fused_unavailable(x, ex) == "fused_c needs a CPU with AVX512-BF16"
    finally:
        fused_c._library.cache_clear()
