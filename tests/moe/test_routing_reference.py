import dataclasses

import pytest
import torch

from kernel_lib.moe.presets import PRESETS, preset
from kernel_lib.moe.routing_reference import (
    TIE_MARGIN,
    check_routing,
    check_table,
    reference_routing,
)  # fmt: skip

DEEPSEEK = preset("deepseek-v3")
# Odd shapes with DeepSeek-V3's routing structure: 3 of 5 groups of 3, and one expert per group.
ODD_GROUPED = [
    dataclasses.replace(DEEPSEEK, num_experts=15, top_k=4, num_groups=5, top_groups=3),
    dataclasses.replace(DEEPSEEK, num_experts=6, top_k=2, num_groups=6, top_groups=3),
]


def logits_for(model, tokens, *, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, model.num_experts, generator=gen)
    bias = 0.3 * torch.randn(model.num_experts, generator=gen) if model.selection_bias else None
    return logits, bias


@pytest.mark.parametrize(
    "model",
    [*PRESETS.values(), *ODD_GROUPED],
    ids=lambda m: f"{m.name}-E{m.num_experts}-G{m.num_groups}",
)
@pytest.mark.parametrize("tokens", [1, 37, 129])
def test_fast_routing_matches_the_published_twin(model, tokens):
    logits, bias = logits_for(model, tokens, seed=tokens)
    got = check_routing(
        model.route(logits, bias=bias), reference_routing(model, logits, bias=bias)
    )
    assert got.passed and got.near_ties <= 1, got


def test_weights_follow_each_models_normalisation():
    logits, bias = logits_for(DEEPSEEK, 16)
    ref = reference_routing(DEEPSEEK, logits, bias=bias)
    torch.testing.assert_close(ref.weights.sum(-1), torch.full((16,), 2.5, dtype=torch.float64))
    groups = ref.expert_ids // (DEEPSEEK.num_experts // DEEPSEEK.num_groups)
    assert all(len(set(row.tolist())) <= DEEPSEEK.top_groups for row in groups)
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b"):
        ref = reference_routing(PRESETS[name], torch.randn(9, PRESETS[name].num_experts))
        torch.testing.assert_close(ref.weights.sum(-1), torch.ones(9, dtype=torch.float64))


def test_zero_tokens():
    model = PRESETS["qwen3-30b-a3b"]
    logits = torch.zeros(0, model.num_experts)
    got = check_routing(model.route(logits), reference_routing(model, logits))
    assert got == (0, 0, 0.0)


def test_an_exact_tie_is_a_near_tie_not_a_wrong_choice():
    model = PRESETS["mixtral-8x7b"]
    logits = torch.zeros(3, 8)
    logits[:, 0] = 1.0  # the second choice is a tie among 7 experts
    ref = reference_routing(model, logits)
    assert (ref.margin <= TIE_MARGIN).all()
    assert check_routing(model.route(logits), ref).passed


# Teeth: each published detail left out of the fast routing makes the check fail.


def test_teeth_a_missing_selection_bias_fails():
    logits, bias = logits_for(DEEPSEEK, 64)
    got = check_routing(DEEPSEEK.route(logits), reference_routing(DEEPSEEK, logits, bias=bias))
    assert got.wrong_choices > 0 and not got.passed


def test_teeth_a_wrong_group_limit_fails():
    logits, bias = logits_for(DEEPSEEK, 64)
    unlimited = dataclasses.replace(DEEPSEEK, top_groups=DEEPSEEK.num_groups)
    got = check_routing(
        unlimited.route(logits, bias=bias), reference_routing(DEEPSEEK, logits, bias=bias)
    )
    assert got.wrong_choices > 0 and not got.passed


def test_teeth_a_missing_scaling_factor_fails():
    logits, bias = logits_for(DEEPSEEK, 64)
    unscaled = dataclasses.replace(DEEPSEEK, scale=1.0)
    got = check_routing(
        unscaled.route(logits, bias=bias), reference_routing(DEEPSEEK, logits, bias=bias)
    )
    assert got.wrong_choices == 0 and got.weight_error > 0.5 and not got.passed


def test_teeth_gpt_oss_without_its_gate_bias_fails():
    model = PRESETS["gpt-oss-20b"]
    logits = torch.randn(64, model.num_experts)
    gate_bias = torch.randn(model.num_experts)
    got = check_routing(model.route(logits), reference_routing(model, logits + gate_bias))
    assert not got.passed


def test_teeth_a_wrong_weight_fails():
    model = PRESETS["qwen3-30b-a3b"]
    logits = torch.randn(32, model.num_experts)
    routing = model.route(logits)
    routing.weight[5] += 1e-3
    assert not check_routing(routing, reference_routing(model, logits)).passed


def test_check_table_passes_every_preset():
    table = check_table(list(PRESETS.values()), tokens=33)
    assert list(table["check"]) == ["PASS"] * len(PRESETS)


def test_softmax_scores_with_a_selection_bias_have_no_published_twin():
    with pytest.raises(NotImplementedError, match="mixtral"):
        reference_routing(PRESETS["mixtral-8x7b"], torch.zeros(2, 8), bias=torch.zeros(8))
