import pytest
import torch

from kernel_lib.moe.capacity import apply_capacity, expert_capacity
from kernel_lib.moe.routing import from_topk


def test_capacity_counts_every_top_k_assignment():
    assert expert_capacity(4096 * 2, 8, capacity_factor=1.25) == 1280
    assert expert_capacity(10, 8, capacity_factor=1.0, min_capacity=4) == 4


@pytest.mark.parametrize("cf", [0.0, -1.0])
def test_capacity_factor_must_be_positive(cf):
    with pytest.raises(ValueError, match="capacity_factor"):
        expert_capacity(8, 2, capacity_factor=cf)


def test_overflow_drops_lowest_priority_first():
    # 4 tokens, all top-1 to expert 0 with weights 0.1, 0.9, 0.5, 0.9; capacity 2.
    r = from_topk(
        torch.zeros(4, 1, dtype=torch.long), torch.tensor([[0.1], [0.9], [0.5], [0.9]]), 2, None
    )
    kept = apply_capacity(r, 2)
    assert sorted(kept.token_idx.tolist()) == [1, 3]
    assert kept.counts.tolist() == [2, 0] and kept.dropped.tolist() == [2, 0]
    assert kept.top_k == 1 and kept.slot.tolist() == [1, 3]


def test_nothing_dropped_under_capacity():
    r = from_topk(torch.tensor([[0], [1], [1]]), torch.ones(3, 1), 2, None)
    kept = apply_capacity(r, 2)
    assert kept.token_idx.tolist() == [0, 1, 2] and kept.dropped.sum() == 0
