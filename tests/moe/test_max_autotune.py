"""padded_max_autotune: the padded strategy compiled by Inductor with max-autotune (C++ GEMM
template against ATen). Few shapes: every new shape compiles and autotunes (seconds)."""

import pytest
import torch

from kernel_lib.checks import Unsupported
from kernel_lib.moe import max_autotune
from kernel_lib.moe.max_autotune import dispatch_padded_max_autotune
from kernel_lib.moe.strategies import unavailable
from tests.moe.conftest import make_experts, random_routing
from tests.moe.test_dispatch import _check

pytestmark = pytest.mark.slow  # a max-autotune compile per shape


@pytest.mark.parametrize(
    ("tokens", "hidden", "ffn", "experts", "top_k", "activation", "dtype", "routed"),
    [
        # odd tokens, all to expert 2: the others empty, the capacity every token (skewed routing)
        (41, 16, 32, 4, 1, "relu", torch.float32, {"only_expert": 2}),
        (29, 32, 48, 4, 3, "swiglu_clamped", torch.float32, {"skip_expert": 1}),
        (64, 32, 64, 8, 2, "gelu", torch.bfloat16, {"skip_expert": 1}),
    ],
)
def test_matches_the_fp64_loop(tokens, hidden, ffn, experts, top_k, activation, dtype, routed):
    """One max-autotune compile each (~12 s of CPU): random routing with an expert never routed
    to, and the skewed case padded to the largest expert."""
    ex = make_experts(experts, hidden, ffn, activation=activation, dtype=dtype)
    x = torch.randn(tokens, hidden, dtype=dtype)
    routing = random_routing(tokens, experts, top_k, **routed)
    with torch.no_grad():
        _check(
            dispatch_padded_max_autotune,
            x,
            routing,
            ex,
            rtol=2e-5 if dtype == torch.float32 else 2e-2,
        )


def test_no_assignments_is_a_skip_not_a_crash():
    with pytest.raises(Unsupported, match="no assignments"):
        dispatch_padded_max_autotune(
            torch.zeros(0, 8), random_routing(0, 4, 2), make_experts(4, 8, 16)
        )


def test_a_broken_compiled_graph_fails_the_check(monkeypatch):
    monkeypatch.setattr(
        max_autotune, "_compiled", lambda fn: lambda x, r, e, c: torch.zeros_like(x)
    )
    ex, x = make_experts(3, 8, 16), torch.randn(20, 8)
    with torch.no_grad(), pytest.raises(AssertionError, match="max err"):
        _check(dispatch_padded_max_autotune, x, random_routing(20, 3, 2), ex)


def test_the_recompile_limit_is_a_skip_not_an_eager_run(monkeypatch):
    monkeypatch.setattr(max_autotune, "RECOMPILE_LIMIT", 1)
    ex = make_experts(3, 8, 16)
    with torch.no_grad(), pytest.raises(Unsupported, match="recompile limit"):
        for tokens in (5, 6, 7):  # three capacities: at least two graphs past any earlier one
            dispatch_padded_max_autotune(torch.randn(tokens, 8), random_routing(tokens, 3, 3), ex)


def test_refuses_to_train_forward_only():
    ex, x, routing = make_experts(3, 8, 16), torch.randn(11, 8), random_routing(11, 3, 2)
    ex.requires_grad_(True)
    with pytest.raises(ValueError, match="padded_max_autotune is inference only"):
        dispatch_padded_max_autotune(x, routing, ex)
    assert "forward only" in unavailable("padded_max_autotune", x, ex, backward=True)
    assert "already" in unavailable("padded_max_autotune", x, ex, compiled=True)
    assert unavailable("padded_max_autotune", x, ex) is None
