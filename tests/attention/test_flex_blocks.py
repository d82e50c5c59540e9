"""How compiled flex visits a pattern's tiles: interior tiles are marked full (the CPU kernel
skips mask_mod there) and only boundary tiles are partial, as the dense mask says."""

import dataclasses

import pytest
from torch.nn.attention.flex_attention import BlockMask

from kernel_lib.attention import flex
from kernel_lib.attention.patterns import PATTERNS, PatternConfig
from kernel_lib.attention.reference import dense_mask

from .conftest import flex_config

SEQ_LEN, BLOCK = 256, 32  # a whole number of tiles: no padded edge tile
DOCS = (1, 150, 104, 1)  # conftest's edge documents, summing to SEQ_LEN


def _dense_counts(config: PatternConfig, seq_len: int, block: int) -> flex.BlockCounts:
    n = seq_len // block
    tiles = dense_mask(config, seq_len).view(n, block, n, block).transpose(1, 2).flatten(2)
    full, some = tiles.all(dim=-1), tiles.any(dim=-1)
    return flex.BlockCounts(int(full.sum()), int((some & ~full).sum()), n * n)


@pytest.mark.parametrize("name", [p for p in PATTERNS if PATTERNS[p].mask_mod is not None])
def test_full_and_partial_tiles_are_the_dense_masks(name):
    config = dataclasses.replace(flex_config(name), doc_lengths=DOCS)
    got = flex.block_counts(config, SEQ_LEN, block_size=BLOCK)
    assert got == _dense_counts(config, SEQ_LEN, BLOCK), name


def test_causal_evaluates_mask_mod_only_on_the_diagonal():
    got = flex.block_counts(PatternConfig("causal"), 1024, block_size=64)
    assert got == flex.BlockCounts(full=16 * 15 // 2, partial=16, tiles=256)


def test_sliding_window_interior_tiles_are_full():
    # W=128 over 32-token tiles: a query tile sees 5 key tiles, the far edge and the diagonal
    # partial, the 3 between full (the first 4 query tiles see fewer).
    got = flex.block_counts(
        PatternConfig("causal_sliding_window", window=128), 4096, block_size=32
    )
    rows = 4096 // 32
    assert got.partial == 2 * rows - 4
    assert got.full == 3 * rows - 6


def test_no_mask_is_every_tile_full():
    got = flex.block_counts(PatternConfig("full"), 200, block_size=64)
    assert got == flex.BlockCounts(16, 0, 16)


def test_counts_see_a_mask_without_full_tiles(monkeypatch):
    """Teeth: a BlockMask that lost its full tiles no longer matches the dense mask."""
    config = flex_config("causal")
    mask = flex.block_mask_for(config, SEQ_LEN, device="cpu", block_size=BLOCK)
    partial_only = BlockMask.from_kv_blocks(
        mask.kv_num_blocks, mask.kv_indices, BLOCK_SIZE=mask.BLOCK_SIZE, mask_mod=mask.mask_mod
    )
    monkeypatch.setattr(flex, "block_mask_for", lambda *args, **kwargs: partial_only)
    got = flex.block_counts(config, SEQ_LEN, block_size=BLOCK)
    assert got.full == 0 and got != _dense_counts(config, SEQ_LEN, BLOCK)
