"""Every pattern's mask_mod/score_mod, evaluated densely, vs the independently built reference."""

import pytest
import torch
from hypothesis import given, settings

from kernel_lib.attention.patterns import (
    PATTERNS,
    REGISTERED,
    PatternConfig,
    build_pattern,
    document_lengths,
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
