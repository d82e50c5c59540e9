"""Compiled flex of a registry pattern with Lq queries over Lk keys (patterns.py's rectangular
patterns: JetSpec's draft tree and draft training). flex.py's calls are S x S; this module holds
the (Lq, Lk) block masks and calls the same process-wide compiled flex_attention.

Legend: B batch, H heads, Lq queries, Lk keys, D head dim.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from kernel_lib.attention.flex import call_flex
from kernel_lib.attention.patterns import FlexMods, PatternConfig, build_pattern


@functools.lru_cache(maxsize=16)
def _pattern(config: PatternConfig, q_len: int, kv_len: int, heads: int, device: str) -> FlexMods:
    return build_pattern(config, seq_len=q_len, num_heads=heads, device=device, kv_len=kv_len)


@functools.lru_cache(maxsize=16)
def block_mask_for(
    config: PatternConfig, q_len: int, kv_len: int, device: str, block_size: int
) -> BlockMask:
    """The cached (Lq, Lk) BlockMask of `config`, broadcast over B and H."""
    mask_mod = _pattern(config, q_len, kv_len, 1, device).mask_mod
    return create_block_mask(
        mask_mod, None, None, q_len, kv_len, device=device, BLOCK_SIZE=block_size
    )


def block_sparsity(
    config: PatternConfig, q_len: int, kv_len: int, *, block_size: int, device="cpu"
) -> float:
    """Percent of the ceil(Lq / block) x ceil(Lk / block) tiles flex skips."""
    mask = block_mask_for(config, q_len, kv_len, str(torch.device(device)), block_size)
    visited = float(mask.kv_num_blocks.sum() + mask.full_kv_num_blocks.sum())
    return 100.0 * (
        1.0 - visited / (math.ceil(q_len / block_size) * math.ceil(kv_len / block_size))
    )


def flex_rectangular(
    q: Tensor, k: Tensor, v: Tensor, config: PatternConfig, *, block_size: int = 128
) -> Tensor:
    """Compiled flex_attention of q (B, H, Lq, D) over k, v (B, H, Lk, D) under `config`; input
    dtype out. Unsupported where Inductor cannot compile it (flex.call_flex)."""
    Lq, Lk, device = q.shape[-2], k.shape[-2], str(q.device)
    mask = block_mask_for(config, Lq, Lk, device, block_size)
    score_mod = _pattern(config, Lq, Lk, q.shape[1], device).score_mod
    return call_flex(q, k, v, score_mod=score_mod, block_mask=mask)
