"""Video sparse attention (VSA, Zhang et al. 2025, arXiv 2505.13389): which keys a query reads is
chosen from the data. A coarse pass mean-pools q and k over tiles of T tokens (VSA's cubes of
4 x 4 x 4 video tokens, the tokens ordered cube by cube) and scores every (query tile, key tile)
pair; each query tile keeps its k best key tiles; the fine pass attends to exactly those tiles.
Flex runs the fine pass over a BlockMask of whole T-token tiles built from the choice (no
mask_mod); SDPA and the naive attention over the same choice as a (B, H, S, S) bool mask. Every
timed call includes the coarse pass. VSA's gated coarse-output branch is left out: this is its
sparse attention.

Legend: B batch, H heads, S tokens, D head dim, T tokens per tile (flex's block), n = ceil(S / T)
tiles (the last may be short: its mean is over its own tokens), k key tiles kept per query tile.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask

from kernel_lib.attention.baselines import sdpa_attention
from kernel_lib.attention.flex import call_flex
from kernel_lib.attention.plain import check_score_memory
from kernel_lib.attention.reference import attention_reference


def kept_tiles(seq_len: int, tile: int, keep: float) -> int:
    """k: ceil(keep * n) of the n tiles, at least 1."""
    return max(1, math.ceil(keep * math.ceil(seq_len / tile)))


def _tile_lengths(seq_len: int, tile: int, device) -> Tensor:
    """(n,) tokens in each tile."""
    starts = torch.arange(0, seq_len, tile, device=device)
    return (seq_len - starts).clamp(max=tile)


def _tile_means(x: Tensor, tile: int) -> Tensor:
    """(B, H, n, D) fp32 means of x (B, H, S, D) over each tile's tokens."""
    B, H, S, D = x.shape
    n = math.ceil(S / tile)
    sums = F.pad(x.float(), (0, 0, 0, n * tile - S)).view(B, H, n, tile, D).sum(dim=-2)
    return sums / _tile_lengths(S, tile, x.device)[:, None]


def select_tiles(q: Tensor, k: Tensor, *, tile: int, top_k: int) -> Tensor:
    """(B, H, n, k) int64: the key tiles each query tile keeps, ascending: the k largest coarse
    scores mean(q) . mean(k) (fp32; the 1 / sqrt(D) scale does not change the order)."""
    scores = _tile_means(q, tile) @ _tile_means(k, tile).transpose(-2, -1)
    return scores.topk(top_k, dim=-1).indices.sort(dim=-1).values


def block_mask(selection: Tensor, seq_len: int, tile: int) -> BlockMask:
    """The fine pass's BlockMask: each query tile's chosen key tiles as full blocks (forward
    only: no transposed indices)."""
    B, H, n, k = selection.shape
    indices = F.pad(selection, (0, n - k)).to(torch.int32)  # entries past k are never read
    counts = torch.full((B, H, n), k, dtype=torch.int32, device=selection.device)
    return BlockMask.from_kv_blocks(
        torch.zeros_like(counts), torch.zeros_like(indices), counts, indices, BLOCK_SIZE=tile,
        seq_lengths=(seq_len, seq_len), compute_q_blocks=False,
    )  # fmt: skip


def dense_mask(selection: Tensor, seq_len: int, tile: int) -> Tensor:
    """(B, H, S, S) bool: the chosen tiles as token pairs."""
    chosen = torch.zeros(*selection.shape[:-1], selection.shape[-2], dtype=torch.bool)
    chosen = chosen.to(selection.device).scatter_(-1, selection, True)
    tile_of = torch.arange(seq_len, device=selection.device) // tile
    return chosen[..., tile_of, :][..., tile_of]


def attended_pairs(selection: Tensor, seq_len: int, tile: int) -> float:
    """(query, key) pairs the choice attends, over every batch and head."""
    lengths = _tile_lengths(seq_len, tile, selection.device)
    return float((lengths[:, None] * lengths[selection]).sum())


def flex_vsa(q: Tensor, k: Tensor, v: Tensor, *, tile: int, top_k: int) -> Tensor:
    """Coarse pass, then compiled flex_attention of q, k, v (B, H, S, D) over the chosen tiles;
    input dtype out. Unsupported where Inductor cannot compile it (flex.call_flex)."""
    mask = block_mask(select_tiles(q, k, tile=tile, top_k=top_k), q.shape[-2], tile)
    return call_flex(q, k, v, block_mask=mask)


def sdpa_vsa(q: Tensor, k: Tensor, v: Tensor, *, tile: int, top_k: int, backend: str) -> Tensor:
    """Coarse pass, then SDPA through `backend` with the choice as its attn_mask."""
    mask = dense_mask(select_tiles(q, k, tile=tile, top_k=top_k), q.shape[-2], tile)
    return sdpa_attention(q, k, v, backend=backend, sdpa_kwargs={"attn_mask": mask})


def naive_vsa(q: Tensor, k: Tensor, v: Tensor, *, tile: int, top_k: int) -> Tensor:
    """Coarse pass, then the materialised attention in the input dtype (skipped over the score
    memory limit)."""
    check_score_memory(q)
    mask = dense_mask(select_tiles(q, k, tile=tile, top_k=top_k), q.shape[-2], tile)
    return attention_reference(q, k, v, mask=mask, compute_dtype=q.dtype)
