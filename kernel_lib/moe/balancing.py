"""Auxiliary-loss-free load balancing (DeepSeek-V3, arXiv:2412.19437 sec. 2.1.2; Wang et al.
2024, arXiv:2408.15664) and router traffic whose expert popularity follows a Zipf law.

Legend: T tokens, E experts. After each step every expert's selection bias moves by gamma
towards the mean load: bias_e += gamma * sign(mean load - load_e). The bias changes which
experts are chosen, never their weights (MoEPreset.route).
"""

from __future__ import annotations

import math

import pandas as pd
import torch
from torch import Tensor

from kernel_lib.moe.presets import MoEPreset

BALANCING = ("none", "aux_loss_free")


def zipf_offsets(num_experts: int, exponent: float, *, seed: int = 0) -> Tensor:
    """(E,) fp32 logit offsets -exponent * log(rank), ranks 1..E over a seeded permutation of
    the experts: added to zero logits, softmax shares follow Zipf (p_rank ~ rank^-exponent);
    exponent 0 gives zeros (no skew)."""
    if not (math.isfinite(exponent) and exponent >= 0):
        raise ValueError(f"exponent={exponent} must be a finite number >= 0")
    gen = torch.Generator().manual_seed(seed)
    rank = torch.randperm(num_experts, generator=gen).float() + 1
    return -exponent * rank.log()


def update_bias_reference(bias: Tensor, counts: Tensor, *, gamma: float) -> Tensor:
    """fp64 twin of update_bias, expert by expert."""
    mean = sum(counts.tolist()) / len(counts)
    out = []
    for b, c in zip(bias.tolist(), counts.tolist()):
        out.append(b + gamma * (1.0 if c < mean else -1.0 if c > mean else 0.0))
    return torch.tensor(out, dtype=torch.float64)


def update_bias(bias: Tensor, counts: Tensor, *, gamma: float) -> Tensor:
    """bias (E,) + gamma * sign(mean(counts) - counts): under-loaded experts become likelier
    to be chosen, over-loaded ones less. counts: (E,) assignments of the last step."""
    if not (math.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"gamma={gamma} must be a finite number >= 0")
    counts = counts.to(bias)  # bias's dtype and device
    return bias + gamma * torch.sign(counts.mean() - counts)


def load_over_steps(
    model: MoEPreset,
    *,
    steps: int,
    tokens: int,
    gamma: float,
    zipf: float,
    seed: int = 0,
) -> pd.DataFrame:
    """Expert load of `model`'s routing over `steps` batches, without and with the bias update.

    Each step routes `tokens` tokens whose logits are iid N(0, 1) plus zipf_offsets(zipf) (the
    same batches for both runs). Rows: balancing (none, aux_loss_free), step, max_over_mean and
    min_over_mean (busiest and idlest expert's assignments over the mean), cv (std / mean).
    """
    if steps < 1 or tokens < 1:
        raise ValueError(f"steps={steps} and tokens={tokens} must be >= 1")
    offsets = zipf_offsets(model.num_experts, zipf, seed=seed)
    rows = []
    for balancing in BALANCING:
        gen = torch.Generator().manual_seed(seed)
        bias = torch.zeros(model.num_experts)
        for step in range(steps):
            logits = torch.randn(tokens, model.num_experts, generator=gen) + offsets
            counts = model.route(logits, bias=bias).counts.double()
            mean = counts.mean().item()
            rows.append(
                {
                    "balancing": balancing, "step": step,
                    "max_over_mean": counts.max().item() / mean,
                    "min_over_mean": counts.min().item() / mean,
                    "cv": counts.std(unbiased=False).item() / mean,
                }
            )  # fmt: skip
            if balancing == "aux_loss_free":
                bias = update_bias(bias, counts, gamma=gamma)
    return pd.DataFrame(rows)
