"""Speculative decoding's two masks after JetSpec: verifying a draft tree against a KV cache, and
training a drafter on many anchors at once. Both have Lq draft queries over Lk keys: the context
(Lk - Lq tokens), then the Lq drafts, so query i sits at key position Lk - Lq + i.

Legend: Lq draft tokens (queries), Lk keys, C = Lk - Lq context tokens, L draft tokens per anchor
(PatternConfig.draft_len). The tree and the anchors are seeded stand-ins (PatternConfig.seed) for
what a drafter proposes and what a training step samples. Each mask is built twice from the same
tree or anchors: the flex mask_mod (depth-first visit times, index arithmetic) and the dense
reference (a walk up every node's ancestors, slices per block).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kernel_lib.attention import masks


def draft_tree(num_nodes: int, seed: int) -> list[int]:
    """Each draft node's parent: node i hangs under a node drawn uniformly from -1 (the last
    context token, i.e. a first draft) and 0 .. i - 1, so parents precede their children."""
    draws = torch.rand(num_nodes, generator=torch.Generator().manual_seed(seed)).tolist()
    return [int(draw * (node + 1)) - 1 for node, draw in enumerate(draws)]


def visit_times(parents: list[int]) -> tuple[list[int], list[int]]:
    """(enter, leave) of a depth-first walk of the forest: a is an ancestor of (or is) i exactly
    when enter[a] <= enter[i] < leave[a]."""
    children: list[list[int]] = [[] for _ in parents]
    roots = []
    for node, parent in enumerate(parents):
        (children[parent] if parent >= 0 else roots).append(node)
    enter, leave, clock = [0] * len(parents), [0] * len(parents), 0
    stack = [(root, False) for root in reversed(roots)]
    while stack:
        node, done = stack.pop()
        if done:
            leave[node] = clock
            continue
        enter[node], clock = clock, clock + 1
        stack.append((node, True))
        stack += [(child, False) for child in reversed(children[node])]
    return enter, leave


def tree_mask_mod(q_len: int, kv_len: int, seed: int, device: str) -> masks.MaskMod:
    """The draft tree's mask_mod (tree_reference's definition)."""
    enter, leave = (torch.tensor(t, device=device) for t in visit_times(draft_tree(q_len, seed)))
    return masks.draft_tree(masks.as_index(kv_len - q_len, device), enter, leave)


def tree_reference(q_len: int, kv_len: int, seed: int) -> Tensor:
    """(Lq, Lk) bool: draft i sees the whole context and the drafts on its path to the root,
    itself included (tree attention: SpecInfer, Medusa, JetSpec's verification)."""
    context, parents = kv_len - q_len, draft_tree(q_len, seed)
    mask = torch.zeros(q_len, kv_len, dtype=torch.bool)
    mask[:, :context] = True
    for node in range(q_len):
        ancestor = node
        while ancestor >= 0:
            mask[node, context + ancestor] = True
            ancestor = parents[ancestor]
    return mask


def draft_anchors(q_len: int, kv_len: int, draft_len: int, seed: int) -> Tensor:
    """(ceil(Lq / L),) int64: each draft block's anchor, the last context token it may read,
    drawn uniformly from [0, C) (seeded) and sorted; -1 when there is no context."""
    blocks, context = math.ceil(q_len / draft_len), kv_len - q_len
    if context == 0:
        return torch.full((blocks,), -1)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(context, (blocks,), generator=generator).sort().values


def training_mask_mod(
    q_len: int, kv_len: int, draft_len: int, seed: int, device: str
) -> masks.MaskMod:
    """The draft-training mask_mod (training_reference's definition)."""
    anchors = draft_anchors(q_len, kv_len, draft_len, seed).to(device)
    return masks.draft_blocks(
        masks.as_index(kv_len - q_len, device), masks.as_index(draft_len, device), anchors
    )


def training_reference(q_len: int, kv_len: int, draft_len: int, seed: int) -> Tensor:
    """(Lq, Lk) bool: the drafts come in blocks of L, block b predicting the tokens after its
    anchor a_b; a draft sees the context up to a_b (inclusive) and its block's drafts up to
    itself (causal), no other block."""
    context = kv_len - q_len
    mask = torch.zeros(q_len, kv_len, dtype=torch.bool)
    for block, anchor in enumerate(draft_anchors(q_len, kv_len, draft_len, seed).tolist()):
        start, end = block * draft_len, min((block + 1) * draft_len, q_len)
        mask[start:end, : anchor + 1] = True
        own = torch.ones(end - start, end - start, dtype=torch.bool).tril()
        mask[start:end, context + start : context + end] = own
    return mask
