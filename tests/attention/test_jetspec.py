"""JetSpec's draft tree and draft training masks (Lq queries over Lk keys): the mask_mods
against the dense references on random odd lengths, both definitions on hand-checked examples,
the length rules, and compiled flex against the fp64 reference, with teeth (one block of the
BlockMask dropped fails the check)."""

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from kernel_lib.attention import jetspec, rectangular
from kernel_lib.attention.checks import forward_check
from kernel_lib.attention.flex import call_flex
from kernel_lib.attention.patterns import SPEC_PATTERNS, PatternConfig, materialise
from kernel_lib.attention.reference import dense_block_sparsity, dense_mask

from .conftest import qkv_for, without_block

LQ, LK, BLOCK = 37, 200, 32  # odd lengths, neither a multiple of the block


@settings(max_examples=120, deadline=None)
@given(
    name=st.sampled_from(SPEC_PATTERNS),
    q_len=st.integers(1, 60),
    context=st.integers(0, 50),
    draft_len=st.integers(1, 9),
    seed=st.integers(0, 3),
)
def test_mask_mods_match_the_references_and_every_draft_attends(
    name, q_len, context, draft_len, seed
):
    config = PatternConfig(name, draft_len=draft_len, seed=seed)
    kv_len = q_len + context
    mask, bias = materialise(config, seq_len=q_len, num_heads=1, kv_len=kv_len)
    expected = dense_mask(config, q_len, kv_len)
    assert bias is None and torch.equal(mask, expected), f"{config} at Lq={q_len}, Lk={kv_len}"
    assert expected[torch.arange(q_len), context + torch.arange(q_len)].all()  # itself


def test_tree_draft_sees_the_context_and_its_ancestors_only():
    parents = jetspec.draft_tree(6, seed=0)
    assert all(-1 <= p < i for i, p in enumerate(parents))
    mask = dense_mask(PatternConfig("jetspec_tree"), 6, 10)  # context 0-3, drafts 4-9
    for node in range(6):
        ancestors, a = set(), node
        while a >= 0:
            ancestors.add(a)
            a = parents[a]
        assert mask[node, :4].all()
        assert {int(j) for j in mask[node, 4:].nonzero()} == ancestors


def test_visit_times_nest_subtrees():
    enter, leave = jetspec.visit_times([-1, 0, 0, 1, -1])  # 0 -> {1 -> 3, 2}, 4
    assert (enter, leave) == ([0, 1, 3, 2, 4], [4, 3, 4, 3, 5])


def test_training_blocks_read_up_to_their_anchor_and_their_own_drafts():
    config = PatternConfig("jetspec_training", draft_len=3, seed=1)
    anchors = jetspec.draft_anchors(7, 19, 3, seed=1).tolist()  # 3 blocks, context 12
    assert anchors == sorted(anchors) and all(0 <= a < 12 for a in anchors)
    mask = dense_mask(config, 7, 19).int()
    for query in range(7):
        block, anchor = query // 3, anchors[query // 3]
        expected = [int(j <= anchor) for j in range(12)]
        expected += [int(block * 3 <= d <= query) for d in range(7)]
        assert mask[query].tolist() == expected, query


def test_no_context_leaves_the_drafts_alone():
    assert (jetspec.draft_anchors(5, 5, 2, seed=0) == -1).all()
    mask = dense_mask(PatternConfig("jetspec_training", draft_len=2), 5, 5)
    assert torch.equal(
        mask.int(), torch.block_diag(*[torch.ones(2, 2).tril()] * 2, torch.ones(1, 1)).int()
    )


def test_lengths_are_checked():
    with pytest.raises(ValueError, match="seq_len=9 must be <= kv_len=8"):
        dense_mask(PatternConfig("jetspec_tree"), 9, 8)
    with pytest.raises(ValueError, match="causal is defined on S x S"):
        dense_mask(PatternConfig("causal"), 4, 8)


@pytest.mark.parametrize("name", SPEC_PATTERNS)
def test_compiled_flex_passes_and_a_dropped_block_fails(name):
    config = PatternConfig(name, draft_len=5)
    q = qkv_for(LQ, 3)[0]
    _, k, v = qkv_for(LK, 3)
    check = forward_check(config, q, k, v)
    assert check(rectangular.flex_rectangular(q, k, v, config, block_size=BLOCK)).passed
    mask = rectangular.block_mask_for(config, LQ, LK, "cpu", BLOCK)
    assert not check(call_flex(q, k, v, block_mask=without_block(mask))).passed  # teeth
    got = rectangular.block_sparsity(config, LQ, LK, block_size=BLOCK)
    assert got == pytest.approx(dense_block_sparsity(config, LQ, BLOCK, LK))
