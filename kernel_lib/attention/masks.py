"""Mask patterns as FlexAttention `mask_mod`s: (b, h, q_idx, kv_idx) -> bool, True = attend.

Legend: B batch, H heads, S sequence length, D head dim; q_idx and kv_idx are token positions.
Numbers a pattern depends on (window, prefix length, document ids) are captured as tensors, so a
new value gives a new block mask but not a new compiled kernel (the FlexAttention blog's advice).
attention-gym `attn_gym/masks/` has causal, sliding window, prefix-LM, document and global+local.
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
