"""The forms of the core attention patterns (patterns.py registers them): each pattern's dense
reference, an (Lq, Lk) bool mask built from matrix diagonals, slices and plain loops over its
definition, or an additive (H, R, Lk) fp64 bias; and the builders of what flex runs, a mask_mod
from the primitives in masks.py. Every function takes the pattern's `PatternConfig` first.

Legend: H heads, S sequence length (S = Lq = Lk), R query rows of a (row-sampled) check.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_lib.attention import masks


def band(seq_len: int, below: int, above: int) -> Tensor:
    """Keys j with -below <= j - i <= above, as an (S, S) bool matrix."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril(diagonal=above) & ones.triu(diagonal=-below)


def offsets(rows: Tensor, kv_len: int) -> Tensor:
    """(R, Lk) key minus query position j - i of query `rows`."""
    return torch.arange(kv_len, device=rows.device)[None, :] - rows[:, None]


def full(config, _, seq_len: int) -> Tensor:
    return torch.ones(seq_len, seq_len, dtype=torch.bool)


def causal(config, _, seq_len: int) -> Tensor:
    return band(seq_len, seq_len, 0)


def causal_mod(config, _, seq_len: int, device: str) -> masks.MaskMod:
    return masks.causal()


def index(value: int, device: str) -> Tensor:
    return masks.as_index(value, device)


def document_lengths(config, seq_len: int) -> tuple[int, ...]:
    """Document lengths covering S tokens; ValueError if explicit lengths do not sum to S."""
    if config.doc_lengths:
        if sum(config.doc_lengths) != seq_len:
            raise ValueError(f"doc_lengths={config.doc_lengths} must sum to seq_len={seq_len}")
        return config.doc_lengths
    count = min(config.num_docs, seq_len)
    base = seq_len // count
    return (base,) * (count - 1) + (seq_len - base * (count - 1),)


def document_mod(config, _, seq_len: int, device: str) -> masks.MaskMod:
    lengths = torch.tensor(document_lengths(config, seq_len), device=device)
    ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    return masks.all_of(masks.causal(), masks.same_document(ids))


def document(config, _, seq_len: int) -> Tensor:
    blocks = [torch.ones(n, n, dtype=torch.bool) for n in document_lengths(config, seq_len)]
    return torch.block_diag(*blocks) & band(seq_len, seq_len, 0)


def prefix_lm(config, _, seq_len: int) -> Tensor:
    mask = band(seq_len, seq_len, 0)
    mask[:, : config.prefix_len] = True
    return mask


def dilated(config, _, seq_len: int) -> Tensor:
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    reach = min(config.window * config.dilation, seq_len - 1)
    for distance in range(0, reach + 1, config.dilation):
        mask.diagonal(-distance).fill_(True)
    return mask


def global_local_mod(config, _, seq_len: int, device: str) -> masks.MaskMod:
    return masks.any_of(
        masks.sliding_window(index(config.window, device)),
        masks.global_tokens(index(config.num_global, device)),
    )


def global_local(config, _, seq_len: int) -> Tensor:
    mask = band(seq_len, config.window, config.window)
    mask[: config.num_global, :] = True
    mask[:, : config.num_global] = True
    return mask


def alibi_bias(config, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    slopes = [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    slopes = torch.tensor(slopes, dtype=torch.float64, device=rows.device)
    return slopes[:, None, None] * offsets(rows, seq_len)[None]


def relative_position_table(config, num_heads: int, device="cpu") -> Tensor:
    """A seeded stand-in for a learned (H, 2M + 1) bias table, fp32."""
    generator = torch.Generator().manual_seed(config.seed)
    table = torch.randn(num_heads, 2 * config.max_distance + 1, generator=generator)
    return table.to(device)


def relative_bias(config, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    table = relative_position_table(config, num_heads, rows.device).double()
    M = config.max_distance
    return table[:, offsets(rows, seq_len).clamp(-M, M) + M]
