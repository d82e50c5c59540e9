"""Dense references: each pattern as a boolean mask and an additive bias, built from matrix
diagonals and slices rather than from the mask_mod/score_mod, plus naive attention over them.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kernel_lib.attention.patterns import PatternConfig, document_lengths, relative_position_table


def _band(seq_len: int, below: int, above: int) -> Tensor:
    """Keys j with -below <= j - i <= above, as an (S, S) bool matrix."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril(diagonal=above) & ones.triu(diagonal=-below)


def dense_mask(config: PatternConfig, seq_len: int) -> Tensor:
    """(S, S) bool, True where query i may attend key j."""
    S, name = seq_len, config.name
    if name in ("full", "relative_position_bias"):
        return torch.ones(S, S, dtype=torch.bool)
    if name in ("causal", "alibi", "softcap"):
        return _band(S, S, 0)
    if name == "sliding_window":
        return _band(S, config.window, config.window)
    if name == "causal_sliding_window":
        return _band(S, config.window, 0)
    if name == "prefix_lm":
        mask = _band(S, S, 0)
        mask[:, : config.prefix_len] = True
        return mask
    if name == "document":
        blocks = [torch.ones(n, n, dtype=torch.bool) for n in document_lengths(config, S)]
        return torch.block_diag(*blocks) & _band(S, S, 0)
    if name == "dilated":
        mask = torch.zeros(S, S, dtype=torch.bool)
        for distance in range(0, min(config.window * config.dilation, S - 1) + 1, config.dilation):
            mask.diagonal(-distance).fill_(True)
        return mask
    if name == "global_local":
        mask = _band(S, config.window, config.window)
        mask[: config.num_global, :] = True
        mask[:, : config.num_global] = True
        return mask
    raise AssertionError(f"no dense mask for {name!r}")  # PatternConfig validated the name


def dense_bias(
    config: PatternConfig,
    seq_len: int,
    num_heads: int,
    *,
    rows: Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
) -> Tensor | None:
    """(H, S, S) additive bias before softmax (or (H, R, S) for query `rows`), None if none.

    Full matrices are built diagonal by diagonal; a row subset (large S, where H*S*S would not
    fit) indexes the table by offset instead.
    """
    S, H = seq_len, num_heads
    queries = torch.arange(S, device=device) if rows is None else rows.to(device)
    offsets = torch.arange(S, device=device)[None, :] - queries[:, None]  # j - i: (R, S)
    if config.name == "alibi":
        slopes = [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]
        slopes = torch.tensor(slopes, dtype=torch.float64, device=device)
        return (slopes[:, None, None] * offsets[None]).to(dtype)
    if config.name == "relative_position_bias":
        table = relative_position_table(config, H, device).to(dtype)
        M = config.max_distance
        if rows is not None:
            return table[:, offsets.clamp(-M, M) + M]
        bias = torch.empty(H, S, S, dtype=dtype, device=device)
        for offset in range(-(S - 1), S):  # offset = j - i is constant along a diagonal
            column = table[:, max(-M, min(M, offset)) + M]
            bias.diagonal(offset, dim1=-2, dim2=-1).copy_(
                column[:, None].expand(H, S - abs(offset))
            )
        return bias
    return None


def dense_softcap(config: PatternConfig) -> float | None:
    """The soft-cap applied to scores, or None."""
    return config.softcap if config.name == "softcap" else None


def attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    softcap: float | None = None,
    compute_dtype: torch.dtype = torch.float64,
) -> Tensor:
    """softmax(cap(q k^T / sqrt(D) + bias) masked) v with the full (B, H, S, S) score matrix.

    q: (B, H, R, D) (R = S, or a subset of query rows), k, v: (B, H, S, D); mask: (R, S) bool;
    bias: (H, R, S). Computed in `compute_dtype` (fp64: the oracle; the input dtype: the naive
    materialised-scores baseline); returns q.dtype.
    """
    qc, kc, vc = (t.to(compute_dtype) for t in (q, k, v))
    scores = qc @ kc.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.to(device=q.device, dtype=compute_dtype)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        scores = scores.masked_fill(~mask.to(q.device), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vc).to(q.dtype)


def sdpa_mask(
    config: PatternConfig,
    seq_len: int,
    num_heads: int,
    dtype: torch.dtype,
    *,
    rows: Tensor | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """The pattern as one SDPA attn_mask: (S, S) bool, or (1, H, S, S) additive, -inf outside
    (R query rows instead of S when `rows` is given).

    4-D for a bias because SDPA's CPU flash kernel takes only 2-D or 4-D masks.
    """
    mask = dense_mask(config, seq_len).to(device)
    mask = mask if rows is None else mask[rows.to(device)]
    bias = dense_bias(config, seq_len, num_heads, rows=rows, dtype=dtype, device=device)
    if bias is None:
        return mask
    return bias.masked_fill(~mask, float("-inf"))[None]
