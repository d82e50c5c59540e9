"""MoE layers built from router + experts + dispatch by a frozen config.

Legend: T tokens (= B*S), D model, F ffn, E experts, K top-k.
Layer types follow the seed's five (standard, sparse, switch, GLaM-style, adaptive); each is a
preset of MoELayerConfig (`MoELayerConfig.for_layer_type`), which returns a new config and never edits one.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from kernel_lib.config import parse_choice
from kernel_lib.moe.capacity import apply_capacity, expert_capacity
from kernel_lib.moe.dispatch import dispatch_loop
from kernel_lib.moe.experts import (
    ACTIVATIONS,
    AdapterExperts,
    AttentionExperts,
    ConvolutionalExperts,
    FeedForwardExperts,
    LoRAExperts,
    SharedExpert,
)  # fmt: skip
from kernel_lib.moe.losses import AUX_LOSSES, router_z_loss
from kernel_lib.moe.routing import (
    SCORES,
    DynamicCapacityRouter,
    ExpertChoiceRouter,
    HashRouter,
    LearnedRouter,
    Routing,
    SwitchRouter,
    TopKRouter,
)  # fmt: skip
from kernel_lib.moe.strategies import ANY_EXPERTS, STRATEGIES, run_strategy


class Router(str, enum.Enum):
    TOPK = "topk"
    SWITCH = "switch"
    HASH = "hash"
    LEARNED = "learned"
    DYNAMIC = "dynamic"
    EXPERT_CHOICE = "expert_choice"


class Expert(str, enum.Enum):
    RELU = "relu"
    GELU = "gelu"
    SWIGLU = "swiglu"
    CONV = "conv"
    ATTENTION = "attention"
    LORA = "lora"
    ADAPTER = "adapter"


class LayerType(str, enum.Enum):
    STANDARD = "standard"
    SPARSE = "sparse"
    SWITCH = "switch"
    GLAM = "glam"
    ADAPTIVE = "adaptive"


def _enum(cls, name: str, value):
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be one of {[m.value for m in cls]}") from None


@dataclass(frozen=True)
class MoELayerConfig:
    hidden: int  # D
    ffn: int  # F, each expert's inner width
    num_experts: int = 8  # E
    top_k: int = 2  # K, experts per token (token-choice routers)
    router: Router = Router.TOPK
    score: str = "softmax"  # "softmax" or "sigmoid" gate scores (top-k family)
    renormalize: bool = True  # top-k weights sum to 1 per token
    noise_std: float = 0.0  # Gaussian logit noise, training only
    jitter: float = 0.0  # switch router's multiplicative input jitter, training only
    expert: Expert = Expert.RELU
    shared_experts: int = 0  # dense FFNs added to every token (DeepSeekMoE)
    capacity_factor: float | None = None  # None: dropless; else C = ceil(cf * T * K / E)
    min_capacity: int = 0  # floor on C in capacity mode
    strategy: str = "sorted_grouped"  # a name in strategies.STRATEGIES
    aux_loss: str | None = "switch"  # key of losses.AUX_LOSSES, or None
    aux_loss_weight: float = 0.01
    z_loss_weight: float = 0.001
    seq_len: int = 128  # S, for conv/attention experts (T must be a multiple)
    rank: int = 8  # LoRA / adapter rank

    def __post_init__(self):
        for name in ("hidden", "ffn", "num_experts", "top_k", "seq_len", "rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive int")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} must be <= num_experts={self.num_experts}")
        for name, cls in (("router", Router), ("expert", Expert)):
            object.__setattr__(self, name, _enum(cls, name, getattr(self, name)))
        parse_choice(self.strategy, STRATEGIES, param="strategy")
        if self.score not in SCORES:
            raise ValueError(f"score={self.score!r} must be one of {SCORES}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(
                f"capacity_factor={self.capacity_factor} must be > 0 (or None: dropless)"
            )
        if self.aux_loss is not None and self.aux_loss not in AUX_LOSSES:
            raise ValueError(
                f"aux_loss={self.aux_loss!r} must be one of {list(AUX_LOSSES)} or None"
            )
        if self.shared_experts < 0 or self.min_capacity < 0:
            raise ValueError(
                f"shared_experts={self.shared_experts}, min_capacity={self.min_capacity} "
                "must be >= 0"
            )
        if self.strategy not in ANY_EXPERTS and self.expert.value not in ACTIVATIONS:
            raise ValueError(
                f"strategy={self.strategy!r} runs feed-forward experts only; "
                f"expert={self.expert.value!r} needs one of {list(ANY_EXPERTS)}"
            )

    @classmethod
    def for_layer_type(
        cls, layer_type: str, *, sparsity: float = 0.25, **kwargs
    ) -> MoELayerConfig:
        """The preset of a seed layer type; kwargs are the caller's fields, overridden only where
        the type defines them (switch: top-1 + cf 1.0; sparse: K = min(K, int(E * sparsity)))."""
        kind = _enum(LayerType, "layer_type", layer_type)
        base = cls(**kwargs)
        if kind is LayerType.SPARSE:
            return dataclasses.replace(
                base, top_k=max(1, min(base.top_k, int(base.num_experts * sparsity)))
            )
        if kind is LayerType.SWITCH:
            return dataclasses.replace(
                base, router=Router.SWITCH, top_k=1, capacity_factor=1.0, renormalize=False
            )
        if kind is LayerType.GLAM:  # GLaM: top-2 GShard gating, GELU experts, GShard aux loss
            return dataclasses.replace(
                base, top_k=min(2, base.num_experts), expert=Expert.GELU, aux_loss="gshard"
            )
        if kind is LayerType.ADAPTIVE:
            return dataclasses.replace(base, router=Router.DYNAMIC)
        return base


class MoEOutput(NamedTuple):
    """y: (T, D) expert output (dropped assignments add 0: the block's residual carries them);
    aux_loss: weighted balance + z loss (fp32 scalar); routing: what was dispatched."""

    y: Tensor
    aux_loss: Tensor
    routing: Routing


def build_router(cfg: MoELayerConfig) -> nn.Module:
    d, e, k = cfg.hidden, cfg.num_experts, cfg.top_k
    topk_kw = dict(score=cfg.score, renormalize=cfg.renormalize, noise_std=cfg.noise_std)
    return {
        Router.TOPK: lambda: TopKRouter(d, e, top_k=k, **topk_kw),
        Router.SWITCH: lambda: SwitchRouter(d, e, jitter=cfg.jitter),
        Router.HASH: lambda: HashRouter(e, top_k=k),
        Router.LEARNED: lambda: LearnedRouter(d, e, top_k=k, **topk_kw),
        Router.DYNAMIC: lambda: DynamicCapacityRouter(d, e, top_k=k, **topk_kw),
        Router.EXPERT_CHOICE: lambda: ExpertChoiceRouter(
            d, e, top_k=k, capacity_factor=cfg.capacity_factor or 1.0
        ),
    }[cfg.router]()


def build_experts(cfg: MoELayerConfig) -> nn.Module:
    d, f, e = cfg.hidden, cfg.ffn, cfg.num_experts
    if cfg.expert.value in ACTIVATIONS:
        return FeedForwardExperts(e, d, f, activation=cfg.expert.value)
    return {
        Expert.CONV: lambda: ConvolutionalExperts(e, d, f, seq_len=cfg.seq_len),
        Expert.ATTENTION: lambda: AttentionExperts(e, d, seq_len=cfg.seq_len),
        Expert.LORA: lambda: LoRAExperts(e, d, f, rank=cfg.rank),
        Expert.ADAPTER: lambda: AdapterExperts(e, d, rank=cfg.rank),
    }[cfg.expert]()


class MoELayer(nn.Module):
    """Route, apply capacity, dispatch, add shared experts. x: (T, D) -> MoEOutput."""

    def __init__(self, cfg: MoELayerConfig):
        super().__init__()
        self.cfg = cfg
        self.router = build_router(cfg)
        self.experts = build_experts(cfg)
        act = cfg.expert.value if cfg.expert.value in ACTIVATIONS else "relu"
        self.shared = nn.ModuleList(
            SharedExpert(cfg.hidden, cfg.ffn, activation=act) for _ in range(cfg.shared_experts)
        )

    def route(self, x: Tensor, token_ids: Tensor | None = None) -> tuple[Routing, int | None]:
        """Routing after capacity, and the capacity (None: dropless, unless the config or the
        dynamic router sets a factor; expert choice never overflows)."""
        routing = self.router(x, token_ids)
        cf = self.cfg.capacity_factor
        if isinstance(self.router, DynamicCapacityRouter):
            cf = self.router.capacity_factor_for(routing)
        if cf is None or self.cfg.router is Router.EXPERT_CHOICE:
            return routing, None
        capacity = expert_capacity(
            routing.token_idx.numel(),
            routing.num_experts,
            capacity_factor=cf,
            min_capacity=self.cfg.min_capacity,
        )
        return apply_capacity(routing, capacity), capacity

    def aux_loss(self, routing: Routing) -> Tensor:
        zero = torch.zeros((), device=routing.counts.device)
        if routing.logits is None or routing.num_tokens == 0:
            return zero
        loss = zero
        if self.cfg.aux_loss is not None:
            loss = loss + self.cfg.aux_loss_weight * AUX_LOSSES[self.cfg.aux_loss](routing)
        return loss + self.cfg.z_loss_weight * router_z_loss(routing)

    def forward(self, x: Tensor, token_ids: Tensor | None = None) -> MoEOutput:
        if x.dim() != 2 or x.shape[1] != self.cfg.hidden:
            raise ValueError(f"x must be (T, hidden={self.cfg.hidden}), got {tuple(x.shape)}")
        if self.cfg.expert in (Expert.CONV, Expert.ATTENTION) and x.shape[0] % self.cfg.seq_len:
            raise ValueError(f"T={x.shape[0]} must be a multiple of seq_len={self.cfg.seq_len}")
        routing, capacity = self.route(x, token_ids)
        y = run_strategy(self.cfg.strategy, x, routing, self.experts, capacity=capacity)
        for shared in self.shared:
            y = y + shared(x)
        return MoEOutput(y, self.aux_loss(routing), routing)


@torch.no_grad()
def layer_reference(layer: MoELayer, x: Tensor) -> Tensor:
    """fp64 twin of layer(x).y on the layer's own routing (a discrete decision, replayed rather
    than recomputed, so near-tied gate scores cannot flip): dispatch_loop over an fp64 copy of
    its experts, plus its shared experts in fp64. x: (T, D); returns (T, D) float64."""
    routing, _ = layer.route(x)
    twin = copy.deepcopy(layer).double()
    x64 = x.double()
    y = dispatch_loop(x64, routing, twin.experts)
    for shared in twin.shared:
        y = y + shared(x64)
    return y
