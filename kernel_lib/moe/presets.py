"""Named MoE presets of published models: experts, top-k, shared experts and each model's routing.

Legend: T tokens, D model, F ffn (per routed expert), E routed experts, K top-k, G groups.
Read from Hugging Face transformers' modeling files and each model's config.json:
MixtralSparseMoeBlock, DeepseekV3TopkRouter (arXiv:2412.19437 sec. 2.1.2), Qwen3MoeSparseMoeBlock,
GptOssTopKRouter / GptOssExperts. The fast routing is `routing.route_group_limited`; the plain
fp64 twins of each model's routing, in the order each model publishes it, are in
routing_reference.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from kernel_lib.config import parse_choice
from kernel_lib.moe.routing import Routing, route_group_limited

ALIGN = 16  # scaled D and F are multiples of 16: torch._grouped_mm's 16-byte rows in fp32 too


@dataclass(frozen=True)
class MoEPreset:
    """One model's MoE layer: sizes, routing and expert activation (frozen; `scaled` copies)."""

    name: str
    hidden: int  # D, config hidden_size
    ffn: int  # F of each routed expert (moe_intermediate_size; gpt-oss intermediate_size)
    num_experts: int  # E routed experts
    top_k: int  # K routed experts per token
    shared_experts: int = 0  # experts every token runs, F wide each (DeepSeek-V3: 1)
    score: str = "softmax"  # softmax over all E, or an independent sigmoid per expert
    renormalize: bool = True  # weights renormalised over the K chosen (norm_topk_prob)
    scale: float = 1.0  # routed_scaling_factor on the weights
    num_groups: int = 1  # G contiguous expert groups (n_group); 1: no group limit
    top_groups: int = 1  # groups a token may pick from (topk_group)
    selection_bias: bool = False  # e_score_correction_bias: shifts the choice, not the weights
    router_bias: bool = False  # the gate projection has a bias term (gpt-oss)
    activation: str = "swiglu"  # "swiglu", or "swiglu_clamped" (gpt-oss: experts.swiglu_clamped)
    size_factor: float = 1.0  # D and F relative to the published model (see `scaled`)

    def scaled(self, factor: float) -> MoEPreset:
        """The same routing structure with D and F times `factor` (0 < factor <= 1), each rounded
        to a multiple of 16 (at least 16); factor 1 is the published size."""
        if not 0 < factor <= 1:
            raise ValueError(f"factor={factor} must be in (0, 1]")
        if factor == 1:
            return self

        def size(n: int) -> int:
            return max(ALIGN, round(n * factor / ALIGN) * ALIGN)

        return dataclasses.replace(
            self, hidden=size(self.hidden), ffn=size(self.ffn), size_factor=factor
        )

    def route(self, logits: Tensor, *, bias: Tensor | None = None) -> Routing:
        """This model's routing of router logits (T, E) (the gate's bias already in them);
        bias (E,): a selection bias (DeepSeek-V3's correction bias, or balancing's)."""
        return route_group_limited(
            logits,
            top_k=self.top_k,
            num_groups=self.num_groups,
            top_groups=self.top_groups,
            score=self.score,
            bias=bias,
            renormalize=self.renormalize,
            scale=self.scale,
        )


PRESETS = {
    p.name: p
    for p in (
        # Mixtral-8x7B: softmax over 8, top-2, renormalised (= softmax over the top-2 logits).
        MoEPreset("mixtral-8x7b", 4096, 14336, 8, 2),
        # DeepSeek-V3: sigmoid scores, 8 groups of 32, top-4 groups by their best-2 sum, top-8
        # by score + correction bias, unbiased weights renormalised, x2.5; one shared expert.
        MoEPreset(
            "deepseek-v3", 7168, 2048, 256, 8, shared_experts=1, score="sigmoid", scale=2.5,
            num_groups=8, top_groups=4, selection_bias=True,
        ),
        # Qwen3-30B-A3B: softmax over 128, top-8, renormalised (norm_topk_prob).
        MoEPreset("qwen3-30b-a3b", 2048, 768, 128, 8),
        # gpt-oss-20b: biased gate, top-4 logits then softmax over them, clamped SwiGLU experts.
        MoEPreset(
            "gpt-oss-20b", 2880, 2880, 32, 4, router_bias=True, activation="swiglu_clamped"
        ),
    )
}  # fmt: skip


def preset(name: str) -> MoEPreset:
    """The preset named exactly `name`; ValueError listing the valid names otherwise."""
    return PRESETS[parse_choice(name, tuple(PRESETS), param="preset")]


def router_logits(x: Tensor, gate: Tensor, gate_bias: Tensor | None = None) -> Tensor:
    """Router logits (T, E) = x (T, D) @ gate (D, E) (+ gate_bias (E,)), in fp32 (fp64 kept)."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    logits = x.to(dtype) @ gate.to(dtype)
    return logits if gate_bias is None else logits + gate_bias.to(dtype)
