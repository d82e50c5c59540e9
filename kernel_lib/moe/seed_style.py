"""The old system's MoE forward, reproduced to measure what it cost and what it really dropped.

Legend: T tokens, D model, E experts, K top-k, C capacity. What it did (research notes,
seed_system.md sec. 2.1 and 3.1): fp32, training mode (router input dropout 0.1, logit noise
1e-2, expert dropout 0.1), top-k softmax renormalised, capacity C = max(ceil(T/E * 1.25), 4)
that ignores K, a Python loop over experts with boolean masks and host syncs (`mask.any()`,
`capacity.item()`), overflow dropped at random by `randperm` with no residual, and a reported
`tokens_dropped` that counts only top-1 overflow.

Its random draws (dropout masks, noise, overflow permutation) come from a generator reseeded at
every call and are drawn in fp32 whatever the experts' dtype, so an fp64 twin (`dtype=float64`)
routes, drops and masks exactly as the fp32 module does: the check of the timed call.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from kernel_lib.moe.experts import FeedForwardExperts, activate


class SeedStyleOutput(NamedTuple):
    y: Tensor  # (T, D) in the experts' dtype (fp32 as the seed ran)
    dropped: int  # assignments really dropped (random overflow)
    assignments: int  # T * K
    reported_dropped: int  # what the seed reported: top-1 (argmax) overflow only


def _dropout(h: Tensor, p: float, gen: torch.Generator) -> Tensor:
    """Inverted dropout as F.dropout computes it (Bernoulli keep mask / (1 - p)), mask in fp32."""
    keep = torch.empty(h.shape, device=h.device).bernoulli_(1 - p, generator=gen)
    return h * (keep / (1 - p)).to(h.dtype)


class SeedStyleMoE(nn.Module):
    """fp32 copy of a gate (D, E) and FeedForwardExperts, run the way the seed ran them.

    dtype: the experts' compute dtype (float32 as the seed; float64 for the reference twin);
    the router always runs in fp32, as the seed's did. seed: reseeds the random draws per call.
    """

    def __init__(
        self,
        gate: Tensor,
        experts: FeedForwardExperts,
        *,
        top_k: int = 2,
        capacity_factor: float = 1.25,
        min_capacity: int = 4,
        dropout: float = 0.1,
        noise_std: float = 1e-2,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ):
        super().__init__()
        self.gate = nn.Parameter(gate.detach().float().clone())
        self.w_in = nn.Parameter(experts.w_in.detach().to(dtype).clone())
        self.w_out = nn.Parameter(experts.w_out.detach().to(dtype).clone())
        self.activation, self.top_k = experts.activation, top_k
        self.capacity_factor, self.min_capacity = capacity_factor, min_capacity
        self.dropout, self.noise_std, self.seed = dropout, noise_std, seed
        self.usage = torch.zeros(experts.num_experts)
        self.train()

    def forward(self, x: Tensor) -> SeedStyleOutput:
        gen = torch.Generator(x.device).manual_seed(self.seed)
        x = x.float()
        num_tokens, num_experts = x.shape[0], self.gate.shape[1]
        drop = self.dropout if self.training else 0.0
        logits = _dropout(x, drop, gen) @ self.gate
        if self.training:
            noise = torch.randn(logits.shape, device=x.device, generator=gen)
            logits = logits + noise * self.noise_std
        weights, indices = logits.softmax(-1).topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        capacity = torch.full(
            (num_experts,),
            max(math.ceil(num_tokens / num_experts * self.capacity_factor), self.min_capacity),
        )
        xe = x.to(self.w_in.dtype)
        out = torch.zeros_like(xe)
        dropped = 0
        for e in range(num_experts):
            mask = indices == e
            if not mask.any():  # host sync
                continue
            token_idx, k_idx = torch.where(mask)
            cap = capacity[e].item()  # host sync
            if len(token_idx) > cap:
                keep = torch.randperm(len(token_idx), device=x.device, generator=gen)[:cap]
                dropped += len(token_idx) - cap
                token_idx, k_idx = token_idx[keep], k_idx[keep]
            h = activate(xe[token_idx] @ self.w_in[e], self.activation)
            y = _dropout(h, drop, gen) @ self.w_out[e]
            out[token_idx] += weights[token_idx, k_idx, None].to(y.dtype) * y
            self.usage[e] += mask.sum().cpu()  # the seed's per-expert statistics copies
        top1 = torch.bincount(indices[:, 0], minlength=num_experts)
        reported = int((top1 - capacity.to(top1.device)).clamp_min(0).sum())
        return SeedStyleOutput(out, dropped, indices.numel(), reported)
