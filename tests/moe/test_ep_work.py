"""The expert-parallel section's pieces on one rank: token chunks, rows between ranks, the phases
the layer marks, and the fp64 reference gradients it is checked against."""

import pytest
import torch
import torch.distributed as dist

from kernel_lib.moe.cases import make_case, reference_grads
from kernel_lib.moe.dispatch import dispatch_loop, dispatch_sorted_grouped
from kernel_lib.moe.ep_work import PHASE_ORDER, _bounds, rows_between, token_chunk
from kernel_lib.moe.parallel import expert_parallel_dispatch, shard_experts
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.profiling.phases import PHASES


@pytest.mark.parametrize("tokens, world", [(13, 4), (3, 4), (0, 2), (64, 2)])
def test_chunks_split_the_tokens_as_tensor_split_and_keep_each_ones_routing(tokens, world):
    case = make_case(MoEShape(tokens, 16, 32, 8, 2, imbalance=1.0), dtype="float32")
    bounds = _bounds(tokens, world)
    sizes = [len(c) for c in torch.arange(tokens).tensor_split(world)]
    assert [b - a for a, b in bounds] == sizes and bounds[-1][1] == tokens
    chunks = [token_chunk(case.routing, a, b) for a, b in bounds]
    assert torch.equal(torch.cat([c.expert_idx for c in chunks]), case.routing.expert_idx)
    assert torch.equal(torch.cat([c.weight for c in chunks]), case.routing.weight)
    rows = rows_between(case.routing, world)  # (source chunk, owning rank)
    per_rank = case.routing.counts.view(world, -1).sum(1)
    assert torch.equal(rows.sum(0), per_rank) and int(rows.sum()) == tokens * 2


def test_a_chunk_of_a_routing_with_drops_is_refused():
    case = make_case(MoEShape(32, 16, 32, 4, 2).with_capacity_factor(0.5), dtype="float32")
    with pytest.raises(ValueError, match="dropless"):
        token_chunk(case.routing, 0, 16)


def test_the_reference_gradients_are_autograds_of_the_fp64_loop():
    """Each expert's weights a leaf of its own: the gradients of one (E, ...) leaf, exactly."""
    case = make_case(MoEShape(40, 16, 24, 6, 1, imbalance=3.0), dtype="float64")
    assert 0 in case.routing.counts.tolist()  # an expert without rows: zero gradients
    experts = case.feedforward.double().requires_grad_(True)
    x = case.x.clone().requires_grad_(True)
    y = dispatch_loop(x, case.routing, experts)
    want = torch.autograd.grad(y, [x, experts.w_in, experts.w_out], case.grad_out)
    experts.requires_grad_(False)
    got = reference_grads(case, wrt_x=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(reference_grads(case), got[1:]))


def test_one_rank_marks_the_declared_phases_in_order_and_equals_the_dispatch(tmp_path):
    assert set(PHASE_ORDER) <= set(PHASES)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/s", rank=0, world_size=1)
    try:
        case = make_case(MoEShape(37, 16, 32, 4, 2), dtype="float32")
        marked = []

        def marker(name):
            marked.append(name)
            return torch.autograd.profiler.record_function(name)

        experts = shard_experts(case.feedforward, 0, 1)
        y = expert_parallel_dispatch(case.x, case.routing, experts, marker=marker)
    finally:
        dist.destroy_process_group()
    assert marked == list(PHASE_ORDER)
    want = dispatch_sorted_grouped(case.x, case.routing, case.feedforward)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
