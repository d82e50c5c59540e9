"""Video sparse attention: the coarse pass's tile means and choice, its block mask and dense mask
against each other, every path (flex, SDPA, naive) against the fp64 reference on an odd length,
and teeth: one chosen tile dropped from the block mask, or another tile chosen, fails the check."""

import pytest
import torch

from kernel_lib.attention import vsa
from kernel_lib.attention.checks import rows_check
from kernel_lib.attention.flex import call_flex
from kernel_lib.attention.reference import vsa_reference

from .conftest import fp64, qkv_for, without_block

S, TILE = 200, 64  # 4 tiles, the last of 8 tokens


def _check(q, k, v, top_k):
    reference = lambda: vsa_reference(q, k, v, tile=TILE, top_k=top_k)
    return rows_check(reference, None, name="VSA", dtype="float32")


def test_kept_tiles():
    assert vsa.kept_tiles(200, 64, 0.125) == 1 and vsa.kept_tiles(200, 64, 0.5) == 2
    assert vsa.kept_tiles(200, 64, 1.0) == 4 and vsa.kept_tiles(10, 64, 0.01) == 1


def test_short_last_tile_is_averaged_over_its_own_tokens():
    k = torch.tensor([2.0, 2.0, 0.0, 0.0, 3.0]).view(1, 1, 5, 1)  # tiles of 2, the last of 1
    q = torch.ones(1, 1, 5, 1)
    assert vsa.select_tiles(q, k, tile=2, top_k=1)[0, 0, :, 0].tolist() == [2, 2, 2]


def test_choice_block_mask_dense_mask_and_pair_count_agree():
    q, k, _ = qkv_for(S, 3)
    chosen = vsa.select_tiles(q, k, tile=TILE, top_k=2)
    assert chosen.shape == (2, 3, 4, 2) and (chosen[..., :1] < chosen[..., 1:]).all()
    dense = vsa.dense_mask(chosen, S, TILE)
    tiles = vsa.block_mask(chosen, S, TILE).to_dense().bool()
    expanded = tiles.repeat_interleave(TILE, -2).repeat_interleave(TILE, -1)[..., :S, :S]
    assert torch.equal(expanded, dense)
    assert vsa.attended_pairs(chosen, S, TILE) == float(dense.sum())


@pytest.mark.parametrize("top_k", [1, 3])
def test_sdpa_and_naive_pass_the_reference(top_k):
    q, k, v = qkv_for(S, 3)
    check = _check(q, k, v, top_k)
    assert check(vsa.sdpa_vsa(q, k, v, tile=TILE, top_k=top_k, backend="sdpa_math")).passed
    exact = vsa.naive_vsa(*fp64(q, k, v), tile=TILE, top_k=top_k)
    assert float((exact - vsa_reference(q, k, v, tile=TILE, top_k=top_k)).abs().max()) < 1e-12


def test_flex_passes_and_a_dropped_or_swapped_tile_fails():
    q, k, v = qkv_for(S, 3)
    check = _check(q, k, v, 2)
    assert check(vsa.flex_vsa(q, k, v, tile=TILE, top_k=2)).passed
    chosen = vsa.select_tiles(q, k, tile=TILE, top_k=2)
    dropped = without_block(vsa.block_mask(chosen, S, TILE))
    assert not check(call_flex(q, k, v, block_mask=dropped)).passed  # teeth: one tile missing
    swapped = chosen.clone()
    swapped[0, 0, 0, 0] = next(t for t in range(4) if t not in chosen[0, 0, 0].tolist())
    swapped = swapped.sort(dim=-1).values
    assert not check(call_flex(q, k, v, block_mask=vsa.block_mask(swapped, S, TILE))).passed
