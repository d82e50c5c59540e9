"""Mixture of Experts: routers, experts, capacity, losses, dispatch strategies, layers."""

from kernel_lib.moe.balancing import update_bias, zipf_offsets
from kernel_lib.moe.capacity import apply_capacity, expert_capacity
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.dispatch import (
    dispatch_loop,
    dispatch_packed_segments,
    dispatch_padded,
    dispatch_sorted_grouped,
    dispatch_sorted_segments,
)  # fmt: skip
from kernel_lib.moe.experts import (
    AdapterExperts,
    AttentionExperts,
    ConvolutionalExperts,
    FeedForwardExperts,
    LoRAExperts,
    SharedExpert,
)  # fmt: skip
from kernel_lib.moe.layers import LayerType, MoELayer, MoELayerConfig, MoEOutput
from kernel_lib.moe.losses import (
    entropy_balance_loss,
    gshard_aux_loss,
    router_z_loss,
    switch_aux_loss,
)
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.moe.presets import PRESETS, MoEPreset, preset
from kernel_lib.moe.routing import (
    DynamicCapacityRouter,
    ExpertChoiceRouter,
    HashRouter,
    LearnedRouter,
    Routing,
    SwitchRouter,
    TopKRouter,
    route_expert_choice,
    route_group_limited,
    route_hash,
    route_topk,
)  # fmt: skip
from kernel_lib.moe.seed_style import SeedStyleMoE
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.moe.strategies import STRATEGIES, run_strategy

__all__ = [
    # routing
    "Routing", "route_topk", "route_hash", "route_expert_choice", "route_group_limited",
    "TopKRouter", "SwitchRouter",
    "HashRouter", "LearnedRouter", "DynamicCapacityRouter", "ExpertChoiceRouter",
    # experts
    "FeedForwardExperts", "SharedExpert", "ConvolutionalExperts", "AttentionExperts",
    "LoRAExperts", "AdapterExperts",
    # capacity, losses, metrics
    "expert_capacity", "apply_capacity", "switch_aux_loss", "gshard_aux_loss",
    "entropy_balance_loss", "router_z_loss", "load_metrics",
    # dispatch (dispatch_triton and dispatch_fused_c live in modules of their own, imported
    # lazily: strategies.ELSEWHERE) and
    # the one strategy registry
    "STRATEGIES", "run_strategy", "dispatch_loop", "dispatch_sorted_grouped",
    "dispatch_sorted_segments", "dispatch_packed_segments", "dispatch_padded",
    # layers and the old system's way
    "MoELayerConfig", "MoELayer", "MoEOutput", "LayerType", "SeedStyleMoE",
    # the notebook's parameters and the problem size
    "MoEBenchConfig", "MoEShape",
    # model presets and aux-loss-free balancing
    "MoEPreset", "PRESETS", "preset", "update_bias", "zipf_offsets",
]  # fmt: skip
