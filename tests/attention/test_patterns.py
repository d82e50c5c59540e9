"""Every pattern's mask_mod/score_mod, evaluated densely, vs the independently built reference."""

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from kernel_lib.attention.forms import document_lengths
from kernel_lib.attention.gym_forms import token_pixels
from kernel_lib.attention.patterns import (
    GYM_PATTERNS,
    PATTERNS,
    REGISTERED,
    PatternConfig,
    build_pattern,
    materialise,
)
from kernel_lib.attention.reference import dense_bias, dense_mask

from .conftest import pattern_cases


@settings(max_examples=150, deadline=None)
@given(pattern_cases())
def test_mods_match_dense_reference(case):
    config, seq_len, heads = case
    mask, bias = materialise(config, seq_len=seq_len, num_heads=heads)
    expected = dense_mask(config, seq_len)
    assert torch.equal(mask, expected), f"{config.name} mask differs at S={seq_len}"
    expected_bias = dense_bias(config, seq_len, heads)
    assert (bias is None) == (expected_bias is None)
    if bias is not None:
        error = float((bias - expected_bias).abs().max())
        assert error < 1e-5, f"{config.name} bias error {error:.2e} (fp32 slopes vs fp64)"


@pytest.mark.parametrize("name", list(PATTERNS))
def test_every_row_attends_somewhere(name):
    # flex returns 0 for a fully masked row and SDPA NaN: no pattern here may have one.
    config = PatternConfig(name, window=1, prefix_len=0, num_global=0)
    assert dense_mask(config, 33).any(dim=-1).all()


def test_dilation_one_is_causal_sliding_window():
    dilated = PatternConfig("dilated", window=5, dilation=1)
    band = PatternConfig("causal_sliding_window", window=5)
    assert torch.equal(dense_mask(dilated, 40), dense_mask(band, 40))


def test_relative_position_bias_is_not_a_no_op():
    _, bias = materialise(PatternConfig("relative_position_bias"), seq_len=16, num_heads=2)
    assert bias.abs().max() > 0.1  # the seed system's version returned the score unchanged


def test_document_lengths_split_and_check():
    assert document_lengths(PatternConfig("document", num_docs=3), 10) == (3, 3, 4)
    with pytest.raises(ValueError, match="doc_lengths"):
        document_lengths(PatternConfig("document", doc_lengths=(3, 4)), 10)


def test_unknown_pattern():
    with pytest.raises(ValueError, match="pattern='diagonal'"):
        PatternConfig("diagonal")


@pytest.mark.parametrize("field", ["window", "dilation", "num_docs", "max_distance"])
@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_sizes(field, value):
    with pytest.raises(ValueError, match=f"{field}={value}"):
        PatternConfig("sliding_window", **{field: value})


@pytest.mark.parametrize(
    "field, value", [("prefix_len", -1), ("num_global", -2), ("softcap", 0.0)]
)
def test_bad_numbers(field, value):
    with pytest.raises(ValueError, match=field):
        PatternConfig("prefix_lm", **{field: value})


def test_bad_seq_len():
    with pytest.raises(ValueError, match="seq_len=0"):
        build_pattern(PatternConfig("causal"), seq_len=0, num_heads=1, device="cpu")


@pytest.mark.parametrize("pattern", REGISTERED, ids=lambda p: p.name)
def test_registry_entry_is_consistent(pattern):
    assert PATTERNS[pattern.name] is pattern  # registered once, under its own name
    assert (pattern.dense_bias is None) or pattern.score_mod is not None
    assert not (pattern.softcapped and pattern.dense_bias is not None)
    if pattern.is_causal:  # SDPA's is_causal flag stands for the whole pattern
        assert pattern.score_mod is None
        assert torch.equal(dense_mask(PatternConfig(pattern.name), 9), torch.ones(9, 9).tril() > 0)


@st.composite
def gym_cases(draw):
    """(config, seq_len, heads) of an attention-gym family with odd grids, tiles and blocks."""
    seq_len = draw(st.integers(1, 90))
    config = PatternConfig(
        draw(st.sampled_from(GYM_PATTERNS)),
        grid_width=draw(st.integers(1, 13)),
        grid_height=draw(st.integers(1, 9)),
        tile_size=draw(st.integers(1, 4)),
        radius=draw(st.integers(0, 3)),
        block_len=draw(st.integers(1, 20)),
        prefix_len=draw(st.integers(0, seq_len + 2)),
        num_docs=draw(st.integers(1, 5)),
        sandwich_dim=draw(st.sampled_from([2, 7, 128])),
        seed=draw(st.integers(0, 3)),
    )
    return config, seq_len, draw(st.integers(1, 5))


@settings(max_examples=150, deadline=None)
@given(gym_cases())
def test_gym_mods_match_dense_reference_and_every_row_attends(case):
    config, seq_len, heads = case
    mask, bias = materialise(config, seq_len=seq_len, num_heads=heads)
    expected = dense_mask(config, seq_len)
    assert torch.equal(mask, expected), f"{config} mask differs at S={seq_len}"
    assert expected.any(dim=-1).all(), f"{config}: a query attends nothing at S={seq_len}"
    expected_bias = dense_bias(config, seq_len, heads)
    assert (bias is None) == (expected_bias is None)
    if bias is not None:
        scale = expected_bias.abs().max().clamp(min=1e-12)  # all 0: graphormer_edges at S=1
        error = float((bias - expected_bias).abs().max() / scale)
        assert error < 1e-5, f"{config.name} bias error {error:.2e} (fp32 table vs fp64)"


def test_neighbourhood_window_is_clamped_at_the_border():
    # 5 x 5 canvas, radius 1: the corner query's 3 x 3 window is shifted inside, not cut.
    config = PatternConfig("neighbourhood_2d", grid_width=5, radius=1)
    corner = dense_mask(config, 25)[0].view(5, 5)
    expected = torch.zeros(5, 5, dtype=torch.bool)
    expected[:3, :3] = True
    assert torch.equal(corner, expected)
    centre = dense_mask(config, 25)[12].view(5, 5)
    assert torch.equal(centre, expected.roll((1, 1), (0, 1)))


def test_sliding_tiles_attend_whole_tiles():
    # 8 x 8 canvas of 2 x 2 tiles (tile-major tokens), radius 0: a query sees its own tile only.
    config = PatternConfig("sliding_tiles_2d", grid_width=8, tile_size=2, radius=0)
    tiles = torch.arange(64) // 4
    assert torch.equal(dense_mask(config, 64), tiles[:, None] == tiles[None, :])


def test_block_diffusion_mask_by_its_quadrants():
    config = PatternConfig("block_diffusion", block_len=2)
    mask = dense_mask(config, 8).int()  # noised 0-3, clean 4-7, blocks of 2
    expected = torch.tensor([
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [0, 0, 1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1, 1],
    ])  # fmt: skip
    assert torch.equal(mask, expected)


def test_shared_prefix_continuations_see_the_prefix_not_each_other():
    config = PatternConfig("shared_prefix", prefix_len=3, num_docs=2)
    mask = dense_mask(config, 7)  # prefix 0-2, continuations 3-4 and 5-6
    assert mask[6, :3].all() and not mask[6, 3:5].any() and mask[6, 5:].all()
    assert torch.equal(mask[:3, :3], torch.ones(3, 3, dtype=torch.bool).tril())


def test_sandwich_bias_at_offset_zero_is_half_the_dimension_times_the_slope():
    config = PatternConfig("sandwich", sandwich_dim=8)
    bias = dense_bias(config, 5, 2)
    assert torch.allclose(bias[:, 2, 2], torch.tensor([4 * 2 / 8, 4 * 2 / 16], dtype=bias.dtype))
    assert torch.allclose(bias, bias.transpose(-1, -2))  # depends on |q - kv| only

    offsets = torch.arange(5)[None, :] - torch.arange(5)[:, None]
    freqs = 10000.0 ** (-2.0 * torch.arange(4, dtype=torch.float64) / 8)
    direct = torch.cos(offsets.abs()[..., None] * freqs).sum(-1)  # the paper's sum per pair
    assert torch.allclose(bias[0], direct / 4, atol=1e-12)


def test_a_wrong_neighbourhood_radius_fails_the_comparison():
    # teeth: the flex-side mask built with another radius differs from the reference
    config = PatternConfig("neighbourhood_2d", grid_width=7, radius=2)
    other = PatternConfig("neighbourhood_2d", grid_width=7, radius=1)
    mask, _ = materialise(other, seq_len=40, num_heads=1)
    assert not torch.equal(mask, dense_mask(config, 40))


def test_sandwich_reference_is_fp64_throughout():
    # slope 4 / (8 * 3) = 1/6 at offset 0 (d/2 = 64 cosines of 0): fp32 slopes gave 10.666666984
    assert float(dense_bias(PatternConfig("sandwich"), 1, 4)[2, 0, 0]) == 64 / 6


@pytest.mark.parametrize(
    "order, width, seq_len, expected",
    [  # a 4-wide canvas of 3 rows: Z curve over 2 x 2 quads (column bit lowest), then 2 x 2 tiles
        ("morton", 4, 12, [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11]),
        ("tiled", 4, 12, [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11]),
        ("tiled", 5, 13, [0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12]),  # ragged tiles and row
        ("morton", 3, 9, [0, 1, 3, 4, 2, 5, 6, 7, 8]),
    ],
)
def test_token_orders(order, width, seq_len, expected):
    config = PatternConfig(f"natten_{order}", grid_width=width, tile_size=2)
    assert token_pixels(config, seq_len, order).tolist() == expected


@pytest.mark.parametrize("order", ["tiled", "morton"])
def test_reordered_natten_is_neighbourhood_2d_renumbered(order):
    config = PatternConfig(f"natten_{order}", grid_width=7, tile_size=3, radius=1)
    row_major = dense_mask(PatternConfig("neighbourhood_2d", grid_width=7, radius=1), 40)
    pixels = token_pixels(config, 40, order)
    assert torch.equal(dense_mask(config, 40), row_major[pixels][:, pixels])
    assert not torch.equal(dense_mask(config, 40), row_major)
