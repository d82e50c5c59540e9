"""The pattern catalogue: one frozen config names a pattern and its numbers; build it for flex.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.attention import masks, mods

PATTERNS = (
    "full",  # no mask, no bias: the dense baseline every sparse pattern is compared with
    "causal",
    "sliding_window",
    "causal_sliding_window",
    "prefix_lm",
    "document",  # causal within each packed document
    "alibi",  # causal + ALiBi bias
    "relative_position_bias",
    "softcap",  # causal + tanh soft-capping
    "dilated",
    "global_local",  # Longformer: bidirectional window + global tokens
)


@dataclass(frozen=True)
class PatternConfig:
    """A pattern and the numbers it needs; fields a pattern does not use are ignored."""

    name: str
    window: int = 128  # band half-width in tokens (sliding, causal sliding, dilated, global_local)
    prefix_len: int = 256  # prefix_lm: keys every query may see
    num_docs: int = 4  # document: equal split of S, the last document takes the remainder
    doc_lengths: tuple[int, ...] = ()  # document: explicit lengths (sum S), overrides num_docs
    dilation: int = 2  # dilated: stride between attended keys
    num_global: int = 16  # global_local: leading tokens that attend / are attended everywhere
    softcap: float = 20.0  # softcap: the cap (Gemma-2 uses 50 on logits of larger models)
    max_distance: int = 128  # relative_position_bias: table covers offsets -M..M, clamped beyond
    seed: int = 0  # relative_position_bias: seeds the learned-table stand-in

    def __post_init__(self):
        if self.name not in PATTERNS:
            raise ValueError(f"pattern={self.name!r} is unknown; valid: {', '.join(PATTERNS)}")
        for field in ("window", "num_docs", "dilation", "max_distance"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")
        for field in ("prefix_len", "num_global"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 0")
        if self.softcap <= 0:
            raise ValueError(f"softcap={self.softcap} must be > 0")
        if any(length < 1 for length in self.doc_lengths):
            raise ValueError(f"doc_lengths={self.doc_lengths} must all be >= 1")

    @property
    def uses_mask(self) -> bool:
        return self.name not in ("full", "relative_position_bias")


class AttentionPattern(NamedTuple):
    """What flex_attention takes: a mask_mod (None = attend everywhere) and a score_mod."""

    name: str
    mask_mod: masks.MaskMod | None
    score_mod: mods.ScoreMod | None


def document_lengths(config: PatternConfig, seq_len: int) -> tuple[int, ...]:
    """Document lengths covering S tokens; ValueError if explicit lengths do not sum to S."""
    if config.doc_lengths:
        if sum(config.doc_lengths) != seq_len:
            raise ValueError(f"doc_lengths={config.doc_lengths} must sum to seq_len={seq_len}")
        return config.doc_lengths
    count = min(config.num_docs, seq_len)
    base = seq_len // count
    return (base,) * (count - 1) + (seq_len - base * (count - 1),)


def relative_position_table(config: PatternConfig, num_heads: int, device="cpu") -> Tensor:
    """A seeded stand-in for a learned (H, 2M + 1) bias table, fp32."""
    generator = torch.Generator().manual_seed(config.seed)
    table = torch.randn(num_heads, 2 * config.max_distance + 1, generator=generator)
    return table.to(device)


def build_pattern(
    config: PatternConfig, *, seq_len: int, num_heads: int, device: torch.device | str
) -> AttentionPattern:
    """The mask_mod / score_mod pair of `config` for sequences of S tokens and H heads."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len} must be >= 1")
    index = lambda value: masks.as_index(value, device)  # noqa: E731
    name = config.name
    mask_mod, score_mod = None, None
    if name in ("causal", "alibi", "softcap"):
        mask_mod = masks.causal()
    elif name == "sliding_window":
        mask_mod = masks.sliding_window(index(config.window))
    elif name == "causal_sliding_window":
        mask_mod = masks.causal_sliding_window(index(config.window))
    elif name == "prefix_lm":
        mask_mod = masks.prefix_lm(index(config.prefix_len))
    elif name == "document":
        lengths = torch.tensor(document_lengths(config, seq_len), device=device)
        ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
        mask_mod = masks.all_of(masks.causal(), masks.same_document(ids))
    elif name == "dilated":
        mask_mod = masks.dilated_window(index(config.window), index(config.dilation))
    elif name == "global_local":
        mask_mod = masks.any_of(
            masks.sliding_window(index(config.window)),
            masks.global_tokens(index(config.num_global)),
        )
    if name == "alibi":
        score_mod = mods.alibi(mods.alibi_slopes(num_heads, device))
    elif name == "relative_position_bias":
        table = relative_position_table(config, num_heads, device)
        score_mod = mods.relative_position_bias(table, config.max_distance)
    elif name == "softcap":
        score_mod = mods.softcap(config.softcap)
    return AttentionPattern(name, mask_mod, score_mod)


def materialise(
    config: PatternConfig, *, seq_len: int, num_heads: int
) -> tuple[Tensor, Tensor | None]:
    """What flex sees, evaluated densely on CPU: ((S, S) bool mask, (H, S, S) bias or None).

    Calls the pattern's own mask_mod/score_mod on broadcast index grids (for pictures and for
    testing the mods against the independently built dense references).
    """
    pattern = build_pattern(config, seq_len=seq_len, num_heads=num_heads, device="cpu")
    q_idx = torch.arange(seq_len)[:, None]
    kv_idx = torch.arange(seq_len)[None, :]
    zero = torch.tensor(0)
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool)
    if pattern.mask_mod is not None:
        mask = pattern.mask_mod(zero, zero, q_idx, kv_idx).expand(seq_len, seq_len).clone()
    if pattern.score_mod is None or config.name == "softcap":  # softcap is not a bias
        return mask, None
    zeros = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    heads = [
        pattern.score_mod(zeros, zero, torch.tensor(h), q_idx, kv_idx) for h in range(num_heads)
    ]
    return mask, torch.stack(heads)
