"""The MoE notebook's parameters as one frozen, validated object (`moe_<field>` in the notebook
and parameters/*.yaml). Legend: T tokens, D model, F ffn, E experts, K top-k."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from kernel_lib.config import (
    from_params,
    parse_choice,
    parse_dtype,
    positive,
    positive_list,
    require,
)
from kernel_lib.moe.experts import ACTIVATIONS
from kernel_lib.moe.layers import LayerType
from kernel_lib.moe.strategies import STRATEGIES

LAYER_TYPES = tuple(t.value for t in LayerType)
SWEEPS = ("tokens", "experts", "top_k", "imbalance")


@dataclass(frozen=True)
class MoEBenchConfig:
    tokens: tuple = (4096,)  # T per throughput shape (read together with hidden and ffn)
    hidden: tuple = (512,)  # D per throughput shape
    ffn: tuple = (2048,)  # F per throughput shape
    experts: int = 8  # E
    top_k: int = 2  # K experts per token
    dtype: str = "bfloat16"  # our strategies' dtype (the seed-style baseline is always float32)
    activation: str = "relu"  # expert activation
    capacity_factor: float = 1.25  # capacity mode: C = ceil(cf * T * K / E)
    strategies: tuple = STRATEGIES  # dispatch strategies timed (registry names)
    compile: tuple = ("sorted_grouped",)  # strategies also timed forward under torch.compile
    backward: bool = True  # also time forward + backward (weight gradients)
    layer_types: tuple = LAYER_TYPES  # layer presets timed as whole layers
    imbalance: tuple = (0.0, 1.0, 2.0)  # routing skew; the first is the throughput cases'
    sweep_tokens: tuple = (512, 1024, 2048)  # tokens sweep at the first (D, F)
    sweep_base_tokens: int = 512  # T of the experts / top-k / imbalance sweeps
    sweep_experts: tuple = (4, 8, 16)
    sweep_top_k: tuple = (1, 2, 4)
    sweep_strategies: tuple = ("loop", "sorted_grouped", "padded")
    min_time_s: float = 0.2  # timing budget per candidate and measurement

    def __post_init__(self):
        for f in fields(self):  # lists from YAML become tuples: the config stays hashable
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        for name in ("tokens", "hidden", "ffn", "sweep_tokens", "sweep_experts", "sweep_top_k"):
            _positive_ints(getattr(self, name), f"moe_{name}")
        for name in ("experts", "top_k", "sweep_base_tokens"):
            _positive_ints((getattr(self, name),), f"moe_{name}")
        for name in ("tokens", "ffn"):
            n = len(self.hidden)
            require(
                len(getattr(self, name)) == n,
                f"moe_{name}",
                list(getattr(self, name)),
                f"one entry per moe_hidden entry ({n})",
            )
        require(
            self.top_k <= self.experts, "moe_top_k", self.top_k, f"<= moe_experts={self.experts}"
        )
        require(
            max(self.sweep_top_k) <= self.experts,
            "moe_sweep_top_k",
            list(self.sweep_top_k),
            f"<= moe_experts={self.experts}",
        )
        require(
            self.top_k <= min(self.sweep_experts),
            "moe_sweep_experts",
            list(self.sweep_experts),
            f">= moe_top_k={self.top_k}",
        )
        parse_dtype(self.dtype, param="moe_dtype", allowed=("float32", "bfloat16", "float16"))
        parse_choice(self.activation, ACTIVATIONS, param="moe_activation")
        positive(self.capacity_factor, "moe_capacity_factor")
        positive(self.min_time_s, "moe_min_time_s")
        for name in ("strategies", "compile", "sweep_strategies"):
            for value in getattr(self, name):
                parse_choice(value, STRATEGIES, param=f"moe_{name}")
        for value in self.layer_types:
            parse_choice(value, LAYER_TYPES, param="moe_layer_types")
        require(isinstance(self.backward, bool), "moe_backward", self.backward, "True or False")
        require(
            len(self.imbalance) > 0 and all(_finite(v) for v in self.imbalance),
            "moe_imbalance",
            list(self.imbalance),
            "a non-empty list of finite numbers",
        )

    @classmethod
    def from_params(cls, params: dict) -> MoEBenchConfig:
        """The config of a notebook's `moe_*` parameters (missing ones keep their defaults)."""
        return from_params(cls, params, prefix="moe_")

    @property
    def shapes(self) -> list[tuple[int, int, int]]:
        """(T, D, F) of each throughput shape."""
        return list(zip(self.tokens, self.hidden, self.ffn))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive_ints(values, param: str) -> None:
    positive_list(list(values), param)
    for value in values:
        require(isinstance(value, int), param, list(values), "whole numbers")
