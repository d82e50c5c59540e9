"""The pattern registry: each attention pattern is one `Pattern`, registered once in PATTERNS.

Legend: B batch, H heads, S sequence length, D head dim; R query rows of a (row-sampled) check.
A pattern carries both of its forms: what flex runs (mask_mod / score_mod builders, from the
primitives in masks.py and mods.py) and its dense reference (an (S, S) mask built from matrix
diagonals and slices, an additive (H, R, S) bias), plus how SDPA and FlashAttention express it.
Adding a pattern is one `Pattern(...)` in REGISTERED below and its test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.attention import graph, masks, mods


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
    seed: int = 0  # relative_position_bias: seeds the learned-table stand-in
    grid_width: int = 32  # neighbourhood_2d, sliding_tiles_*: tokens per image row (row-major)
    grid_height: int = 16  # sliding_tiles_3d: token rows per video frame
    tile_size: int = 4  # sliding_tiles_*: tile edge in tokens (tokens ordered tile by tile)
    radius: int = 2  # neighbourhood (tokens) / sliding tiles (tiles) each side of the centre
    block_len: int = 64  # block_diffusion: diffusion block length (tokens)
    sandwich_dim: int = 128  # sandwich: d-bar, the sinusoid dimension (the paper's 128)

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


MaskBuilder = Callable[[PatternConfig, int, str], masks.MaskMod]  # (config, S, device)
ScoreBuilder = Callable[[PatternConfig, int, int, str], mods.ScoreMod]  # (config, H, S, device)
DenseMask = Callable[[PatternConfig, int], Tensor]  # (config, S) -> (S, S) bool
# (config, H, offsets j - i: (R, S)) -> (H, R, S)
DenseBias = Callable[[PatternConfig, int, Tensor], Tensor]


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


def band(seq_len: int, below: int, above: int) -> Tensor:
    """Keys j with -below <= j - i <= above, as an (S, S) bool matrix."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril(diagonal=above) & ones.triu(diagonal=-below)


def _full(config: PatternConfig, seq_len: int) -> Tensor:
    return torch.ones(seq_len, seq_len, dtype=torch.bool)


def _causal(config: PatternConfig, seq_len: int) -> Tensor:
    return band(seq_len, seq_len, 0)


def _causal_mod(config: PatternConfig, seq_len: int, device: str) -> masks.MaskMod:
    return masks.causal()


def _index(value: int, device: str) -> Tensor:
    return masks.as_index(value, device)


def document_lengths(config: PatternConfig, seq_len: int) -> tuple[int, ...]:
    """Document lengths covering S tokens; ValueError if explicit lengths do not sum to S."""
    if config.doc_lengths:
        if sum(config.doc_lengths) != seq_len:
            raise ValueError(f"doc_lengths={config.doc_lengths} must sum to seq_len={seq_len}")
        return config.doc_lengths
    count = min(config.num_docs, seq_len)
    base = seq_len // count
    return (base,) * (count - 1) + (seq_len - base * (count - 1),)


def _document_mod(config: PatternConfig, seq_len: int, device: str) -> masks.MaskMod:
    lengths = torch.tensor(document_lengths(config, seq_len), device=device)
    ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    return masks.all_of(masks.causal(), masks.same_document(ids))


def _document(config: PatternConfig, seq_len: int) -> Tensor:
    blocks = [torch.ones(n, n, dtype=torch.bool) for n in document_lengths(config, seq_len)]
    return torch.block_diag(*blocks) & band(seq_len, seq_len, 0)


def _prefix_lm(config: PatternConfig, seq_len: int) -> Tensor:
    mask = band(seq_len, seq_len, 0)
    mask[:, : config.prefix_len] = True
    return mask


def _dilated(config: PatternConfig, seq_len: int) -> Tensor:
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    reach = min(config.window * config.dilation, seq_len - 1)
    for distance in range(0, reach + 1, config.dilation):
        mask.diagonal(-distance).fill_(True)
    return mask


def _global_local_mod(config: PatternConfig, seq_len: int, device: str) -> masks.MaskMod:
    return masks.any_of(
        masks.sliding_window(_index(config.window, device)),
        masks.global_tokens(_index(config.num_global, device)),
    )


def _global_local(config: PatternConfig, seq_len: int) -> Tensor:
    mask = band(seq_len, config.window, config.window)
    mask[: config.num_global, :] = True
    mask[:, : config.num_global] = True
    return mask


def _alibi_bias(config: PatternConfig, num_heads: int, offsets: Tensor) -> Tensor:
    slopes = [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    slopes = torch.tensor(slopes, dtype=torch.float64, device=offsets.device)
    return slopes[:, None, None] * offsets[None]


def relative_position_table(config: PatternConfig, num_heads: int, device="cpu") -> Tensor:
    """A seeded stand-in for a learned (H, 2M + 1) bias table, fp32."""
    generator = torch.Generator().manual_seed(config.seed)
    table = torch.randn(num_heads, 2 * config.max_distance + 1, generator=generator)
    return table.to(device)


def _relative_bias(config: PatternConfig, num_heads: int, offsets: Tensor) -> Tensor:
    table = relative_position_table(config, num_heads, offsets.device).double()
    M = config.max_distance
    return table[:, offsets.clamp(-M, M) + M]


def grid_geometry(config: PatternConfig, seq_len: int, axes: int) -> tuple[int, tuple[int, ...]]:
    """(tokens per cell, cells per axis, outermost first) of a neighbourhood pattern on `axes`
    axes: 2D tokens (neighbourhood_2d: a cell is a token), 2D or 3D tiles (sliding tiles). The
    outermost axis (image rows, video frames) takes as many cells as S needs."""
    t = config.tile_size
    if axes == 1:  # neighbourhood_2d: token rows x grid_width
        volume, inner = 1, (config.grid_width,)
    elif axes == 2:
        volume, inner = t * t, (max(1, config.grid_width // t),)
    else:
        volume = t**3
        inner = (max(1, config.grid_height // t), max(1, config.grid_width // t))
    cells = math.ceil(seq_len / volume)
    return volume, (math.ceil(cells / math.prod(inner)), *inner)


def _neighbourhood_mod(axes: int) -> MaskBuilder:
    def build(config: PatternConfig, seq_len: int, device: str) -> masks.MaskMod:
        volume, extents = grid_geometry(config, seq_len, axes)
        return masks.grid_neighbourhood(
            _index(volume, device),
            tuple(_index(e, device) for e in extents),
            _index(config.radius, device),
        )

    return build


def _neighbourhood(axes: int) -> DenseMask:
    """The reference: each query cell's window as explicit coordinate ranges, expanded to
    tokens."""

    def dense(config: PatternConfig, seq_len: int) -> Tensor:
        volume, extents = grid_geometry(config, seq_len, axes)
        cells = math.ceil(seq_len / volume)
        coords = list(itertools.islice(itertools.product(*map(range, extents)), cells))
        index = {c: i for i, c in enumerate(coords)}
        R, allowed = config.radius, torch.zeros(cells, cells, dtype=torch.bool)
        for i, cell in enumerate(coords):
            centres = [min(max(x, R), e - 1 - R) for x, e in zip(cell, extents)]
            windows = [
                range(max(c - R, 0), min(c + R, e - 1) + 1) for c, e in zip(centres, extents)
            ]
            for key in itertools.product(*windows):
                if key in index:
                    allowed[i, index[key]] = True
        cell_of = torch.arange(seq_len) // volume
        return allowed[cell_of][:, cell_of]

    return dense


def shared_prefix_ids(config: PatternConfig, seq_len: int) -> Tensor:
    """(S,) document id: 0 for the shared prefix, 1..n for its n continuations (equal split)."""
    prefix = min(config.prefix_len, seq_len)
    rest = seq_len - prefix
    count = max(1, min(config.num_docs, rest))
    lengths = [prefix] + [rest // count] * (count - 1) + [rest - rest // count * (count - 1)]
    return torch.repeat_interleave(torch.arange(count + 1), torch.tensor(lengths))


def _shared_prefix_mod(config: PatternConfig, seq_len: int, device: str) -> masks.MaskMod:
    ids = shared_prefix_ids(config, seq_len).to(device)
    prefix = _index(min(config.prefix_len, seq_len), device)
    return masks.all_of(
        masks.causal(), masks.any_of(masks.keys_before(prefix), masks.same_document(ids))
    )


def _shared_prefix(config: PatternConfig, seq_len: int) -> Tensor:
    ids = shared_prefix_ids(config, seq_len)
    counts = torch.bincount(ids).tolist()
    mask = torch.block_diag(*(torch.ones(n, n, dtype=torch.bool) for n in counts))
    mask[:, : counts[0]] = True
    return mask & band(seq_len, seq_len, 0)


def _block_diffusion_mod(config: PatternConfig, seq_len: int, device: str) -> masks.MaskMod:
    return masks.block_diffusion(_index(seq_len // 2, device), _index(config.block_len, device))


def _block_diffusion(config: PatternConfig, seq_len: int) -> Tensor:
    """Quadrants: noised-noised block diagonal, noised-clean strictly earlier blocks,
    clean-clean block lower triangle, clean-noised empty."""
    half, L = seq_len // 2, config.block_len
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for start in range(0, half, L):  # noised block [start, end) and its clean blocks
        end = min(start + L, half)
        mask[start:end, start:end] = True
        mask[start:end, half : half + start] = True
    for start in range(0, seq_len - half, L):
        end = min(start + L, seq_len - half)
        mask[half + start : half + end, half : half + end] = True
    return mask


def sandwich_slopes(num_heads: int, device="cpu") -> Tensor:
    """Per-head scale H / (8 (h + 1)) of the sandwich bias (ALiBi's compression ratios)."""
    return num_heads / (8.0 * torch.arange(1, num_heads + 1, dtype=torch.float32, device=device))


def _sandwich_bias(config: PatternConfig, num_heads: int, offsets: Tensor) -> Tensor:
    i = torch.arange(config.sandwich_dim // 2, dtype=torch.float64, device=offsets.device)
    freqs = 10000.0 ** (-2.0 * i / config.sandwich_dim)
    distance = offsets.abs()  # one cosine sum per distance, not an (R, S, d/2) tensor
    table = torch.cos(
        torch.arange(int(distance.max()) + 1, device=offsets.device)[:, None] * freqs
    )
    bias = table.sum(dim=-1)[distance]
    return sandwich_slopes(num_heads, offsets.device).double()[:, None, None] * bias[None]


def _graphormer_mod(config: PatternConfig, num_heads: int, seq_len: int, device: str):
    distances = graph.shortest_paths(seq_len, config.seed, config.max_distance).to(device)
    table = graph.spatial_bias_table(num_heads, config.max_distance, config.seed, device)
    return mods.graph_spatial_bias(table, distances)


def _graphormer_bias(config: PatternConfig, num_heads: int, offsets: Tensor) -> Tensor:
    """Bias of query rows q = -offsets[:, 0] (offsets are kv - q over every key)."""
    seq_len = offsets.shape[1]
    rows = -offsets[:, 0].cpu()
    distances = graph.shortest_paths_reference(seq_len, config.seed, config.max_distance)[rows]
    table = graph.spatial_bias_table(num_heads, config.max_distance, config.seed).double()
    return table[:, distances].to(offsets.device)


REGISTERED = (
    # no mask, no bias: the dense baseline every sparse pattern is compared with
    Pattern("full", _full, flash=lambda c: {}),
    Pattern("causal", _causal, _causal_mod, is_causal=True, flash=lambda c: {"causal": True}),
    Pattern(
        "sliding_window",
        lambda c, S: band(S, c.window, c.window),
        lambda c, S, dev: masks.sliding_window(_index(c.window, dev)),
        flash=lambda c: {"window_size": (c.window, c.window)},
    ),
    Pattern(  # Mistral-style causal band
        "causal_sliding_window",
        lambda c, S: band(S, c.window, 0),
        lambda c, S, dev: masks.causal_sliding_window(_index(c.window, dev)),
        flash=lambda c: {"causal": True, "window_size": (c.window, 0)},
    ),
    Pattern("prefix_lm", _prefix_lm, lambda c, S, dev: masks.prefix_lm(_index(c.prefix_len, dev))),
    Pattern("document", _document, _document_mod),  # causal within each packed document
    Pattern(  # causal + ALiBi bias
        "alibi",
        _causal,
        _causal_mod,
        lambda c, H, S, dev: mods.alibi(mods.alibi_slopes(H, dev)),
        _alibi_bias,
    ),
    Pattern(
        "relative_position_bias",
        _full,
        score_mod=lambda c, H, S, dev: mods.relative_position_bias(
            relative_position_table(c, H, dev), c.max_distance
        ),
        dense_bias=_relative_bias,
    ),
    Pattern(  # causal + tanh soft-capping
        "softcap",
        _causal,
        _causal_mod,
        lambda c, H, S, dev: mods.softcap(c.softcap),
        softcapped=True,
        flash=lambda c: {"causal": True, "softcap": c.softcap},
    ),
    Pattern(
        "dilated",
        _dilated,
        lambda c, S, dev: masks.dilated_window(_index(c.window, dev), _index(c.dilation, dev)),
    ),
    # Longformer: bidirectional window + global tokens
    Pattern("global_local", _global_local, _global_local_mod),
)
# attention-gym's further families, run in their own section (each is one more flex compile)
GYM_REGISTERED = (
    Pattern("neighbourhood_2d", _neighbourhood(1), _neighbourhood_mod(1)),  # NATTEN
    Pattern("sliding_tiles_2d", _neighbourhood(2), _neighbourhood_mod(2)),  # STA, images
    Pattern("sliding_tiles_3d", _neighbourhood(3), _neighbourhood_mod(3)),  # STA, video
    # one causal prompt, continuations that see all of it and themselves causally
    Pattern("shared_prefix", _shared_prefix, _shared_prefix_mod),
    Pattern("block_diffusion", _block_diffusion, _block_diffusion_mod),  # BD3-LM training
    # nodes of a seeded small-world graph, biased by hop distance (max_distance: M)
    Pattern("graphormer", _full, score_mod=_graphormer_mod, dense_bias=_graphormer_bias),
    Pattern(  # causal + sandwich bias
        "sandwich",
        _causal,
        _causal_mod,
        lambda c, H, S, dev: mods.sandwich(
            mods.sandwich_table(S, c.sandwich_dim, dev), sandwich_slopes(H, dev)
        ),
        _sandwich_bias,
    ),
)
GYM_PATTERNS = tuple(p.name for p in GYM_REGISTERED)
REGISTERED += GYM_REGISTERED
PATTERNS: dict[str, Pattern] = {p.name: p for p in REGISTERED}
assert len(PATTERNS) == len(REGISTERED), "two patterns share a name"


class FlexMods(NamedTuple):
    """What flex_attention takes: a mask_mod (None = attend everywhere) and a score_mod."""

    name: str
    mask_mod: masks.MaskMod | None
    score_mod: mods.ScoreMod | None


def build_pattern(
    config: PatternConfig, *, seq_len: int, num_heads: int, device: torch.device | str
) -> FlexMods:
    """The mask_mod / score_mod pair of `config` for sequences of S tokens and H heads."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len} must be >= 1")
    pattern, device = config.pattern, str(device)
    mask_mod = pattern.mask_mod(config, seq_len, device) if pattern.mask_mod else None
    score_mod = (
        pattern.score_mod(config, num_heads, seq_len, device) if pattern.score_mod else None
    )
    return FlexMods(config.name, mask_mod, score_mod)


def materialise(
    config: PatternConfig, *, seq_len: int, num_heads: int
) -> tuple[Tensor, Tensor | None]:
    """What flex sees, evaluated densely on CPU: ((S, S) bool mask, (H, S, S) bias or None).

    Calls the pattern's own mask_mod/score_mod on broadcast index grids (for pictures and for
    testing the mods against the independently built dense references).
    """
    flex_mods = build_pattern(config, seq_len=seq_len, num_heads=num_heads, device="cpu")
    q_idx = torch.arange(seq_len)[:, None]
    kv_idx = torch.arange(seq_len)[None, :]
    zero = torch.tensor(0)
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool)
    if flex_mods.mask_mod is not None:
        mask = flex_mods.mask_mod(zero, zero, q_idx, kv_idx).expand(seq_len, seq_len).clone()
    if flex_mods.score_mod is None or config.pattern.softcapped:  # soft-capping is not a bias
        return mask, None
    zeros = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    heads = [
        flex_mods.score_mod(zeros, zero, torch.tensor(h), q_idx, kv_idx) for h in range(num_heads)
    ]
    return mask, torch.stack(heads)
