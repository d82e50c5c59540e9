import pytest
import torch

from kernel_lib.moe.routing import (
    DynamicCapacityRouter,
    ExpertChoiceRouter,
    HashRouter,
    LearnedRouter,
    SwitchRouter,
    TopKRouter,
    route_expert_choice,
    route_group_limited,
    route_hash,
    route_topk,
)  # fmt: skip


def test_topk_softmax_renormalised_matches_hand_example():
    logits = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])
    r = route_topk(logits, top_k=2)
    p = logits.softmax(-1)
    assert r.expert_idx.tolist() == [2, 1, 0, 1]
    assert r.token_idx.tolist() == [0, 0, 1, 1]
    expected = torch.stack([p[0, 2], p[0, 1], p[1, 0], p[1, 1]])
    expected = expected / torch.stack([p[0, 2] + p[0, 1]] * 2 + [p[1, 0] + p[1, 1]] * 2)
    torch.testing.assert_close(r.weight, expected)
    assert r.counts.tolist() == [1, 2, 1] and r.top_k == 2


def test_topk_sigmoid_without_renormalisation():
    logits = torch.tensor([[0.0, 2.0]])
    r = route_topk(logits, top_k=1, score="sigmoid", renormalize=False)
    torch.testing.assert_close(r.weight, torch.sigmoid(torch.tensor([2.0])))


@pytest.mark.parametrize("top_k", [0, 4])
def test_topk_rejects_bad_top_k(top_k):
    with pytest.raises(ValueError, match="top_k"):
        route_topk(torch.zeros(2, 3), top_k=top_k)


def test_topk_rejects_unknown_score():
    with pytest.raises(ValueError, match="score"):
        route_topk(torch.zeros(2, 3), top_k=1, score="tanh")


def test_router_noise_only_in_training():
    router = TopKRouter(8, 4, top_k=2, noise_std=1.0)
    x = torch.randn(16, 8)
    router.eval()
    assert torch.equal(router(x).expert_idx, router(x).expert_idx)
    router.train()
    assert not torch.equal(router.logits(x), router.logits(x))


def test_switch_router_is_top1_with_training_only_jitter():
    router = SwitchRouter(8, 4, jitter=0.5).eval()
    x = torch.randn(16, 8)
    r = router(x)
    assert r.top_k == 1 and r.expert_idx.numel() == 16
    torch.testing.assert_close(r.weight, router.gate(x).softmax(-1).max(-1).values)
    router.train()
    assert not torch.equal(router.logits(x), router.logits(x))


def test_hash_routing_is_deterministic_per_token_id_and_distinct():
    ids = torch.tensor([5, 7, 5, 1000, 7])
    r = route_hash(ids, num_experts=6, top_k=3)
    e = r.expert_idx.view(5, 3)
    assert torch.equal(e[0], e[2]) and torch.equal(e[1], e[4])
    assert all(len(set(row.tolist())) == 3 for row in e)
    torch.testing.assert_close(r.weight, torch.full((15,), 1 / 3))
    assert torch.equal(HashRouter(6, top_k=3)(torch.zeros(5, 2), ids).expert_idx, r.expert_idx)


def test_hash_routing_spreads_many_ids():
    counts = route_hash(torch.arange(8000), num_experts=8).counts
    assert counts.min() > 800, counts


def test_learned_router_is_an_mlp():
    router = LearnedRouter(8, 4, top_k=2, router_hidden=16)
    r = router(torch.randn(10, 8))
    assert r.counts.sum() == 20 and isinstance(router.gate, torch.nn.Sequential)


def test_expert_choice_gives_each_expert_its_top_tokens():
    logits = torch.tensor([[5.0, 0.0], [0.0, 5.0], [4.0, 0.0]])
    r = route_expert_choice(logits, capacity=2)
    assert r.counts.tolist() == [2, 2] and r.top_k is None
    assert sorted(r.token_idx[:2].tolist()) == [0, 2]
    router = ExpertChoiceRouter(4, 2, top_k=1, capacity_factor=1.0)
    assert router(torch.randn(6, 4)).counts.tolist() == [3, 3]


def test_dynamic_capacity_factor_follows_imbalance():
    router = DynamicCapacityRouter(4, 4, top_k=1, min_cf=1.0, max_cf=2.0)
    balanced = route_topk(torch.eye(4), top_k=1)
    skewed = route_topk(torch.tensor([[1.0, 0, 0, 0]] * 4), top_k=1)
    assert router.capacity_factor_for(balanced) == 1.0
    assert router.capacity_factor_for(skewed) == 2.0


@pytest.mark.parametrize("score", ["softmax", "sigmoid"])
def test_group_limited_with_one_group_and_no_bias_is_route_topk(score):
    logits = torch.randn(37, 12)
    fast = route_group_limited(logits, top_k=3, score=score)
    plain = route_topk(logits, top_k=3, score=score)
    assert torch.equal(fast.expert_idx, plain.expert_idx)
    torch.testing.assert_close(fast.weight, plain.weight)


def test_group_limited_bias_moves_the_choice_not_the_weights():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    r = route_group_limited(logits, top_k=1, bias=torch.tensor([0.0, 0.0, 0.0, 5.0]))
    assert r.expert_idx.tolist() == [3]
    scaled = route_group_limited(logits, top_k=2, renormalize=False, scale=2.5)
    torch.testing.assert_close(scaled.weight, 2.5 * logits[0, :2].sigmoid())


def test_group_limited_keeps_the_best_groups_by_their_top_two_sum():
    # groups {0,1}: 0.9+0.0, {2,3}: 0.6+0.6 (in sigmoid units via logits); top-1 group wins
    # on the sum of its best two, so expert 0 (the single best) is excluded.
    scores = torch.tensor([[0.9, 0.01, 0.6, 0.6]])
    r = route_group_limited(scores.logit(), top_k=2, num_groups=2, top_groups=1)
    assert sorted(r.expert_idx.tolist()) == [2, 3]
    torch.testing.assert_close(r.weight, torch.tensor([0.5, 0.5]))


def test_group_limited_keeps_fp64_logits_in_fp64():
    r = route_group_limited(torch.randn(5, 8, dtype=torch.float64), top_k=2, num_groups=4,
                            top_groups=2)  # fmt: skip
    assert r.logits.dtype == torch.float64 and r.counts.sum() == 10


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_groups=3), "num_groups"), (dict(num_groups=4, top_groups=5), "top_groups"),
    (dict(num_groups=4, top_groups=1, top_k=3), "top_k"), (dict(bias=torch.zeros(7)), "bias"),
    (dict(score="tanh"), "score"),
])  # fmt: skip
def test_group_limited_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        route_group_limited(torch.zeros(2, 8), **{"top_k": 2, **kwargs})
