import math

import pytest
import torch

from kernel_lib.moe.losses import (
    entropy_balance_loss,
    gshard_aux_loss,
    router_z_loss,
    switch_aux_loss,
)
from kernel_lib.moe.routing import route_topk

# Two tokens, two experts; softmax rows p0 = [0.5, 0.5], p1 = [e/(1+e), 1/(1+e)].
LOGITS = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
P1 = math.e / (1 + math.e)


def test_switch_loss_hand_example():
    r = route_topk(LOGITS, top_k=1)  # both tokens to expert 0 (tie -> lowest index)
    mean_p = [(0.5 + P1) / 2, (0.5 + 1 - P1) / 2]
    assert switch_aux_loss(r).item() == pytest.approx(2 * (1.0 * mean_p[0] + 0.0 * mean_p[1]))


def test_switch_loss_is_one_when_uniform():
    r = route_topk(torch.zeros(4, 4), top_k=1)._replace(counts=torch.ones(4, dtype=torch.long))
    assert switch_aux_loss(r).item() == pytest.approx(1.0)


def test_gshard_loss_hand_example():
    r = route_topk(LOGITS, top_k=2)  # first choices: token 0 -> 0 (tie), token 1 -> 0
    m = [(0.5 + P1) / 2, (0.5 + 1 - P1) / 2]
    c = [2, 0]
    expected = (c[0] / 2 * m[0] + c[1] / 2 * m[1]) / 2
    assert gshard_aux_loss(r).item() == pytest.approx(expected)


def test_entropy_balance_loss_hand_example():
    r = route_topk(LOGITS, top_k=1)
    m = torch.tensor([(0.5 + P1) / 2, (0.5 + 1 - P1) / 2])
    expected = 1 - (-(m * m.log()).sum().item()) / math.log(2)
    assert entropy_balance_loss(r).item() == pytest.approx(expected)
    assert entropy_balance_loss(route_topk(torch.zeros(3, 4), top_k=1)).item() == pytest.approx(
        0.0, abs=1e-7
    )


def test_z_loss_hand_example():
    r = route_topk(LOGITS, top_k=1)
    expected = (math.log(2) ** 2 + math.log(1 + math.e) ** 2) / 2
    assert router_z_loss(r).item() == pytest.approx(expected)
