"""Input factories for the MoE tests."""

import pytest
import torch

from kernel_lib import variants
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.routing import Routing, from_topk


def make_experts(num_experts, hidden, ffn, *, activation="relu", dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return (
        FeedForwardExperts(num_experts, hidden, ffn, activation=activation)
        .to(dtype)
        .requires_grad_(False)
    )


def as_fp64(experts: FeedForwardExperts) -> FeedForwardExperts:
    copy = (
        FeedForwardExperts(
            experts.num_experts, experts.hidden, experts.ffn, activation=experts.activation
        )
        .double()
        .requires_grad_(False)
    )
    with torch.no_grad():
        copy.w_in.copy_(experts.w_in)
        copy.w_out.copy_(experts.w_out)
    return copy


def random_routing(
    num_tokens, num_experts, top_k, *, seed=0, only_expert=None, skip_expert=None
) -> Routing:
    """Top-k routing with random distinct experts and weights; optionally all to one expert
    (top_k must be 1) or never to `skip_expert`."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=gen)
    if skip_expert is not None:
        scores[:, skip_expert] = -1
    if only_expert is not None:
        scores[:, only_expert] = 2
    weights, ids = scores.topk(top_k, dim=-1)
    return from_topk(ids, weights.clamp_min(0.1), num_experts, None)


@pytest.fixture
def seeded():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def variant_cache(tmp_path_factory):
    """Dispatch choices go to a temporary folder, never the repository's cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(variants.CACHE_ENV, str(tmp_path_factory.mktemp("variants")))
        yield
