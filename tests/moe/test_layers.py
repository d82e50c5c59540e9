import dataclasses

import pytest
import torch

from kernel_lib.moe.dispatch import dispatch_loop
from kernel_lib.moe.layers import MoELayer, MoELayerConfig, layer_reference
from kernel_lib.moe.strategies import STRATEGIES

BASE = dict(hidden=16, ffn=32, num_experts=4, top_k=2)


def test_config_is_frozen_and_presets_do_not_mutate():
    cfg = MoELayerConfig(**BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.top_k = 1
    switch = MoELayerConfig.for_layer_type("switch", **BASE)
    assert switch.top_k == 1 and switch.capacity_factor == 1.0 and cfg.top_k == 2
    assert MoELayerConfig.for_layer_type("sparse", **BASE).top_k == 1
    assert MoELayerConfig.for_layer_type("glam", **BASE).aux_loss == "gshard"
    assert MoELayerConfig.for_layer_type("adaptive", **BASE).router.value == "dynamic"


@pytest.mark.parametrize("param, value", [
    ("top_k", 5), ("hidden", 0), ("ffn", -3), ("num_experts", 0), ("capacity_factor", 0.0),
    ("capacity_factor", -1.0), ("strategy", "magic"), ("router", "random"), ("expert", "moe"),
    ("aux_loss", "l2"), ("score", "tanh"),
])  # fmt: skip
def test_bad_config_names_the_parameter(param, value):
    with pytest.raises(ValueError, match=param):
        MoELayerConfig(**{**BASE, param: value})


def test_unknown_layer_type():
    with pytest.raises(ValueError, match="layer_type"):
        MoELayerConfig.for_layer_type("dense", **BASE)


def test_grouped_strategy_refuses_non_ffn_experts():
    with pytest.raises(ValueError, match="strategy"):
        MoELayerConfig(**BASE, expert="conv", strategy="sorted_grouped")


@pytest.mark.parametrize("strategy", ["sorted_grouped", "sorted_segments", "padded"])
@pytest.mark.parametrize("layer_type", ["standard", "sparse", "switch", "glam", "adaptive"])
def test_layer_types_agree_across_strategies(layer_type, strategy):
    torch.manual_seed(0)
    ref_layer = MoELayer(MoELayerConfig.for_layer_type(layer_type, **BASE, strategy="loop")).eval()
    layer = MoELayer(MoELayerConfig.for_layer_type(layer_type, **BASE, strategy=strategy)).eval()
    layer.load_state_dict(ref_layer.state_dict())
    x = torch.randn(37, 16)
    out, ref = layer(x), ref_layer(x)
    torch.testing.assert_close(out.y, ref.y, rtol=1e-5, atol=1e-5)
    assert out.aux_loss.item() == pytest.approx(ref.aux_loss.item())


@pytest.mark.parametrize(
    "router", ["topk", "switch", "hash", "learned", "dynamic", "expert_choice"]
)
def test_every_router_runs_in_a_layer(router):
    layer = MoELayer(
        MoELayerConfig(
            **BASE, router=router, capacity_factor=1.0 if router == "expert_choice" else None
        )
    )
    out = layer(torch.randn(20, 16), torch.arange(20))
    assert out.y.shape == (20, 16) and torch.isfinite(out.aux_loss)


@pytest.mark.parametrize(
    "expert", ["relu", "gelu", "swiglu", "conv", "attention", "lora", "adapter"]
)
def test_every_expert_family_runs_and_backpropagates(expert):
    layer = MoELayer(
        MoELayerConfig(**BASE, expert=expert, strategy="loop", seq_len=8, rank=4, shared_experts=1)
    )
    out = layer(torch.randn(24, 16))
    (out.y.sum() + out.aux_loss).backward()
    assert all(p.grad is not None for p in layer.router.parameters())


def test_shared_expert_is_added_to_every_token():
    torch.manual_seed(0)
    layer = MoELayer(MoELayerConfig(**BASE, shared_experts=1, strategy="loop"))
    x = torch.randn(9, 16)
    routing, _ = layer.route(x)
    expected = dispatch_loop(x, routing, layer.experts) + layer.shared[0](x)
    torch.testing.assert_close(layer(x).y, expected)


def test_dropped_tokens_get_zero_expert_output():
    layer = MoELayer(MoELayerConfig(**{**BASE, "top_k": 1}, capacity_factor=0.25))
    with torch.no_grad():
        layer.router.gate.weight.zero_()
        layer.router.gate.weight[0] = 1.0  # every token prefers expert 0
    x = torch.rand(16, 16)
    out = layer(x)
    kept = set(out.routing.token_idx.tolist())
    assert out.routing.dropped.sum() == 16 - len(kept) > 0
    dropped = [t for t in range(16) if t not in kept]
    assert out.y[dropped].abs().max() == 0


def test_zero_tokens_through_the_layer():
    out = MoELayer(MoELayerConfig(**BASE))(torch.zeros(0, 16))
    assert out.y.shape == (0, 16) and out.aux_loss.item() == 0


def test_layer_rejects_wrong_width():
    with pytest.raises(ValueError, match="hidden"):
        MoELayer(MoELayerConfig(**BASE))(torch.zeros(3, 8))


def test_layer_strategies_come_from_the_one_registry():
    for name in STRATEGIES:
        assert MoELayerConfig(**BASE, strategy=name).strategy == name
    with pytest.raises(ValueError, match="strategy='sorted_segments' runs feed-forward"):
        MoELayerConfig(**BASE, expert="conv", strategy="sorted_segments")


@pytest.mark.parametrize("layer_type", ["standard", "switch", "adaptive"])
def test_layer_reference_is_the_fp64_twin_on_the_layers_routing(layer_type):
    torch.manual_seed(0)
    layer = MoELayer(MoELayerConfig.for_layer_type(layer_type, **BASE, shared_experts=1)).eval()
    x = torch.randn(37, 16)
    ref = layer_reference(layer, x)
    assert ref.dtype == torch.float64
    torch.testing.assert_close(layer(x).y.double(), ref, rtol=1e-5, atol=1e-5)
