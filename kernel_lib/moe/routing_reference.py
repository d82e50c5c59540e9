"""Plain fp64 twins of each preset model's routing, token by token in the order the model
publishes it, and the check of a fast routing against them.

Legend: T tokens, E experts, K top-k, G groups. Each twin takes fp64 router logits (T, E)
(the gate's bias already added) and returns, per token, its K experts in ascending order, their
weights, and its margin: how far the decision is from a tie (the gap between the last score
kept and the best one left out, at the group and at the expert level), so a check can tell a
wrong choice from a tie that rounding may break either way.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd
import torch
from torch import Tensor

from kernel_lib.moe.presets import MoEPreset
from kernel_lib.moe.routing import Routing

# A token whose reference margin is below this is a near-tie: fp32 scores (u = 6e-8, scores
# <= 1, logits of a few units) may order it either way, so its choice is not compared.
TIE_MARGIN = 1e-5
# fp32 weights: a softmax or sigmoid, a sum of K <= 8 and a division: a few u of 6e-8, x10.
WEIGHT_TOLERANCE = 1e-5


class ReferenceRouting(NamedTuple):
    """expert_ids: (T, K) int64, ascending per token; weights: (T, K) fp64 in that order;
    margin: (T,) fp64 (inf when nothing is left out)."""

    expert_ids: Tensor
    weights: Tensor
    margin: Tensor


def _gap(values: list[float], keep: int) -> float:
    """Gap between the keep-th largest value and the next (inf when nothing is left out)."""
    ordered = sorted(values, reverse=True)
    return ordered[keep - 1] - ordered[keep] if keep < len(ordered) else math.inf


def _top(values: list[float], k: int) -> list[int]:
    """Indices of the k largest values (ties to the lower index)."""
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]


def _pack(rows: list[tuple[list[int], list[float], float]]) -> ReferenceRouting:
    ids, weights, margins = [], [], []
    for chosen, weight, margin in rows:
        order = sorted(range(len(chosen)), key=lambda j: chosen[j])
        ids.append([chosen[j] for j in order])
        weights.append([weight[j] for j in order])
        margins.append(margin)
    k = len(rows[0][0]) if rows else 0
    return ReferenceRouting(
        torch.tensor(ids, dtype=torch.long).view(len(rows), k),
        torch.tensor(weights, dtype=torch.float64).view(len(rows), k),
        torch.tensor(margins, dtype=torch.float64),
    )


def softmax_topk_reference(logits: Tensor, *, top_k: int) -> ReferenceRouting:
    """Mixtral-8x7B and Qwen3-30B-A3B: softmax over all E, keep the top-k probabilities,
    divide them by their sum (norm_topk_prob)."""
    rows = []
    for token in logits.double().tolist():
        peak = max(token)
        exps = [math.exp(v - peak) for v in token]
        probs = [e / sum(exps) for e in exps]
        chosen = _top(probs, top_k)
        kept = sum(probs[i] for i in chosen)
        rows.append((chosen, [probs[i] / kept for i in chosen], _gap(probs, top_k)))
    return _pack(rows)


def topk_softmax_reference(logits: Tensor, *, top_k: int) -> ReferenceRouting:
    """gpt-oss: the top-k logits (gate bias included), then a softmax over those k alone."""
    rows = []
    for token in logits.double().tolist():
        chosen = _top(token, top_k)
        peak = max(token[i] for i in chosen)
        exps = [math.exp(token[i] - peak) for i in chosen]
        rows.append((chosen, [e / sum(exps) for e in exps], _gap(token, top_k)))
    return _pack(rows)


def deepseek_v3_reference(
    logits: Tensor,
    bias: Tensor | None,
    *,
    top_k: int,
    num_groups: int,
    top_groups: int,
    scale: float,
) -> ReferenceRouting:
    """DeepSeek-V3: s = sigmoid(logit); choice score s + bias; each group of E/G scored by the
    sum of its best two choice scores; the top groups kept; the top-k choice scores among their
    experts; weights the unbiased s of those, over their sum, times `scale`."""
    num_experts = logits.shape[1]
    per_group = num_experts // num_groups
    offsets = [0.0] * num_experts if bias is None else bias.double().tolist()
    rows = []
    for token in logits.double().tolist():
        scores = [1 / (1 + math.exp(-v)) for v in token]
        choice = [s + b for s, b in zip(scores, offsets)]
        group_scores = []
        for g in range(num_groups):
            members = choice[g * per_group : (g + 1) * per_group]
            group_scores.append(sum(sorted(members, reverse=True)[:2]))
        groups = _top(group_scores, top_groups)
        allowed = [e for e in range(num_experts) if e // per_group in groups]
        allowed_choice = [choice[e] for e in allowed]
        chosen = [allowed[j] for j in _top(allowed_choice, top_k)]
        total = sum(scores[e] for e in chosen)
        margin = min(_gap(group_scores, top_groups), _gap(allowed_choice, top_k))
        rows.append((chosen, [scores[e] / total * scale for e in chosen], margin))
    return _pack(rows)


def reference_routing(
    model: MoEPreset, logits: Tensor, *, bias: Tensor | None = None
) -> ReferenceRouting:
    """The fp64 twin of `model.route(logits, bias=bias)`, in the model's published order."""
    if model.num_groups > 1 or model.score == "sigmoid" or bias is not None:
        if model.score != "sigmoid":
            raise NotImplementedError(
                f"{model.name}: no published twin for a selection bias on softmax scores"
            )
        return deepseek_v3_reference(
            logits,
            bias,
            top_k=model.top_k,
            num_groups=model.num_groups,
            top_groups=model.top_groups,
            scale=model.scale,
        )
    if model.router_bias:
        return topk_softmax_reference(logits, top_k=model.top_k)
    return softmax_topk_reference(logits, top_k=model.top_k)


class RoutingCheck(NamedTuple):
    """wrong_choices: tokens (outside near-ties) whose K experts differ from the reference;
    near_ties: tokens not compared; weight_error: max |w - w_ref| / max |w_ref| over the
    tokens with the reference's experts."""

    wrong_choices: int
    near_ties: int
    weight_error: float

    @property
    def passed(self) -> bool:
        return self.wrong_choices == 0 and self.weight_error <= WEIGHT_TOLERANCE


def check_routing(routing: Routing, ref: ReferenceRouting) -> RoutingCheck:
    """Compare a dropless token-choice routing (T*K assignments) with its fp64 twin."""
    num_tokens, k = ref.expert_ids.shape
    ids = routing.expert_idx.view(num_tokens, k).cpu()
    weights = routing.weight.view(num_tokens, k).double().cpu()
    order = ids.argsort(-1)
    ids, weights = ids.gather(1, order), weights.gather(1, order)
    same = (ids == ref.expert_ids).all(-1)
    tie = ref.margin <= TIE_MARGIN
    error = 0.0
    if same.any():
        scale = ref.weights[same].abs().max().item()
        error = (weights[same] - ref.weights[same]).abs().max().item() / max(scale, 1e-300)
    return RoutingCheck(int((~same & ~tie).sum()), int(tie.sum()), error)


def check_table(models: list[MoEPreset], *, tokens: int, seed: int = 0) -> pd.DataFrame:
    """Each preset's fast routing (fp32) against its fp64 twin on seeded logits of `tokens`
    tokens (gate bias and a random selection bias where the model has them): preset, E, K,
    groups, check (PASS or FAIL: a row, not a raise), wrong_choices, near_ties, weight_error,
    tolerance."""
    rows = []
    for model in models:
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn(tokens, model.num_experts, generator=gen, dtype=torch.float64)
        if model.router_bias:
            logits += torch.randn(model.num_experts, generator=gen, dtype=torch.float64)
        logits, bias = logits.float(), None
        if model.selection_bias:
            bias = 0.1 * torch.randn(model.num_experts, generator=gen)
        got = check_routing(
            model.route(logits, bias=bias), reference_routing(model, logits, bias=bias)
        )
        rows.append(
            {
                "preset": model.name, "E": model.num_experts, "K": model.top_k,
                "groups": f"{model.top_groups}/{model.num_groups}",
                "check": "PASS" if got.passed else "FAIL", **got._asdict(),
                "tolerance": WEIGHT_TOLERANCE,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)
