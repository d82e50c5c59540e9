import dataclasses

import pytest
import torch
import torch.nn.functional as F

from kernel_lib.moe.experts import swiglu_clamped, swiglu_clamped_reference
from kernel_lib.moe.presets import PRESETS, preset, router_logits


def test_the_published_routing_structure():
    ds = preset("deepseek-v3")
    assert (ds.num_experts, ds.top_k, ds.shared_experts, ds.score) == (256, 8, 1, "sigmoid")
    assert (ds.num_groups, ds.top_groups, ds.scale, ds.selection_bias) == (8, 4, 2.5, True)
    qwen, oss, mix = preset("qwen3-30b-a3b"), preset("gpt-oss-20b"), preset("mixtral-8x7b")
    assert (qwen.num_experts, qwen.top_k, qwen.score, qwen.renormalize) == (
        128,
        8,
        "softmax",
        True,
    )
    assert (oss.num_experts, oss.top_k, oss.router_bias, oss.activation) == (
        32, 4, True, "swiglu_clamped"
    )  # fmt: skip
    assert (mix.num_experts, mix.top_k, mix.hidden, mix.ffn) == (8, 2, 4096, 14336)


@pytest.mark.parametrize("name", ["DeepSeek-V3", "deepseek_v3", "mixtral", ""])
def test_only_exact_names_and_the_error_lists_them(name):
    with pytest.raises(ValueError, match="preset") as err:
        preset(name)
    assert all(valid in str(err.value) for valid in PRESETS)


@pytest.mark.parametrize("name", list(PRESETS))
def test_scaled_keeps_the_routing_and_aligns_sizes(name):
    full = preset(name)
    small = full.scaled(1 / 16)
    assert small.hidden % 16 == 0 and small.ffn % 16 == 0 and small.size_factor == 1 / 16
    assert small.hidden == pytest.approx(full.hidden / 16, abs=8)
    routing_fields = [f.name for f in dataclasses.fields(full)]
    routing_fields = [f for f in routing_fields if f not in ("hidden", "ffn", "size_factor")]
    assert all(getattr(small, f) == getattr(full, f) for f in routing_fields)
    assert full.scaled(1) is full and full.scaled(1e-6).hidden == 16


@pytest.mark.parametrize("factor", [0, -0.5, 1.5])
def test_scaled_rejects_factors_outside_0_1(factor):
    with pytest.raises(ValueError, match="factor"):
        preset("deepseek-v3").scaled(factor)


def test_router_logits_add_the_gate_bias_in_fp32():
    x, gate, bias = torch.randn(5, 16, dtype=torch.bfloat16), torch.randn(16, 4), torch.randn(4)
    got = router_logits(x, gate, bias)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x.float() @ gate + bias)
    assert router_logits(x.double(), gate).dtype == torch.float64


def test_swiglu_clamped_matches_its_twin_across_the_limits():
    h = torch.linspace(-12, 12, 2 * 37).view(1, -1).repeat(3, 1) * torch.tensor([[0.5], [1], [2]])
    torch.testing.assert_close(swiglu_clamped(h.double()), swiglu_clamped_reference(h))
    assert swiglu_clamped(h).shape == (3, 37)


def test_teeth_plain_swiglu_is_not_the_clamped_one():
    h = torch.full((1, 2), 9.0, dtype=torch.float64)  # above the limit: clamped to 7
    plain = F.silu(h[:, :1]) * h[:, 1:]
    assert not torch.allclose(plain, swiglu_clamped_reference(h))
    assert swiglu_clamped_reference(h).item() == pytest.approx(
        8 * 7 / (1 + 2.718281828 ** (-1.702 * 7))
    )
