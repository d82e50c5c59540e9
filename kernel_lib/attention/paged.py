"""Paged KV cache: fixed-size pages in one shared pool and a block table per sequence (vLLM's
PagedAttention layout), read by flex through a mask over the pool, and its dense reference.

Legend: B batch, Hq / Hkv query / key-value heads, Lq query positions, L cached tokens per
sequence, D head dim, P page size (tokens), N pages in the pool, n pages per sequence.
Pool: k_pool, v_pool (1, Hkv, N * P, D); block_table (B, n): logical page -> physical page.
Flex runs over the whole pool with a mask_mod that maps a physical key position back to its
sequence and logical position (keys of other sequences or free pages are masked out); with the
BlockMask's key tile equal to P, every page is a tile, so flex skips all pages not in the table
and no gather copy is made.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import NamedTuple

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from kernel_lib.attention.flex import call_flex
from kernel_lib.profiling.phases import phase


class PagedCache(NamedTuple):
    """K and V in pages of a shared pool, and where each sequence's pages are."""

    k_pool: Tensor  # (1, Hkv, N * P, D)
    v_pool: Tensor  # (1, Hkv, N * P, D)
    block_table: Tensor  # (B, n) int64 physical page of each logical page
    page_size: int
    kv_len: int  # L, cached tokens per sequence (the last page may be partly filled)


def page_cache(
    k: Tensor, v: Tensor, *, page_size: int, spare_pages: int = 3, seed: int = 0
) -> PagedCache:
    """k, v (B, Hkv, L, D) written into a pool of B * ceil(L / P) + spare_pages pages placed in
    a seeded random order (as an allocator leaves them after many requests)."""
    if page_size < 1 or spare_pages < 0:
        raise ValueError(f"page_size={page_size} must be >= 1, spare_pages={spare_pages} >= 0")
    B, H, L, D = k.shape
    n = math.ceil(L / page_size)
    num_pages = B * n + spare_pages
    generator = torch.Generator().manual_seed(seed)
    table = torch.randperm(num_pages, generator=generator)[: B * n].view(B, n).to(k.device)
    pools = []
    for t in (k, v):
        padded = t.new_zeros(B, H, n * page_size, D)
        padded[:, :, :L] = t
        pool = t.new_zeros(H, num_pages, page_size, D)
        pool[:, table.flatten()] = padded.view(B, H, n, page_size, D).transpose(0, 1).flatten(1, 2)
        pools.append(pool.view(1, H, num_pages * page_size, D))
    return PagedCache(*pools, table, page_size, L)


def gather_reference(cache: PagedCache) -> tuple[Tensor, Tensor]:
    """The dense (B, Hkv, L, D) k and v the cache holds, read page by page through the table."""
    P = cache.page_size
    dense = []
    for pool in (cache.k_pool, cache.v_pool):
        rows = [
            torch.cat([pool[0, :, p * P : (p + 1) * P] for p in pages.tolist()], dim=1)
            for pages in cache.block_table
        ]
        dense.append(torch.stack(rows)[:, :, : cache.kv_len])
    return dense[0], dense[1]


def gather(cache: PagedCache) -> tuple[Tensor, Tensor]:
    """gather_reference in one indexing op per tensor: the pages of the table copied out of the
    pool into a contiguous (B, Hkv, L, D) k and v."""
    P, (B, n) = cache.page_size, cache.block_table.shape
    out = []
    for pool in (cache.k_pool, cache.v_pool):
        H, D = pool.shape[1], pool.shape[3]
        pages = pool.view(H, -1, P, D)[:, cache.block_table]  # (Hkv, B, n, P, D)
        out.append(pages.transpose(0, 1).reshape(B, H, n * P, D)[:, :, : cache.kv_len])
    return out[0], out[1]


def logical_pages(block_table: Tensor, num_pages: int) -> Tensor:
    """(B, N) inverse of the table: the logical page of each physical page, -1 if not the
    sequence's."""
    B, n = block_table.shape
    inverse = torch.full((B, num_pages), -1, dtype=torch.int64, device=block_table.device)
    logical = torch.arange(n, device=block_table.device).expand(B, n)
    return inverse.scatter(1, block_table, logical)


def paged_causal(block_table: Tensor, num_pages: int, page_size: int, kv_len: int, q_len: int):
    """mask_mod over the pool: key at physical position kv_idx belongs to sequence b, lies
    before kv_len, and is at or before query i's position kv_len - q_len + i."""
    inverse = logical_pages(block_table, num_pages)
    P = page_size

    def paged_causal_mask(b, h, q_idx, kv_idx):
        page = inverse[b, kv_idx // P]
        position = page * P + kv_idx % P
        return (page >= 0) & (position < kv_len) & (position <= q_idx + (kv_len - q_len))

    return paged_causal_mask


@functools.lru_cache(maxsize=8)
def _block_mask(
    table_key: tuple, num_pages: int, page_size: int, kv_len: int, q_len: int, device: str
) -> BlockMask:
    table = torch.tensor(table_key, dtype=torch.int64, device=device)
    mod = paged_causal(table, num_pages, page_size, kv_len, q_len)
    return create_block_mask(
        mod,
        table.shape[0],
        None,
        q_len,
        num_pages * page_size,
        device=device,
        BLOCK_SIZE=(128, page_size),
    )


_TABLE_KEYS: dict[int, tuple] = {}  # id(table) -> (a weak reference to it, its rows as a key)


def table_key(table: Tensor) -> tuple:
    """The table's rows as a hashable key, read once per table tensor: a read per call would
    wait for the GPU inside every timed call. Tables are never changed in place."""
    ref, key = _TABLE_KEYS.get(id(table), (None, None))
    if ref is None or ref() is not table:
        key, ident = tuple(map(tuple, table.tolist())), id(table)
        # the entry goes with its tensor, before the id can be reused
        _TABLE_KEYS[ident] = (weakref.ref(table, lambda _: _TABLE_KEYS.pop(ident, None)), key)
    return key


def paged_block_mask(cache: PagedCache, q_len: int) -> BlockMask:
    """The cached BlockMask of the cache's table (per sequence; key tile = one page)."""
    num_pages = cache.k_pool.shape[2] // cache.page_size
    key = table_key(cache.block_table)
    return _block_mask(
        key, num_pages, cache.page_size, cache.kv_len, q_len, str(cache.k_pool.device)
    )


def flex_paged(q: Tensor, cache: PagedCache) -> Tensor:
    """Compiled flex of q (B, Hq, Lq, D) over the paged cache, bottom-right causal; the pool's
    batch of 1 is broadcast over B. Same result as flex on the gathered dense k, v.
    Unsupported (call_flex) where Inductor refuses the key tile of one page: on a GPU, flex's
    Triton kernel needs P to be a multiple of its BLOCK_N (up to 128)."""
    with phase("block mask"):
        mask = paged_block_mask(cache, q.shape[2])
    gqa = q.shape[1] != cache.k_pool.shape[1]
    return call_flex(q, cache.k_pool, cache.v_pool, block_mask=mask, enable_gqa=gqa)
