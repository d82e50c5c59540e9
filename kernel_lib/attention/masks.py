"""Mask patterns as FlexAttention `mask_mod`s: (b, h, q_idx, kv_idx) -> bool, True = attend.

Legend: B batch, H heads, S sequence length, D head dim; q_idx and kv_idx are token positions.
Numbers a pattern depends on (window, prefix length, document ids) are captured as tensors, so a
new value gives a new block mask but not a new compiled kernel (the FlexAttention blog's advice).
attention-gym `attn_gym/masks/` has causal, sliding window, prefix-LM, document, global+local,
Sparse VideoGen's spatial / temporal heads (svg.py), NATTEN in three token orders and JetSpec's
draft tree and draft training masks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def causal() -> MaskMod:
    """Each query sees itself and earlier keys."""

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return causal_mask


def sliding_window(window: Tensor) -> MaskMod:
    """Bidirectional local band: |q - kv| <= window."""

    def sliding_window_mask(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= window

    return sliding_window_mask


def causal_sliding_window(window: Tensor) -> MaskMod:
    """Causal band (Mistral-style): 0 <= q - kv <= window."""

    def causal_sliding_window_mask(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        return (distance >= 0) & (distance <= window)

    return causal_sliding_window_mask


def prefix_lm(prefix_len: Tensor) -> MaskMod:
    """Bidirectional over the first `prefix_len` keys, causal after (T5/PaLI prefix-LM)."""

    def prefix_lm_mask(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_len) | (q_idx >= kv_idx)

    return prefix_lm_mask


def same_document(document_ids: Tensor) -> MaskMod:
    """Packed (jagged) sequences: a query sees only keys of its own document. ids: (S,) int."""

    def same_document_mask(b, h, q_idx, kv_idx):
        return document_ids[q_idx] == document_ids[kv_idx]

    return same_document_mask


def dilated_window(window: Tensor, dilation: Tensor) -> MaskMod:
    """Causal dilated band: q - kv in {0, d, 2d, ..., window*d} (dilation 1 = causal window)."""

    def dilated_window_mask(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        in_band = (distance >= 0) & (distance <= window * dilation)
        return in_band & (distance % dilation == 0)

    return dilated_window_mask


def global_tokens(num_global: Tensor) -> MaskMod:
    """The first `num_global` tokens see everything and are seen by everything (Longformer)."""

    def global_tokens_mask(b, h, q_idx, kv_idx):
        return (q_idx < num_global) | (kv_idx < num_global)

    return global_tokens_mask


def causal_offset(offset: Tensor) -> MaskMod:
    """Bottom-right causal for Lq queries over Lk keys: query i sits at position i + offset
    (offset = Lk - Lq) and sees keys up to it (decode against a KV cache)."""

    def causal_offset_mask(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    return causal_offset_mask


def cross_document(q_document_ids: Tensor, kv_document_ids: Tensor) -> MaskMod:
    """Cross-attention over packed documents: a query sees only its own document's keys.
    q ids: (Lq,) int, kv ids: (Lk,) int."""

    def cross_document_mask(b, h, q_idx, kv_idx):
        return q_document_ids[q_idx] == kv_document_ids[kv_idx]

    return cross_document_mask


def keys_before(count: Tensor) -> MaskMod:
    """Every query sees the first `count` keys (a shared prefix)."""

    def keys_before_mask(b, h, q_idx, kv_idx):
        return kv_idx < count

    return keys_before_mask


def grid_neighbourhood(volume: Tensor, extents: tuple[Tensor, ...], radius: Tensor) -> MaskMod:
    """Neighbourhood attention on a grid of cells (NATTEN; sliding tiles when a cell is a tile).

    Token t lies in cell t // volume; cells are laid row-major over `extents` (outermost
    first). A query sees the keys whose cell is within `radius` cells, on every axis, of the
    query's window centre: its own cell clamped to [radius, extent - 1 - radius], so windows at
    the border keep their size instead of shrinking.
    """

    def grid_neighbourhood_mask(b, h, q_idx, kv_idx):
        q_cell, kv_cell = q_idx // volume, kv_idx // volume
        allowed = q_idx >= 0
        for extent in reversed(extents):
            centre = torch.minimum(torch.maximum(q_cell % extent, radius), extent - 1 - radius)
            allowed = allowed & ((centre - kv_cell % extent).abs() <= radius)
            q_cell, kv_cell = q_cell // extent, kv_cell // extent
        return allowed

    return grid_neighbourhood_mask


def reordered(mask: MaskMod, position: Tensor) -> MaskMod:
    """`mask` over positions with the tokens in another order: token t sits at position[t];
    position: (S,) int, a permutation."""

    def reordered_mask(b, h, q_idx, kv_idx):
        return mask(b, h, position[q_idx], position[kv_idx])

    return reordered_mask


def draft_tree(context_len: Tensor, enter: Tensor, leave: Tensor) -> MaskMod:
    """Tree attention over Lq draft tokens after `context_len` context keys: every draft sees the
    context, and key context_len + a when draft a is the query or one of its ancestors, i.e. the
    query's depth-first visit time lies within a's: enter[a] <= enter[q] < leave[a]. enter,
    leave: (Lq,) int (jetspec.visit_times)."""

    def draft_tree_mask(b, h, q_idx, kv_idx):
        node = (kv_idx - context_len).clamp(min=0)
        ancestor = (enter[node] <= enter[q_idx]) & (enter[q_idx] < leave[node])
        return (kv_idx < context_len) | ancestor

    return draft_tree_mask


def draft_blocks(context_len: Tensor, draft_len: Tensor, anchors: Tensor) -> MaskMod:
    """Drafter training over `context_len` context keys then the drafts, in blocks of
    `draft_len`: a draft of block q // draft_len sees the context up to its block's anchor and
    the earlier drafts of its own block. anchors: (blocks,) int, each < context_len."""

    def draft_blocks_mask(b, h, q_idx, kv_idx):
        block, draft = q_idx // draft_len, kv_idx - context_len
        own_block = (draft >= 0) & (draft <= q_idx) & (draft // draft_len == block)
        return (kv_idx <= anchors[block]) | own_block

    return draft_blocks_mask


def block_diffusion(half: Tensor, block_len: Tensor) -> MaskMod:
    """Block Diffusion training mask (BD3-LM, arXiv 2503.09573, section 3.1) over noised tokens
    [0, half) then their clean copies [half, S): noised tokens see their own noised block and
    earlier clean blocks; clean tokens see their own and earlier clean blocks (block-causal)."""

    def block_diffusion_mask(b, h, q_idx, kv_idx):
        q_noised, kv_noised = q_idx < half, kv_idx < half
        q_block = torch.where(q_noised, q_idx, q_idx - half) // block_len
        kv_block = torch.where(kv_noised, kv_idx, kv_idx - half) // block_len
        own_noised_block = q_noised & kv_noised & (q_block == kv_block)
        earlier_clean = ~kv_noised & torch.where(q_noised, q_block > kv_block, q_block >= kv_block)
        return own_noised_block | earlier_clean

    return block_diffusion_mask


def spatial_head(prompt_len: Tensor, width: Tensor) -> MaskMod:
    """Sparse VideoGen's spatial head (arXiv 2502.01776): prompt rows and columns attend
    everywhere; a video token sees the tokens within `width` positions, i.e. its own and
    neighbouring frames when width spans whole frames."""

    def spatial_head_mask(b, h, q_idx, kv_idx):
        prompt = (q_idx < prompt_len) | (kv_idx < prompt_len)
        return prompt | ((q_idx - kv_idx).abs() < width)

    return spatial_head_mask


def temporal_head(prompt_len: Tensor, tokens_per_frame: Tensor, width: Tensor) -> MaskMod:
    """Sparse VideoGen's temporal head: prompt rows and columns attend everywhere; a video token
    sees, in every frame, the tokens whose place in the frame is within `width` of its own."""

    def temporal_head_mask(b, h, q_idx, kv_idx):
        prompt = (q_idx < prompt_len) | (kv_idx < prompt_len)
        q_place = (q_idx - prompt_len) % tokens_per_frame
        kv_place = (kv_idx - prompt_len) % tokens_per_frame
        return prompt | ((q_place - kv_place).abs() < width)

    return temporal_head_mask


def per_head(chosen: Tensor, if_false: MaskMod, if_true: MaskMod) -> MaskMod:
    """Head h follows `if_true` where chosen[h], else `if_false`; chosen: (H,) bool. A block mask
    of this mod must be built per head (create_block_mask with H heads, not broadcast)."""

    def per_head_mask(b, h, q_idx, kv_idx):
        return torch.where(chosen[h], if_true(b, h, q_idx, kv_idx), if_false(b, h, q_idx, kv_idx))

    return per_head_mask


def all_of(*masks: MaskMod) -> MaskMod:
    """Intersection: attend where every mask attends."""
    if not masks:
        raise ValueError("masks=() must name at least one mask_mod")

    def all_of_mask(b, h, q_idx, kv_idx):
        allowed = masks[0](b, h, q_idx, kv_idx)
        for mask in masks[1:]:
            allowed = allowed & mask(b, h, q_idx, kv_idx)
        return allowed

    return all_of_mask


def any_of(*masks: MaskMod) -> MaskMod:
    """Union: attend where any mask attends."""
    if not masks:
        raise ValueError("masks=() must name at least one mask_mod")

    def any_of_mask(b, h, q_idx, kv_idx):
        allowed = masks[0](b, h, q_idx, kv_idx)
        for mask in masks[1:]:
            allowed = allowed | mask(b, h, q_idx, kv_idx)
        return allowed

    return any_of_mask


def as_index(value: int, device: torch.device | str) -> Tensor:
    """A 0-d int tensor to capture in a mask_mod (a Python int would be baked into the kernel)."""
    return torch.tensor(value, dtype=torch.int64, device=device)
