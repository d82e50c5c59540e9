"""The pattern registry: each attention pattern is one `Pattern`, registered once in PATTERNS.

Legend: B batch, H heads, S sequence length, D head dim; R query rows of a (row-sampled) check;
Lq, Lk query and key lengths (S = Lq = Lk but for the `rectangular` patterns, whose queries are
the last Lq of Lk positions).
A pattern carries both of its forms: what flex runs (mask_mod / score_mod builders, from the
primitives in masks.py and mods.py) and its dense reference (an (Lq, Lk) mask built from matrix
diagonals, slices and plain loops over its definition, an additive (H, R, Lk) fp64 bias), plus how
SDPA and FlashAttention express it. Adding a pattern is one `Pattern(...)` in REGISTERED below and
its test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.attention import graph, jetspec, masks, mods


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


def band(seq_len: int, below: int, above: int) -> Tensor:
    """Keys j with -below <= j - i <= above, as an (S, S) bool matrix."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril(diagonal=above) & ones.triu(diagonal=-below)


def _offsets(rows: Tensor, kv_len: int) -> Tensor:
    """(R, Lk) key minus query position j - i of query `rows`."""
    return torch.arange(kv_len, device=rows.device)[None, :] - rows[:, None]


def _full(config: PatternConfig, _, seq_len: int) -> Tensor:
    return torch.ones(seq_len, seq_len, dtype=torch.bool)


def _causal(config: PatternConfig, _, seq_len: int) -> Tensor:
    return band(seq_len, seq_len, 0)


def _causal_mod(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
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


def _document_mod(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
    lengths = torch.tensor(document_lengths(config, seq_len), device=device)
    ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    return masks.all_of(masks.causal(), masks.same_document(ids))


def _document(config: PatternConfig, _, seq_len: int) -> Tensor:
    blocks = [torch.ones(n, n, dtype=torch.bool) for n in document_lengths(config, seq_len)]
    return torch.block_diag(*blocks) & band(seq_len, seq_len, 0)


def _prefix_lm(config: PatternConfig, _, seq_len: int) -> Tensor:
    mask = band(seq_len, seq_len, 0)
    mask[:, : config.prefix_len] = True
    return mask


def _dilated(config: PatternConfig, _, seq_len: int) -> Tensor:
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    reach = min(config.window * config.dilation, seq_len - 1)
    for distance in range(0, reach + 1, config.dilation):
        mask.diagonal(-distance).fill_(True)
    return mask


def _global_local_mod(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
    return masks.any_of(
        masks.sliding_window(_index(config.window, device)),
        masks.global_tokens(_index(config.num_global, device)),
    )


def _global_local(config: PatternConfig, _, seq_len: int) -> Tensor:
    mask = band(seq_len, config.window, config.window)
    mask[: config.num_global, :] = True
    mask[:, : config.num_global] = True
    return mask


def _alibi_bias(config: PatternConfig, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    slopes = [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    slopes = torch.tensor(slopes, dtype=torch.float64, device=rows.device)
    return slopes[:, None, None] * _offsets(rows, seq_len)[None]


def relative_position_table(config: PatternConfig, num_heads: int, device="cpu") -> Tensor:
    """A seeded stand-in for a learned (H, 2M + 1) bias table, fp32."""
    generator = torch.Generator().manual_seed(config.seed)
    table = torch.randn(num_heads, 2 * config.max_distance + 1, generator=generator)
    return table.to(device)


def _relative_bias(config: PatternConfig, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    table = relative_position_table(config, num_heads, rows.device).double()
    M = config.max_distance
    return table[:, _offsets(rows, seq_len).clamp(-M, M) + M]


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
    def build(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
        volume, extents = grid_geometry(config, seq_len, axes)
        return masks.grid_neighbourhood(
            _index(volume, device),
            tuple(_index(e, device) for e in extents),
            _index(config.radius, device),
        )

    return build


def _neighbourhood(axes: int) -> DenseMask:
    """The reference: each query cell's window as explicit coordinate ranges, expanded to
    tokens. Its window is clamped inside the canvas on each axis by that axis's own extent
    (attention-gym's generate_natten clamps the row with the canvas width and the column with
    its height: right on square canvases only)."""

    def dense(config: PatternConfig, _, seq_len: int) -> Tensor:
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


def _spread_bits(x: Tensor) -> Tensor:
    """Bit b of x (< 2^32) moved to bit 2b."""
    for shift, keep in (
        (16, 0x0000FFFF0000FFFF),
        (8, 0x00FF00FF00FF00FF),
        (4, 0x0F0F0F0F0F0F0F0F),
        (2, 0x3333333333333333),
        (1, 0x5555555555555555),
    ):
        x = (x | x << shift) & keep
    return x


def token_pixels(config: PatternConfig, seq_len: int, order: str) -> Tensor:
    """(S,) the row-major pixel of each token when neighbourhood_2d's pixels (the first S of a
    grid_width-wide canvas) are numbered in `order`: "tiled", tile by tile (tile_size squares,
    row-major, row-major inside each) or "morton", along the Z curve (the bits of row and
    column interleaved, the column's lowest)."""
    pixel = torch.arange(seq_len)
    row, col = pixel // config.grid_width, pixel % config.grid_width
    if order == "tiled":
        t = config.tile_size
        tile = (row // t) * math.ceil(config.grid_width / t) + col // t
        key = tile * t * t + (row % t) * t + col % t
    else:
        key = _spread_bits(col) | _spread_bits(row) << 1
    return pixel[key.argsort()]


def _natten_order_mod(order: str) -> MaskBuilder:
    def build(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
        natten = _neighbourhood_mod(1)(config, seq_len, seq_len, device)
        return masks.reordered(natten, token_pixels(config, seq_len, order).to(device))

    return build


def _pixel_order(config: PatternConfig, seq_len: int, order: str) -> list[int]:
    """token_pixels by a plain sort: tiled keys as (tile row, tile column, row, column in the
    tile), Morton codes built bit by bit."""
    t = config.tile_size

    def tiled(row: int, col: int) -> tuple[int, ...]:
        return row // t, col // t, row % t, col % t

    def morton(row: int, col: int) -> int:
        code = 0
        for bit in range(max(row, col).bit_length()):
            code |= ((col >> bit) & 1) << (2 * bit) | ((row >> bit) & 1) << (2 * bit + 1)
        return code

    key = tiled if order == "tiled" else morton
    return sorted(range(seq_len), key=lambda pixel: key(*divmod(pixel, config.grid_width)))


def _natten_order(order: str) -> DenseMask:
    """The reference: neighbourhood_2d's, rows and columns renumbered in `order` (attention-gym's
    generate_tiled_natten / generate_morton_natten: the same neighbourhoods, another order)."""

    def dense(config: PatternConfig, _, seq_len: int) -> Tensor:
        pixels = _pixel_order(config, seq_len, order)
        return _neighbourhood(1)(config, seq_len, seq_len)[pixels][:, pixels]

    return dense


def shared_prefix_ids(config: PatternConfig, seq_len: int) -> Tensor:
    """(S,) document id: 0 for the shared prefix, 1..n for its n continuations (equal split)."""
    prefix = min(config.prefix_len, seq_len)
    rest = seq_len - prefix
    count = max(1, min(config.num_docs, rest))
    lengths = [prefix] + [rest // count] * (count - 1) + [rest - rest // count * (count - 1)]
    return torch.repeat_interleave(torch.arange(count + 1), torch.tensor(lengths))


def _shared_prefix_mod(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
    ids = shared_prefix_ids(config, seq_len).to(device)
    prefix = _index(min(config.prefix_len, seq_len), device)
    return masks.all_of(
        masks.causal(), masks.any_of(masks.keys_before(prefix), masks.same_document(ids))
    )


def _shared_prefix(config: PatternConfig, _, seq_len: int) -> Tensor:
    ids = shared_prefix_ids(config, seq_len)
    counts = torch.bincount(ids).tolist()
    mask = torch.block_diag(*(torch.ones(n, n, dtype=torch.bool) for n in counts))
    mask[:, : counts[0]] = True
    return mask & band(seq_len, seq_len, 0)


def _block_diffusion_mod(config: PatternConfig, _, seq_len: int, device: str) -> masks.MaskMod:
    return masks.block_diffusion(_index(seq_len // 2, device), _index(config.block_len, device))


def _block_diffusion(config: PatternConfig, _, seq_len: int) -> Tensor:
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
    """Per-head scale H / (8 (h + 1)) of the sandwich bias (ALiBi's compression ratios), fp32."""
    return num_heads / (8.0 * torch.arange(1, num_heads + 1, dtype=torch.float32, device=device))


def _sandwich_bias(config: PatternConfig, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    """fp64 throughout: H / (8 (h + 1)) times sum_i cos(|j - i| / 10000^(2i / d)), i = 0 ..
    d/2 - 1 (mods.sandwich_table's range)."""
    slopes = [num_heads / (8.0 * (h + 1)) for h in range(num_heads)]
    slopes = torch.tensor(slopes, dtype=torch.float64, device=rows.device)
    i = torch.arange(config.sandwich_dim // 2, dtype=torch.float64, device=rows.device)
    freqs = 10000.0 ** (-2.0 * i / config.sandwich_dim)
    distance = _offsets(rows, seq_len).abs()  # one cosine sum per distance, not (R, S, d/2)
    table = torch.cos(torch.arange(int(distance.max()) + 1, device=rows.device)[:, None] * freqs)
    return slopes[:, None, None] * table.sum(dim=-1)[distance][None]


def _graphormer_mod(config: PatternConfig, num_heads: int, _, seq_len: int, device: str):
    distances = graph.shortest_paths(seq_len, config.seed, config.max_distance).to(device)
    table = graph.spatial_bias_table(num_heads, config.max_distance, config.seed, device)
    return mods.graph_spatial_bias(table, distances)


def _graphormer_bias(config: PatternConfig, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    distances = graph.shortest_paths_reference(seq_len, config.seed, config.max_distance)
    table = graph.spatial_bias_table(num_heads, config.max_distance, config.seed).double()
    return table[:, distances[rows.cpu()]].to(rows.device)


def _graphormer_edges_mod(config: PatternConfig, num_heads: int, _, seq_len: int, device: str):
    shares = graph.path_edge_shares(seq_len, config.seed).to(device)
    return mods.graph_edge_bias(graph.edge_bias_table(num_heads, config.seed, device), shares)


def _graphormer_edges_bias(
    config: PatternConfig, num_heads: int, rows: Tensor, seq_len: int
) -> Tensor:
    """The mean of table[h, type] over the path's edges: counts of each type walked by
    graph.path_edge_counts_reference, over the Floyd-Warshall hop count (0 for i = j)."""
    counts = graph.path_edge_counts_reference(seq_len, config.seed)[:, rows.cpu()].double()
    hops = graph.shortest_paths_reference(seq_len, config.seed, seq_len)[rows.cpu()]
    table = graph.edge_bias_table(num_heads, config.seed).double()
    bias = torch.einsum("hk,krs->hrs", table, counts) / hops.clamp(min=1)
    return bias.to(rows.device)


REGISTERED = (
    # no mask, no bias: the dense baseline every sparse pattern is compared with
    Pattern("full", _full, flash=lambda c: {}),
    Pattern("causal", _causal, _causal_mod, is_causal=True, flash=lambda c: {"causal": True}),
    Pattern(
        "sliding_window",
        lambda c, _, S: band(S, c.window, c.window),
        lambda c, _, S, dev: masks.sliding_window(_index(c.window, dev)),
        flash=lambda c: {"window_size": (c.window, c.window)},
    ),
    Pattern(  # Mistral-style causal band
        "causal_sliding_window",
        lambda c, _, S: band(S, c.window, 0),
        lambda c, _, S, dev: masks.causal_sliding_window(_index(c.window, dev)),
        flash=lambda c: {"causal": True, "window_size": (c.window, 0)},
    ),
    Pattern(
        "prefix_lm",
        _prefix_lm,
        lambda c, _, S, dev: masks.prefix_lm(_index(c.prefix_len, dev)),
    ),
    Pattern("document", _document, _document_mod),  # causal within each packed document
    Pattern(  # causal + ALiBi bias
        "alibi",
        _causal,
        _causal_mod,
        lambda c, H, _, S, dev: mods.alibi(mods.alibi_slopes(H, dev)),
        _alibi_bias,
    ),
    Pattern(
        "relative_position_bias",
        _full,
        score_mod=lambda c, H, _, S, dev: mods.relative_position_bias(
            relative_position_table(c, H, dev), c.max_distance
        ),
        dense_bias=_relative_bias,
    ),
    Pattern(  # causal + tanh soft-capping
        "softcap",
        _causal,
        _causal_mod,
        lambda c, H, _, S, dev: mods.softcap(c.softcap),
        softcapped=True,
        flash=lambda c: {"causal": True, "softcap": c.softcap},
    ),
    Pattern(
        "dilated",
        _dilated,
        lambda c, _, S, dev: masks.dilated_window(_index(c.window, dev), _index(c.dilation, dev)),
    ),
    # Longformer: bidirectional window + global tokens
    Pattern("global_local", _global_local, _global_local_mod),
)
# attention-gym's further families, run in their own section (each is one more flex compile)
GYM_REGISTERED = (
    Pattern("neighbourhood_2d", _neighbourhood(1), _neighbourhood_mod(1)),  # NATTEN
    # NATTEN with the tokens numbered tile by tile / along the Z curve (token_pixels)
    Pattern("natten_tiled", _natten_order("tiled"), _natten_order_mod("tiled")),
    Pattern("natten_morton", _natten_order("morton"), _natten_order_mod("morton")),
    Pattern("sliding_tiles_2d", _neighbourhood(2), _neighbourhood_mod(2)),  # STA, images
    Pattern("sliding_tiles_3d", _neighbourhood(3), _neighbourhood_mod(3)),  # STA, video
    # one causal prompt, continuations that see all of it and themselves causally
    Pattern("shared_prefix", _shared_prefix, _shared_prefix_mod),
    Pattern("block_diffusion", _block_diffusion, _block_diffusion_mod),  # BD3-LM training
    # nodes of a seeded small-world graph, biased by hop distance (max_distance: M)
    Pattern("graphormer", _full, score_mod=_graphormer_mod, dense_bias=_graphormer_bias),
    # the same graph, biased by the types of the edges on the path (Graphormer's edge encoding)
    Pattern(
        "graphormer_edges",
        _full,
        score_mod=_graphormer_edges_mod,
        dense_bias=_graphormer_edges_bias,
    ),
    Pattern(  # causal + sandwich bias
        "sandwich",
        _causal,
        _causal_mod,
        lambda c, H, _, S, dev: mods.sandwich(
            mods.sandwich_table(S, c.sandwich_dim, dev), sandwich_slopes(H, dev)
        ),
        _sandwich_bias,
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
