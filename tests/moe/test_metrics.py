import math

import pytest
import torch

from kernel_lib.moe.capacity import apply_capacity
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.moe.routing import from_topk


def test_load_metrics_hand_example():
    # 4 tokens top-1: experts [0, 0, 0, 1]; capacity 2 drops one assignment of expert 0.
    r = from_topk(torch.tensor([[0], [0], [0], [1]]), torch.ones(4, 1), 2, torch.zeros(4, 2))
    m = load_metrics(apply_capacity(r, 2))
    assert m["tokens_per_expert"] == [2, 1] and m["dropped_per_expert"] == [1, 0]
    assert m["drop_rate"] == pytest.approx(0.25)
    assert m["cv"] == pytest.approx(0.5 / 1.5)
    share = [2 / 3, 1 / 3]
    assert m["load_entropy"] == pytest.approx(-sum(s * math.log(s) for s in share) / math.log(2))
    assert m["router_entropy"] == pytest.approx(math.log(2))


def test_load_metrics_of_zero_tokens():
    r = from_topk(torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, 1), 3, None)
    m = load_metrics(r)
    assert m["tokens_per_expert"] == [0, 0, 0] and m["drop_rate"] == 0.0 and m["cv"] == 0.0
