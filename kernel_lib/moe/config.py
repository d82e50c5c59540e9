"""The MoE notebook's parameters as one frozen, validated object (`moe_<field>` in the notebook
and parameters/*.yaml). Legend: T tokens, D model, F ffn, E experts, K top-k."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from fractions import Fraction

from kernel_lib.config import (
    finite,
    from_params,
    largest_needs,
    param,
    parse_choice,
    parse_choices,
    parse_dtype,
    positive,
    positive_list,
    require,
)
from kernel_lib.moe.cases import memory_needed
from kernel_lib.moe.experts import ACTIVATIONS, in_width
from kernel_lib.moe.layers import LayerType
from kernel_lib.moe.presets import PRESETS
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.moe.strategies import STRATEGIES

LAYER_TYPES = tuple(t.value for t in LayerType)
SWEEPS = ("tokens", "experts", "top_k", "imbalance")
# Peak bytes per routed-expert weight of the FP8 decode section (fp8_decode.py): the case's
# experts made in fp32 (4) then bf16 (2), the FP8 copy of those a step chose (1, at most all)
# and its bf16 model (2, stacked from per-expert tensors: 2 more at once), the comparator's bf16
# workspace (2). Measured: 12.7 (560 MB over the imports' resident set at DeepSeek-V3 1/16, 44 M
# weights, when every expert was copied); the copies (twice the last-level cache in FP8, with
# their bf16 models) are small at any size that could not fit.
DECODE_WEIGHT_BYTES = 13


def _any_of(names) -> str:
    return ", ".join(names)


@dataclass(frozen=True)
class MoEBenchConfig:
    PARAM_PREFIX = "moe_"  # of the notebook's parameter names (not a field)

    tokens: tuple = param(
        (4096,), "tokens T per throughput shape; whole numbers > 0, one per moe_hidden entry"
    )
    hidden: tuple = param(
        (512,), "model width D per throughput shape; a non-empty list of whole numbers > 0"
    )
    ffn: tuple = param(
        (2048,), "expert width F per throughput shape; whole numbers > 0, one per moe_hidden entry"
    )
    experts: int = param(8, "experts E; a whole number >= moe_top_k and >= max(moe_sweep_top_k)")
    top_k: int = param(
        2, "experts per token K; 1 <= K <= moe_experts and K <= min(moe_sweep_experts)"
    )
    dtype: str = param(
        "bfloat16",
        "our strategies' dtype (the seed-style baseline is always float32); "
        "float32, bfloat16 or float16",
    )
    activation: str = param("relu", f"expert activation; one of {_any_of(ACTIVATIONS)}")
    capacity_factor: float = param(
        1.25, "capacity mode: each expert keeps ceil(cf x T x K / E) rows; a finite number > 0"
    )
    strategies: tuple = param(
        STRATEGIES, f"dispatch strategies timed; a non-empty list of {_any_of(STRATEGIES)}"
    )
    # May be empty (ci.yaml): the plain loop is timed compiled beside them anyway.
    compile: tuple = param(
        ("sorted_grouped",),
        f"strategies also timed forward under torch.compile; any of {_any_of(STRATEGIES)}",
    )
    side_strategies: tuple = param(
        STRATEGIES,
        "of moe_strategies, those also timed against the seed-style baseline (the plain loop "
        "always among them) and in capacity mode; a non-empty list of "
        f"{_any_of(STRATEGIES)}",
    )
    edge_strategies: tuple = param(
        STRATEGIES,
        "of moe_strategies, those also checked on the edge cases (no tokens, every token to one "
        "expert, capacity drops, odd widths; each strategy is checked at every timed shape "
        f"whatever this names); a non-empty list of {_any_of(STRATEGIES)}",
    )
    backward: bool = param(True, "also time forward + backward (weight gradients); True or False")
    layer_types: tuple = param(
        LAYER_TYPES,
        f"layer presets timed as whole layers; a non-empty list of {_any_of(LAYER_TYPES)}",
    )
    imbalance: tuple = param(
        (0.0, 1.0, 2.0),
        "routing skew (expert e's logit lowered by imbalance x e), the first is the throughput "
        "cases'; a non-empty list of finite numbers",
    )
    sweep_tokens: tuple = param(
        (512, 1024, 2048),
        "tokens sweep at the first shape's D, F; a non-empty list of whole numbers > 0",
    )
    sweep_base_tokens: int = param(
        512, "T of the experts / top-k / imbalance sweeps; a whole number > 0"
    )
    sweep_experts: tuple = param(
        (4, 8, 16), "experts sweep; a non-empty list of whole numbers >= moe_top_k"
    )
    sweep_top_k: tuple = param(
        (1, 2, 4), "top-k sweep; a non-empty list of whole numbers, 1 <= k <= moe_experts"
    )
    sweep_strategies: tuple = param(
        ("loop", "sorted_grouped", "padded"),
        f"strategies in the sweeps; a non-empty list of {_any_of(STRATEGIES)}",
    )
    min_time_s: float = param(
        0.2, "timed seconds per candidate and case, over all rounds; a finite number > 0"
    )
    presets: tuple = param(
        tuple(PRESETS),
        f"model presets timed with their own routing; a non-empty list of {_any_of(PRESETS)}",
    )
    preset_strategies: tuple = param(
        STRATEGIES,
        "strategies timed on each preset (the plain loop always among them; each preset is a new "
        f"shape: a compiled strategy compiles again); a non-empty list of {_any_of(STRATEGIES)}",
    )
    preset_scale: float = param(
        0.0625,
        "factor on each preset's D and F (rounded to multiples of 16; 1: the published "
        "model); 0 < s <= 1",
    )
    # A prefill batch: DeepSeek-V3's 256 experts x top-8 get 256 rows each on average (2048
    # tokens gave 64, a GEMM too short for the CPU to run near its dense speed).
    preset_tokens: int = param(
        8192,
        "tokens T per preset case and per load-balancing step (a prefill batch); a whole "
        "number > 0",
    )
    preset_zipf: float = param(
        0.1,
        "Zipf exponent of expert popularity in the preset cases and the load simulation "
        "(0: no skew); a finite number >= 0",
    )
    balance_preset: str = param(
        "deepseek-v3", f"preset of the load-balancing simulation; one of {_any_of(PRESETS)}"
    )
    balance_steps: int = param(100, "steps of the load-balancing simulation; a whole number > 0")
    balance_gamma: float = param(
        0.01,
        "aux-loss-free bias step per batch (DeepSeek-V3 trained with 0.001); a finite number > 0",
    )
    fp8_decode_presets: tuple = param(
        ("deepseek-v3", "qwen3-30b-a3b"),
        "model presets whose routed experts are decoded from FP8 (e4m3fn, 128 x 128 block "
        "scales) by one C call, at moe_preset_scale and each of moe_fp8_decode_tokens (a CPU "
        f"kernel: skipped elsewhere); any of {_any_of(PRESETS)} (empty: no FP8 decode section)",
    )
    fp8_decode_tokens: tuple = param(
        (1, 4, 16),
        "tokens T per FP8 decode step, each timed on every moe_fp8_decode_presets entry; a "
        "non-empty list of whole numbers > 0",
    )
    ep_world_sizes: tuple = param(
        (2,),
        "world sizes W of the expert-parallel section, each run launched by torchrun (0: every "
        "GPU of the host, or every core of a CPU host); a non-empty list of whole numbers >= 2 "
        "or 0, each dividing moe_experts and the expert count of every moe_ep_presets entry",
    )
    ep_presets: tuple = param(
        ("mixtral-8x7b", "deepseek-v3"),
        "model presets also run expert-parallel, at moe_preset_tokens and moe_preset_scale; any "
        f"of {_any_of(PRESETS)}",
    )
    ep_timeout_s: float = param(
        300.0,
        "seconds one torchrun of the expert-parallel section may take before every rank is "
        "killed (its records then failed); a finite number > 0",
    )

    def __post_init__(self):
        for f in fields(self):  # lists from YAML become tuples: the config stays hashable
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        for name in ("tokens", "hidden", "ffn", "sweep_tokens", "sweep_experts", "sweep_top_k"):
            _positive_ints(getattr(self, name), f"moe_{name}")
        _positive_ints(self.fp8_decode_tokens, "moe_fp8_decode_tokens")
        for name in ("experts", "top_k", "sweep_base_tokens", "preset_tokens", "balance_steps"):
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
        positive(self.balance_gamma, "moe_balance_gamma")
        positive(self.preset_scale, "moe_preset_scale")
        require(self.preset_scale <= 1, "moe_preset_scale", self.preset_scale, "<= 1")
        require(
            finite(self.preset_zipf) and self.preset_zipf >= 0,
            "moe_preset_zipf",
            self.preset_zipf,
            "a finite number >= 0",
        )
        parse_choice(self.balance_preset, tuple(PRESETS), param="moe_balance_preset")
        for value in self.compile:
            parse_choice(value, STRATEGIES, param="moe_compile")
        # empty, these would leave a section (and its table or plot) nothing to run
        for name, choices in (
            ("strategies", STRATEGIES),
            ("side_strategies", STRATEGIES),
            ("edge_strategies", STRATEGIES),
            ("sweep_strategies", STRATEGIES),
            ("layer_types", LAYER_TYPES),
            ("presets", tuple(PRESETS)),
            ("preset_strategies", STRATEGIES),
        ):
            parse_choices(getattr(self, name), choices, param=f"moe_{name}")
        require(isinstance(self.backward, bool), "moe_backward", self.backward, "True or False")
        self._check_fp8_decode_presets()
        self._check_expert_parallel()
        require(
            len(self.imbalance) > 0 and all(finite(v) for v in self.imbalance),
            "moe_imbalance",
            list(self.imbalance),
            "a non-empty list of finite numbers",
        )

    def _check_fp8_decode_presets(self) -> None:
        """A list (empty: the FP8 decode section runs nothing) of preset names."""
        presets = self.fp8_decode_presets
        require(
            isinstance(presets, tuple),
            "moe_fp8_decode_presets",
            presets,
            f"a list of {_any_of(PRESETS)} (empty: no FP8 decode section)",
        )
        for name in presets:
            parse_choice(name, tuple(PRESETS), param="moe_fp8_decode_presets")

    def _check_expert_parallel(self) -> None:
        """moe_ep_world_sizes (whole numbers >= 2, or 0: every device), each dividing the
        throughput shape's and every moe_ep_presets entry's expert count; moe_ep_timeout_s."""
        sizes = list(self.ep_world_sizes)
        require(len(sizes) > 0, "moe_ep_world_sizes", sizes, "a non-empty list")
        for w in sizes:
            whole = isinstance(w, int) and not isinstance(w, bool)
            require(
                whole and (w == 0 or w >= 2),
                "moe_ep_world_sizes",
                sizes,
                "whole numbers >= 2 or 0",
            )
        for name in self.ep_presets:
            parse_choice(name, tuple(PRESETS), param="moe_ep_presets")
        fixed = [w for w in sizes if w]  # 0: the host's device count, checked when it runs
        require(
            all(self.experts % w == 0 for w in fixed),
            "moe_experts",
            self.experts,
            f"divisible by each of moe_ep_world_sizes={sizes} (each rank owns E/W experts)",
        )
        for name in self.ep_presets:
            experts = PRESETS[name].num_experts
            require(
                all(experts % w == 0 for w in fixed),
                "moe_ep_presets",
                list(self.ep_presets),
                f"presets whose expert counts divide by each of moe_ep_world_sizes={sizes} "
                f"({name} has {experts})",
            )
        positive(self.ep_timeout_s, "moe_ep_timeout_s")

    @classmethod
    def from_params(cls, params: dict) -> MoEBenchConfig:
        """The config of a notebook's `moe_*` parameters (missing ones keep their defaults)."""
        return from_params(cls, params, prefix=cls.PARAM_PREFIX)

    def memory_needs(self) -> dict[str, float]:
        """Notebook parameter -> estimated peak bytes of the largest case it sets the size of,
        each case by kernel_lib.moe.cases.memory_needed (inputs, weights and their gradients,
        routed intermediates, all again in fp64 for the reference)."""

        item = parse_dtype(self.dtype).itemsize
        first = self.shapes[0]
        shape = ("hidden", "ffn", "dtype")  # set every case's size (the sweeps use the first D, F)
        cases = [  # (bytes, the parameters that set them): the throughput shapes at (E, K)
            (memory_needed(s, item), ("tokens", "experts", "top_k", *shape)) for s in self.shapes
        ]
        cases.append(  # the seed-style comparison: the first shape in float32
            (memory_needed(first, 4), ("tokens", "hidden", "ffn", "experts", "top_k"))
        )
        if "padded" in self.strategies:  # capacity mode: E x C padded rows of D, F, F and D
            t, e, k = first.tokens, first.experts, first.top_k
            rows = e * math.ceil(Fraction(self.capacity_factor) * t * k / e)  # exact: no float
            need = memory_needed(first, item) + rows * 2 * (first.hidden + first.ffn) * item
            cases.append((need, ("capacity_factor", "tokens", "experts", "top_k", *shape)))
        sweep_tokens = ("sweep_tokens", "experts", "top_k", *shape)
        cases += [
            (memory_needed(replace(first, tokens=t), item), sweep_tokens)
            for t in self.sweep_tokens
        ]
        base = replace(first, tokens=self.sweep_base_tokens)
        at_base = ("sweep_base_tokens", *shape)  # experts, top-k and imbalance sweeps
        cases += [
            (memory_needed(replace(base, experts=n), item), ("sweep_experts", "top_k", *at_base))
            for n in self.sweep_experts
        ]
        cases += [
            (memory_needed(replace(base, top_k=n), item), ("sweep_top_k", "experts", *at_base))
            for n in self.sweep_top_k
        ]
        cases.append((memory_needed(base, item), ("experts", "top_k", *at_base)))
        presets = [(n, "presets") for n in self.presets]  # and each expert-parallel one's
        presets += [(n, "ep_presets") for n in self.ep_presets]
        for name, field in presets:  # the preset cases, at their scaled D and F
            model = PRESETS[name].scaled(self.preset_scale)
            at = MoEShape(
                self.preset_tokens, model.hidden, model.ffn, model.num_experts, model.top_k
            )
            cases.append(
                (memory_needed(at, item), (field, "preset_scale", "preset_tokens", "dtype"))
            )
        for name in self.fp8_decode_presets:  # the FP8 decode's experts, at its largest T
            model = PRESETS[name].scaled(self.preset_scale)
            d, f, h = model.hidden, model.ffn, in_width(model.ffn, model.activation)
            weights = model.num_experts * d * (h + f)
            rows = max(self.fp8_decode_tokens) * (3 * d + model.top_k * (h + f))  # fp64 check
            need = weights * DECODE_WEIGHT_BYTES + rows * 8
            cases.append((need, ("fp8_decode_presets", "fp8_decode_tokens", "preset_scale")))
        return largest_needs(cases, "moe_")

    @property
    def side(self) -> tuple:
        """The strategies of the side compares (seed-style, capacity): moe_strategies, in their
        order, that moe_side_strategies names."""
        return tuple(s for s in self.strategies if s in self.side_strategies)

    @property
    def edge(self) -> tuple:
        """The strategies of the edge check: moe_strategies, in their order, that
        moe_edge_strategies names."""
        return tuple(s for s in self.strategies if s in self.edge_strategies)

    @property
    def shapes(self) -> list[MoEShape]:
        """The throughput shapes: each (T, D, F) at E, K and the first imbalance, dropless."""
        return [
            MoEShape(t, d, f, self.experts, self.top_k, imbalance=self.imbalance[0])
            for t, d, f in zip(self.tokens, self.hidden, self.ffn)
        ]


def _positive_ints(values, param: str) -> None:
    """A non-empty list of whole numbers > 0 (a scalar is refused naming `param`, not iterated)."""
    positive_list(list(values) if isinstance(values, tuple) else values, param)
    for value in values:
        require(isinstance(value, int), param, list(values), "whole numbers")
