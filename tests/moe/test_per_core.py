import pytest
import torch

from kernel_lib.moe import per_core
from kernel_lib.moe.per_core import assign, dispatch_per_core
from kernel_lib.moe.strategies import unavailable
from tests.moe.conftest import make_experts, random_routing
from tests.moe.test_dispatch import _check


def test_assign_balances_rows_largest_first_and_skips_empty_experts():
    owned = assign([5, 0, 9, 1, 4, 3], 2)
    assert sorted(e for w in owned for e in w) == [0, 2, 3, 4, 5]  # expert 1 has no rows
    assert sorted(sum([5, 0, 9, 1, 4, 3][e] for e in w) for w in owned) == [10, 12]
    assert assign([7], 3) == [[0], [], []]


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_any_worker_count_matches_the_reference_and_keeps_the_callers_threads(threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ex, x = make_experts(4, 8, 16, activation="swiglu"), torch.randn(37, 8)
        _check(dispatch_per_core, x, random_routing(37, 4, 2, skip_expert=1), ex)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_an_expert_no_worker_runs_fails_the_check(monkeypatch):
    monkeypatch.setattr(per_core, "assign", lambda counts, workers: [[0], []])
    ex, x = make_experts(3, 8, 16), torch.randn(20, 8)
    with pytest.raises(AssertionError, match="max err"):
        _check(dispatch_per_core, x, random_routing(20, 3, 2), ex)


def test_refuses_to_train_and_is_forward_only_eager_cpu():
    ex, x, routing = make_experts(3, 8, 16), torch.randn(11, 8), random_routing(11, 3, 2)
    ex.requires_grad_(True)
    with pytest.raises(ValueError, match="per_core is inference only"):
        dispatch_per_core(x, routing, ex)
    with torch.no_grad():
        _check(dispatch_per_core, x, routing, ex)
    assert unavailable("per_core", x, ex) is None
    assert "no autograd" in unavailable("per_core", x, ex, backward=True)
    assert "torch.compile" in unavailable("per_core", x, ex, compiled=True)
