"""The Triton kernel on CPU under the interpreter (fp32: the interpreter has no bf16)."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before the Triton module is imported

import pytest  # noqa: E402
import torch  # noqa: E402

from kernel_lib.moe.dispatch_triton import block_layout, dispatch_triton  # noqa: E402
from kernel_lib.moe.experts import ACTIVATIONS  # noqa: E402
from tests.moe.conftest import make_experts, random_routing  # noqa: E402
from tests.moe.test_dispatch import _check  # noqa: E402


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize(
    "tokens, hidden, ffn, experts, top_k", [(37, 24, 40, 5, 2), (5, 7, 33, 3, 3)]
)
def test_triton_matches_reference(activation, tokens, hidden, ffn, experts, top_k):
    ex = make_experts(experts, hidden, ffn, activation=activation)
    x = 6 * torch.randn(tokens, hidden)  # the clamped SwiGLU's inputs reach its limit 7
    _check(dispatch_triton, x, random_routing(tokens, experts, top_k), ex)


def test_triton_empty_expert_and_all_to_one():
    ex = make_experts(4, 16, 32)
    _check(dispatch_triton, torch.randn(21, 16), random_routing(21, 4, 2, skip_expert=1), ex)
    _check(dispatch_triton, torch.randn(21, 16), random_routing(21, 4, 1, only_expert=2), ex)


def test_triton_zero_tokens():
    assert dispatch_triton(
        torch.zeros(0, 16), random_routing(0, 4, 2), make_experts(4, 16, 32)
    ).shape == (0, 16)


def test_block_layout_pads_each_expert_to_whole_blocks():
    routing = random_routing(10, 3, 1, only_expert=1)
    _, rows, block_expert, dest = block_layout(routing, block_m=4)
    assert block_expert.tolist()[:3] == [1, 1, 1] and set(block_expert.tolist()[3:]) == {-1}
    assert (rows[:10] >= 0).all() and (rows[10:] == -1).all() and dest.tolist() == list(range(10))
