"""Score patterns as FlexAttention `score_mod`s: (score, b, h, q_idx, kv_idx) -> new score.

Legend: B batch, H heads, S sequence length, D head dim. `score` is q.k * scale before softmax.
attention-gym `attn_gym/mods/` has ALiBi, soft-capping and non-softmax activations; the relative-position bias here is a
real learned-table lookup (the seed system's was a no-op, see research/seed_system.md 3.3).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def alibi_slopes(num_heads: int, device: torch.device | str = "cpu") -> Tensor:
    """Per-head slopes 2^(-8 (h + 1) / H), h = 0..H-1 (Press et al. 2021, arXiv 2108.12409)."""
    exponents = torch.arange(1, num_heads + 1, dtype=torch.float32, device=device)
    return torch.exp2(-8.0 * exponents / num_heads)


def alibi(slopes: Tensor) -> ScoreMod:
    """Linear distance penalty slope_h * (kv - q); slopes: (H,) float."""

    def alibi_score(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return alibi_score


def relative_position_bias(table: Tensor, max_distance: int) -> ScoreMod:
    """Learned bias table[h, clamp(kv - q, -M, M) + M]; table: (H, 2M + 1) (Shaw et al. 2018)."""

    def relative_position_score(score, b, h, q_idx, kv_idx):
        offset = (kv_idx - q_idx).clamp(-max_distance, max_distance) + max_distance
        return score + table[h, offset]

    return relative_position_score


def softcap(cap: float) -> ScoreMod:
    """Gemma-2 logit soft-capping: cap * tanh(score / cap) keeps every score in (-cap, cap)."""

    def softcap_score(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return softcap_score


def activation(fn: Callable[[Tensor], Tensor], offset: float) -> ScoreMod:
    """Softmax replaced by `fn` through log space: log(fn(score) + offset), so softmax's weights
    are (fn(s) + offset) / l; activation.py undoes the normalisation with l = exp(lse).
    fn(s) + offset must stay > 0 (gelu >= -0.17, relu >= 0: offset 1 does)."""

    def activation_score(score, b, h, q_idx, kv_idx):
        return torch.log(fn(score) + offset)

    return activation_score


def combine(*mods: ScoreMod) -> ScoreMod:
    """Apply score_mods left to right (e.g. a bias, then soft-capping)."""
    if not mods:
        raise ValueError("mods=() must name at least one score_mod")

    def combined_score(score, b, h, q_idx, kv_idx):
        for mod in mods:
            score = mod(score, b, h, q_idx, kv_idx)
        return score

    return combined_score


def sandwich_table(seq_len: int, dim: int, device: torch.device | str = "cpu") -> Tensor:
    """Sandwich bias by offset: sum_i cos(|q - kv| / 10000^(2i / dim)), i = 0 .. dim/2 - 1,
    indexed by q - kv + S - 1; (2S - 1,) fp32 (Chi et al. 2023, arXiv 2212.10356). The range is
    that of the dot product p_m . p_n of Vaswani et al.'s sinusoidal embeddings (PE(pos, 2i),
    i from 0), which Sandwich keeps as its bias; attention-gym sums the same, NeMo's
    SandwichRelativePositionEmbedding i = 1 .. dim/2 (each frequency one step lower)."""
    freqs = 10000.0 ** (-2.0 * torch.arange(dim // 2, dtype=torch.float32, device=device) / dim)
    offsets = torch.arange(1 - seq_len, seq_len, dtype=torch.float32, device=device).abs()
    return torch.cos(offsets[:, None] * freqs).sum(dim=-1)


def sandwich(table: Tensor, slopes: Tensor) -> ScoreMod:
    """Sandwich bias table[q - kv + S - 1] times a per-head ALiBi-like slope; table: (2S - 1,)
    from sandwich_table, slopes: (H,)."""
    offset = (table.shape[0] - 1) // 2

    def sandwich_score(score, b, h, q_idx, kv_idx):
        return score + table[q_idx - kv_idx + offset] * slopes[h]

    return sandwich_score


def graph_spatial_bias(table: Tensor, distances: Tensor) -> ScoreMod:
    """Graphormer spatial encoding table[h, distances[q, kv]]; table: (H, M + 2), distances:
    (S, S) int shortest-path hops clamped to M + 1 (graph.py)."""

    def graph_spatial_score(score, b, h, q_idx, kv_idx):
        return score + table[h, distances[q_idx, kv_idx]]

    return graph_spatial_score


def graph_edge_bias(table: Tensor, shares: Tensor) -> ScoreMod:
    """Graphormer edge encoding: the mean over the q -> kv path's edges of table[h, edge type],
    as sum_k shares[k, q, kv] * table[h, k]; table: (H, K), shares: (K, S, S) (graph.py)."""

    def graph_edge_score(score, b, h, q_idx, kv_idx):
        for kind in range(shares.shape[0]):
            score = score + shares[kind, q_idx, kv_idx] * table[h, kind]
        return score

    return graph_edge_score
