"""The forms of attention-gym's further pattern families (patterns.GYM_REGISTERED): NATTEN
neighbourhoods on a token grid (in raster, tiled or Morton order), sliding tiles on images and
video, a shared prefix, block diffusion, Graphormer's graph biases and the sandwich bias. Each
has its dense reference (a mask from explicit coordinates and loops, or an fp64 bias) beside the
builder of what flex runs. Every form takes the pattern's `PatternConfig` first.

Legend: H heads, S sequence length (S = Lq = Lk), R query rows of a (row-sampled) check.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
from torch import Tensor

from kernel_lib.attention import graph, masks, mods
from kernel_lib.attention.forms import band, index, offsets


def grid_geometry(config, seq_len: int, axes: int) -> tuple[int, tuple[int, ...]]:
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


def neighbourhood_mod(axes: int) -> Callable:
    def build(config, _, seq_len: int, device: str) -> masks.MaskMod:
        volume, extents = grid_geometry(config, seq_len, axes)
        return masks.grid_neighbourhood(
            index(volume, device),
            tuple(index(e, device) for e in extents),
            index(config.radius, device),
        )

    return build


def neighbourhood(axes: int) -> Callable:
    """The reference: each query cell's window as explicit coordinate ranges, expanded to
    tokens. Its window is clamped inside the canvas on each axis by that axis's own extent
    (attention-gym's generate_natten clamps the row with the canvas width and the column with
    its height: right on square canvases only)."""

    def dense(config, _, seq_len: int) -> Tensor:
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


def token_pixels(config, seq_len: int, order: str) -> Tensor:
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


def natten_order_mod(order: str) -> Callable:
    def build(config, _, seq_len: int, device: str) -> masks.MaskMod:
        natten = neighbourhood_mod(1)(config, seq_len, seq_len, device)
        return masks.reordered(natten, token_pixels(config, seq_len, order).to(device))

    return build


def _pixel_order(config, seq_len: int, order: str) -> list[int]:
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


def natten_order(order: str) -> Callable:
    """The reference: neighbourhood_2d's, rows and columns renumbered in `order` (attention-gym's
    generate_tiled_natten / generate_morton_natten: the same neighbourhoods, another order)."""

    def dense(config, _, seq_len: int) -> Tensor:
        pixels = _pixel_order(config, seq_len, order)
        return neighbourhood(1)(config, seq_len, seq_len)[pixels][:, pixels]

    return dense


def shared_prefix_ids(config, seq_len: int) -> Tensor:
    """(S,) document id: 0 for the shared prefix, 1..n for its n continuations (equal split)."""
    prefix = min(config.prefix_len, seq_len)
    rest = seq_len - prefix
    count = max(1, min(config.num_docs, rest))
    lengths = [prefix] + [rest // count] * (count - 1) + [rest - rest // count * (count - 1)]
    return torch.repeat_interleave(torch.arange(count + 1), torch.tensor(lengths))


def shared_prefix_mod(config, _, seq_len: int, device: str) -> masks.MaskMod:
    ids = shared_prefix_ids(config, seq_len).to(device)
    prefix = index(min(config.prefix_len, seq_len), device)
    return masks.all_of(
        masks.causal(), masks.any_of(masks.keys_before(prefix), masks.same_document(ids))
    )


def shared_prefix(config, _, seq_len: int) -> Tensor:
    ids = shared_prefix_ids(config, seq_len)
    counts = torch.bincount(ids).tolist()
    mask = torch.block_diag(*(torch.ones(n, n, dtype=torch.bool) for n in counts))
    mask[:, : counts[0]] = True
    return mask & band(seq_len, seq_len, 0)


def block_diffusion_mod(config, _, seq_len: int, device: str) -> masks.MaskMod:
    return masks.block_diffusion(index(seq_len // 2, device), index(config.block_len, device))


def block_diffusion(config, _, seq_len: int) -> Tensor:
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


def sandwich_bias(config, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    """fp64 throughout: H / (8 (h + 1)) times sum_i cos(|j - i| / 10000^(2i / d)), i = 0 ..
    d/2 - 1 (mods.sandwich_table's range)."""
    slopes = [num_heads / (8.0 * (h + 1)) for h in range(num_heads)]
    slopes = torch.tensor(slopes, dtype=torch.float64, device=rows.device)
    i = torch.arange(config.sandwich_dim // 2, dtype=torch.float64, device=rows.device)
    freqs = 10000.0 ** (-2.0 * i / config.sandwich_dim)
    distance = offsets(rows, seq_len).abs()  # one cosine sum per distance, not (R, S, d/2)
    table = torch.cos(torch.arange(int(distance.max()) + 1, device=rows.device)[:, None] * freqs)
    return slopes[:, None, None] * table.sum(dim=-1)[distance][None]


def graphormer_mod(config, num_heads: int, _, seq_len: int, device: str):
    distances = graph.shortest_paths(seq_len, config.seed, config.max_distance).to(device)
    table = graph.spatial_bias_table(num_heads, config.max_distance, config.seed, device)
    return mods.graph_spatial_bias(table, distances)


def graphormer_bias(config, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    distances = graph.shortest_paths_reference(seq_len, config.seed, config.max_distance)
    table = graph.spatial_bias_table(num_heads, config.max_distance, config.seed).double()
    return table[:, distances[rows.cpu()]].to(rows.device)


def graphormer_edges_mod(config, num_heads: int, _, seq_len: int, device: str):
    shares = graph.path_edge_shares(seq_len, config.seed).to(device)
    return mods.graph_edge_bias(graph.edge_bias_table(num_heads, config.seed, device), shares)


def graphormer_edges_bias(config, num_heads: int, rows: Tensor, seq_len: int) -> Tensor:
    """The mean of table[h, type] over the path's edges: counts of each type walked by
    graph.path_edge_counts_reference, over the Floyd-Warshall hop count (0 for i = j)."""
    counts = graph.path_edge_counts_reference(seq_len, config.seed)[:, rows.cpu()].double()
    hops = graph.shortest_paths_reference(seq_len, config.seed, seq_len)[rows.cpu()]
    table = graph.edge_bias_table(num_heads, config.seed).double()
    bias = torch.einsum("hk,krs->hrs", table, counts) / hops.clamp(min=1)
    return bias.to(rows.device)
