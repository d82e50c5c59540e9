"""Sparse VideoGen's spatial/temporal heads: the per-head mask_mod against its Kronecker-product
reference on odd layouts, flex's per-head block sparsity against the dense count, compiled flex
against the fp64 reference, and a check with teeth (heads' kinds swapped fails)."""

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from kernel_lib.attention import temporal_heads
from kernel_lib.attention.checks import tolerance
from kernel_lib.attention.reference import (
    attention_reference,
    mask_block_sparsity,
    temporal_heads_mask,
)
from kernel_lib.attention.temporal_heads import VideoLayout
from kernel_lib.checks import against
from tests.attention.conftest import qkv_for

LAYOUT = VideoLayout.fit(200, prompt_len=13, frames=6, width=2)  # 17 + 6 x 31: odd everywhere
HEADS, BLOCK = 3, 64


def _mods_mask(layout, num_heads):
    mod = temporal_heads.mask_mod(layout, num_heads, "cpu")
    q_idx, kv_idx = torch.arange(layout.seq_len)[:, None], torch.arange(layout.seq_len)[None]
    zero = torch.tensor(0)
    return torch.stack([mod(zero, torch.tensor(h), q_idx, kv_idx) for h in range(num_heads)])


@settings(max_examples=40, deadline=None)
@given(
    prompt=st.integers(0, 9),
    frames=st.integers(1, 5),
    per_frame=st.integers(1, 9),
    width=st.integers(1, 6),
    heads=st.integers(1, 4),
)
def test_mask_mod_matches_the_kronecker_reference(prompt, frames, per_frame, width, heads):
    layout = VideoLayout(prompt, frames, per_frame, width)
    assert torch.equal(_mods_mask(layout, heads), temporal_heads_mask(layout, heads))


def test_heads_differ_and_follow_svg_widths():
    mask = temporal_heads_mask(LAYOUT, HEADS)
    P, T = LAYOUT.prompt_len, LAYOUT.tokens_per_frame
    assert torch.equal(mask[0], mask[2]) and not torch.equal(mask[0], mask[1])
    query = P + 3 * T + 5  # frame 3, place 5
    assert mask[0, query, query - 2 * T + 1] and not mask[0, query, query - 2 * T]
    assert mask[1, query, P + 5] and mask[1, query, P + 5 + 9] and not mask[1, query, P + 5 + 10]
    assert mask[:, :P].all() and mask[:, :, :P].all()


def test_fit_keeps_every_token_and_rejects_too_short():
    assert (LAYOUT.seq_len, LAYOUT.prompt_len, LAYOUT.tokens_per_frame) == (200, 14, 31)
    with pytest.raises(ValueError, match="frames"):
        VideoLayout.fit(10, prompt_len=8, frames=3, width=1)
    with pytest.raises(ValueError, match="width"):
        VideoLayout(0, 1, 1, 0)


def test_flex_block_sparsity_per_head_matches_the_dense_count():
    dense = temporal_heads_mask(LAYOUT, HEADS)
    for heads in (slice(None), slice(0, HEADS, 2), slice(1, HEADS, 2)):
        got = temporal_heads.block_sparsity(LAYOUT, HEADS, block_size=32, heads=heads)
        assert got == pytest.approx(mask_block_sparsity(dense[heads], 32))


def _check(q, k, v):
    return against(
        lambda: attention_reference(q, k, v, mask=temporal_heads_mask(LAYOUT, HEADS)),
        reference="fp64 temporal heads",
        tolerance=tolerance("forward", "float32"),
    )


def test_flex_matches_the_fp64_reference():
    q, k, v = qkv_for(LAYOUT.seq_len, HEADS)
    check = _check(q, k, v)(temporal_heads.flex_temporal_heads(q, k, v, LAYOUT, block_size=BLOCK))
    assert check.passed, check


def test_check_has_teeth_heads_kinds_swapped(monkeypatch):
    q, k, v = qkv_for(LAYOUT.seq_len, HEADS)
    monkeypatch.setattr(
        temporal_heads, "temporal", lambda H, device="cpu": torch.arange(H) % 2 == 0
    )
    temporal_heads.block_mask_for.cache_clear()
    try:
        out = temporal_heads.flex_temporal_heads(q, k, v, LAYOUT, block_size=BLOCK)
    finally:
        temporal_heads.block_mask_for.cache_clear()
    assert not _check(q, k, v)(out).passed


def test_wrong_length_is_refused():
    q, k, v = qkv_for(LAYOUT.seq_len - 1, HEADS)
    with pytest.raises(ValueError, match="seq_len"):
        temporal_heads.flex_temporal_heads(q, k, v, LAYOUT)
