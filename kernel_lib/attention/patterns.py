"""The pattern registry: each attention pattern is one `Pattern`, registered once in PATTERNS.

Legend: B batch, H heads, S sequence length, D head dim; R query rows of a (row-sampled) check;
Lq, Lk query and key lengths (S = Lq = Lk but for the `rectangular` patterns, whose queries are
the last Lq of Lk positions).
A pattern carries both of its forms: what flex runs (mask_mod / score_mod builders, from the
primitives in masks.py and mods.py) and its dense reference (an (Lq, Lk) mask built from matrix
diagonals, slices and plain loops over its definition, an additive (H, R, Lk) fp64 bias), plus how
SDPA and FlashAttention express it. The forms live in forms.py (the core patterns) and
gym_forms.py (attention-gym's families). Adding a pattern is its forms, one `Pattern(...)` in
REGISTERED below and its test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.attention import forms, gym_forms, jetspec, masks, mods


@dataclass(frozen=True)
class PatternConfig:
    """A pattern's name and the numbers it needs; fields a pattern does not use are ignored."""

    name: str
    window: int = 128  # band half-width in tokens (sliding, causal sliding, dilated, global_local)
    prefix_len: int = 256  # prefix_lm: keys every query may see
    num_docs: int = 4  # document: equal split of S, the last document takes the remainder
    doc_lengths: tuple[int, ...] = ()  # document: explicit lengths (sum S), overrides num_docs
    dilation: int = 2  # dilated: stride between attended keys
    num_global: int = 16  # global_local: leading tokens that attend / are attended everywhere
    softcap: float = 20.0  # softcap: the cap (Gemma-2 uses 50 on logits of larger models)
    max_distance: int = 128  # relative_position_bias: table covers offsets -M..M, clamped beyond
    seed: int = 0  # seeds the stand-ins: learned tables, graphs, draft trees, anchors
    grid_width: int = 32  # neighbourhood_2d, natten_*, sliding_tiles_*: tokens per image row
    grid_height: int = 16  # sliding_tiles_3d: token rows per video frame
    tile_size: int = 4  # sliding_tiles_*, natten_tiled: tile edge in tokens (tile-major order)
    radius: int = 2  # neighbourhood (tokens) / sliding tiles (tiles) each side of the centre
    block_len: int = 64  # block_diffusion: diffusion block length (tokens)
    sandwich_dim: int = 128  # sandwich: d-bar, the sinusoid dimension (the paper's 128)
    draft_len: int = 8  # jetspec_training: draft tokens per anchor

    def __post_init__(self):
        if self.name not in PATTERNS:
            raise ValueError(f"pattern={self.name!r} is unknown; valid: {', '.join(PATTERNS)}")
        for field in (
            "window",
            "num_docs",
            "dilation",
            "max_distance",
            "grid_width",
            "grid_height",
            "tile_size",
            "block_len",
            "draft_len",
        ):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")
        if self.sandwich_dim < 2:
            raise ValueError(f"sandwich_dim={self.sandwich_dim} must be >= 2")
        for field in ("prefix_len", "num_global", "radius"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 0")
        if self.softcap <= 0:
            raise ValueError(f"softcap={self.softcap} must be > 0")
        if any(length < 1 for length in self.doc_lengths):
            raise ValueError(f"doc_lengths={self.doc_lengths} must all be >= 1")

    @property
    def pattern(self) -> Pattern:
        return PATTERNS[self.name]


# Every form takes Lq and Lk; a pattern that is not `rectangular` is only ever given Lq = Lk
# (check_lengths) and reads its S from Lk.
MaskBuilder = Callable[[PatternConfig, int, int, str], masks.MaskMod]  # (config, Lq, Lk, device)
# (config, H, Lq, Lk, device)
ScoreBuilder = Callable[[PatternConfig, int, int, int, str], mods.ScoreMod]
DenseMask = Callable[[PatternConfig, int, int], Tensor]  # (config, Lq, Lk) -> (Lq, Lk) bool
# (config, H, query rows (R,), Lk) -> (H, R, Lk) fp64
DenseBias = Callable[[PatternConfig, int, Tensor, int], Tensor]


@dataclass(frozen=True)
class Pattern:
    """One attention pattern in every form the benchmark needs."""

    name: str
    dense_mask: DenseMask  # the independent reference of mask_mod
    mask_mod: MaskBuilder | None = None  # None: attend everywhere (no BlockMask)
    score_mod: ScoreBuilder | None = None
    dense_bias: DenseBias | None = None  # the reference of an additive score_mod, fp64
    softcapped: bool = False  # the score_mod is config.softcap * tanh(score / cap), not a bias
    is_causal: bool = False  # the mask is exactly causal with no score_mod: SDPA's is_causal flag
    flash: Callable[[PatternConfig], dict] | None = None  # FlashAttention kwargs; None: no form
    rectangular: bool = False  # defined for Lq <= Lk (else S x S only)


def check_lengths(config: PatternConfig, q_len: int, kv_len: int) -> None:
    """ValueError unless Lq, Lk >= 1 and Lq = Lk (Lq <= Lk for a rectangular pattern)."""
    if q_len < 1 or kv_len < 1:
        raise ValueError(f"seq_len={q_len} and kv_len={kv_len} must be >= 1")
    if config.pattern.rectangular and q_len > kv_len:
        raise ValueError(f"{config.name}: seq_len={q_len} must be <= kv_len={kv_len}")
    if not config.pattern.rectangular and q_len != kv_len:
        raise ValueError(
            f"{config.name} is defined on S x S: seq_len={q_len} must equal kv_len={kv_len}"
        )


REGISTERED = (
    # no mask, no bias: the dense baseline every sparse pattern is compared with
    Pattern("full", forms.full, flash=lambda c: {}),
    Pattern(
        "causal", forms.causal, forms.causal_mod, is_causal=True, flash=lambda c: {"causal": True}
    ),
    Pattern(
        "sliding_window",
        lambda c, _, S: forms.band(S, c.window, c.window),
        lambda c, _, S, dev: masks.sliding_window(forms.index(c.window, dev)),
        flash=lambda c: {"window_size": (c.window, c.window)},
    ),
    Pattern(  # Mistral-style causal band
        "causal_sliding_window",
        lambda c, _, S: forms.band(S, c.window, 0),
        lambda c, _, S, dev: masks.causal_sliding_window(forms.index(c.window, dev)),
        flash=lambda c: {"causal": True, "window_size": (c.window, 0)},
    ),
    Pattern(
        "prefix_lm",
        forms.prefix_lm,
        lambda c, _, S, dev: masks.prefix_lm(forms.index(c.prefix_len, dev)),
    ),
    Pattern("document", forms.document, forms.document_mod),  # causal within each packed document
    Pattern(  # causal + ALiBi bias
        "alibi",
        forms.causal,
        forms.causal_mod,
        lambda c, H, _, S, dev: mods.alibi(mods.alibi_slopes(H, dev)),
        forms.alibi_bias,
    ),
    Pattern(
        "relative_position_bias",
        forms.full,
        score_mod=lambda c, H, _, S, dev: mods.relative_position_bias(
            forms.relative_position_table(c, H, dev), c.max_distance
        ),
        dense_bias=forms.relative_bias,
    ),
    Pattern(  # causal + tanh soft-capping
        "softcap",
        forms.causal,
        forms.causal_mod,
        lambda c, H, _, S, dev: mods.softcap(c.softcap),
        softcapped=True,
        flash=lambda c: {"causal": True, "softcap": c.softcap},
    ),
    Pattern(
        "dilated",
        forms.dilated,
        lambda c, _, S, dev: masks.dilated_window(
            forms.index(c.window, dev), forms.index(c.dilation, dev)
        ),
    ),
    # Longformer: bidirectional window + global tokens
    Pattern("global_local", forms.global_local, forms.global_local_mod),
)
# attention-gym's further families, run in their own section (each is one more flex compile)
GYM_REGISTERED = (
    Pattern(
        "neighbourhood_2d", gym_forms.neighbourhood(1), gym_forms.neighbourhood_mod(1)
    ),  # NATTEN
    # NATTEN with the tokens numbered tile by tile / along the Z curve (token_pixels)
    Pattern("natten_tiled", gym_forms.natten_order("tiled"), gym_forms.natten_order_mod("tiled")),
    Pattern(
        "natten_morton", gym_forms.natten_order("morton"), gym_forms.natten_order_mod("morton")
    ),
    Pattern(
        "sliding_tiles_2d", gym_forms.neighbourhood(2), gym_forms.neighbourhood_mod(2)
    ),  # STA, images
    Pattern(
        "sliding_tiles_3d", gym_forms.neighbourhood(3), gym_forms.neighbourhood_mod(3)
    ),  # STA, video
    # one causal prompt, continuations that see all of it and themselves causally
    Pattern("shared_prefix", gym_forms.shared_prefix, gym_forms.shared_prefix_mod),
    Pattern(
        "block_diffusion", gym_forms.block_diffusion, gym_forms.block_diffusion_mod
    ),  # BD3-LM training
    # nodes of a seeded small-world graph, biased by hop distance (max_distance: M)
    Pattern(
        "graphormer",
        forms.full,
        score_mod=gym_forms.graphormer_mod,
        dense_bias=gym_forms.graphormer_bias,
    ),
    # the same graph, biased by the types of the edges on the path (Graphormer's edge encoding)
    Pattern(
        "graphormer_edges",
        forms.full,
        score_mod=gym_forms.graphormer_edges_mod,
        dense_bias=gym_forms.graphormer_edges_bias,
    ),
    Pattern(  # causal + sandwich bias
        "sandwich",
        forms.causal,
        forms.causal_mod,
        lambda c, H, _, S, dev: mods.sandwich(
            mods.sandwich_table(S, c.sandwich_dim, dev), gym_forms.sandwich_slopes(H, dev)
        ),
        gym_forms.sandwich_bias,
    ),
)
# JetSpec's speculative-decoding masks: Lq drafts over the context and themselves (jetspec.py),
# run in bench_gym's `jetspec` section
SPEC_REGISTERED = (
    Pattern(
        "jetspec_tree",
        lambda c, Lq, Lk: jetspec.tree_reference(Lq, Lk, c.seed),
        lambda c, Lq, Lk, dev: jetspec.tree_mask_mod(Lq, Lk, c.seed, dev),
        rectangular=True,
    ),
    Pattern(
        "jetspec_training",
        lambda c, Lq, Lk: jetspec.training_reference(Lq, Lk, c.draft_len, c.seed),
        lambda c, Lq, Lk, dev: jetspec.training_mask_mod(Lq, Lk, c.draft_len, c.seed, dev),
        rectangular=True,
    ),
)
GYM_PATTERNS = tuple(p.name for p in GYM_REGISTERED)
SPEC_PATTERNS = tuple(p.name for p in SPEC_REGISTERED)
REGISTERED += GYM_REGISTERED + SPEC_REGISTERED
PATTERNS: dict[str, Pattern] = {p.name: p for p in REGISTERED}
assert len(PATTERNS) == len(REGISTERED), "two patterns share a name"


class FlexMods(NamedTuple):
    """What flex_attention takes: a mask_mod (None = attend everywhere) and a score_mod."""

    name: str
    mask_mod: masks.MaskMod | None
    score_mod: mods.ScoreMod | None


def build_pattern(
    config: PatternConfig,
    *,
    seq_len: int,
    num_heads: int,
    device: torch.device | str,
    kv_len: int | None = None,
) -> FlexMods:
    """The mask_mod / score_mod pair of `config` for Lq = seq_len queries over Lk = kv_len keys
    (default: seq_len) and H heads."""
    kv_len = seq_len if kv_len is None else kv_len
    check_lengths(config, seq_len, kv_len)
    pattern, device = config.pattern, str(device)
    mask_mod = pattern.mask_mod(config, seq_len, kv_len, device) if pattern.mask_mod else None
    score_mod = None
    if pattern.score_mod:
        score_mod = pattern.score_mod(config, num_heads, seq_len, kv_len, device)
    return FlexMods(config.name, mask_mod, score_mod)


def materialise(
    config: PatternConfig, *, seq_len: int, num_heads: int, kv_len: int | None = None
) -> tuple[Tensor, Tensor | None]:
    """What flex sees, evaluated densely on CPU: ((Lq, Lk) bool mask, (H, Lq, Lk) bias or None),
    Lq = seq_len, Lk = kv_len (default: seq_len).

    Calls the pattern's own mask_mod/score_mod on broadcast index grids (for pictures and for
    testing the mods against the independently built dense references).
    """
    kv_len = seq_len if kv_len is None else kv_len
    flex_mods = build_pattern(
        config, seq_len=seq_len, num_heads=num_heads, device="cpu", kv_len=kv_len
    )
    q_idx = torch.arange(seq_len)[:, None]
    kv_idx = torch.arange(kv_len)[None, :]
    zero = torch.tensor(0)
    mask = torch.ones(seq_len, kv_len, dtype=torch.bool)
    if flex_mods.mask_mod is not None:
        mask = flex_mods.mask_mod(zero, zero, q_idx, kv_idx).expand(seq_len, kv_len).clone()
    if flex_mods.score_mod is None or config.pattern.softcapped:  # soft-capping is not a bias
        return mask, None
    zeros = torch.zeros(seq_len, kv_len, dtype=torch.float64)
    heads = [
        flex_mods.score_mod(zeros, zero, torch.tensor(h), q_idx, kv_idx) for h in range(num_heads)
    ]
    return mask, torch.stack(heads)
