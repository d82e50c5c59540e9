"""Block-scaled FP8 GEMMs: DeepSeek-V3 blockwise (x 1x128, W 128x128) and MXFP8 (x and W 1x32,
e8m0 scales) through `torch._scaled_mm`, beside a split-K twin of rowwise `_scaled_mm` calls.

Letters: M rows of x, K in_features, N out_features; a: (M, K), b: (N, K), out = a @ b.T.
Scale layouts `_scaled_mm` reads (cuBLASLt; pytorch/pytorch#166752, cuBLAS "block scaling factors
layout"): blockwise scale_a (M, K/128) column-major, scale_b (K/128, N/128) column-major with its
leading dimension padded to 4; MX scales flattened in 128x4 tiles, each tile stored as
32 x (4 x 4): scale (r, c) of a tile at 16 * (r % 32) + 4 * (r // 32) + c.
Where the device refuses these layouts (torch 2.13's oneDNN on CPUs takes tensorwise and
rowwise only) `block_scaled_mm` raises Unsupported, found by a probe on a tiny shape.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from kernel_lib.checks import Unsupported
from kernel_lib.fp8.formats import Fp8Format
from kernel_lib.fp8.matmul import raw_scaled_mm
from kernel_lib.fp8.quantize import Fp8Tensor, quantize
from kernel_lib.fp8.scaling import BLOCK_SHAPES, Granularity

# recipe -> (granularity of x, granularity of W)
BLOCK_RECIPES = {
    "blockwise": (Granularity.BLOCKWISE_1X128, Granularity.BLOCKWISE),
    "mxfp8": (Granularity.MX, Granularity.MX),
}


def recipe_granularities(recipe: str) -> tuple[Granularity, Granularity]:
    """(x, W) granularities of `recipe`; ValueError listing the valid names."""
    if recipe not in BLOCK_RECIPES:
        raise ValueError(f"recipe={recipe!r} must be one of {list(BLOCK_RECIPES)}")
    return BLOCK_RECIPES[recipe]


def k_block(recipe: str) -> int:
    """Elements along K that share one scale in `recipe` (128 blockwise, 32 MX)."""
    return BLOCK_SHAPES[recipe_granularities(recipe)[0]][1]


def check_block_dims(k: int, recipe: str) -> str | None:
    """Why K cannot be contracted block by block in `recipe`, or None if it can. Quantisation
    takes any K (a partial last block); the GEMMs need whole K blocks."""
    width = k_block(recipe)
    if k % width:
        return f"K={k} is not a multiple of the {recipe} recipe's {width}-element K block"
    return None


def quantize_operands(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    recipe: str,
    fmt: Fp8Format | str = "e4m3fn",
    nonfinite: str = "raise",
) -> tuple[Fp8Tensor, Fp8Tensor]:
    """x (M, K) and weight (N, K) quantised dynamically by `recipe` (see BLOCK_RECIPES);
    `nonfinite` as in `quantize` ('raise' costs a host sync)."""
    gran_x, gran_w = recipe_granularities(recipe)
    return (
        quantize(x, fmt=fmt, granularity=gran_x, nonfinite=nonfinite),
        quantize(weight, fmt=fmt, granularity=gran_w, nonfinite=nonfinite),
    )


def _recipe_of(a: Fp8Tensor, b: Fp8Tensor) -> str:
    for name, grans in BLOCK_RECIPES.items():
        if (a.granularity, b.granularity) == grans:
            return name
    raise ValueError(
        f"operands scaled ({a.granularity.value}, {b.granularity.value}) match no block recipe "
        f"{ {k: (x.value, w.value) for k, (x, w) in BLOCK_RECIPES.items()} }"
    )


def _check_k(a: Fp8Tensor, b: Fp8Tensor, recipe: str) -> None:
    if a.data.shape[1] != b.data.shape[1]:
        raise ValueError(
            f"a.shape={tuple(a.data.shape)} and b.shape={tuple(b.data.shape)}: K differs"
        )
    if reason := check_block_dims(a.data.shape[1], recipe):
        raise ValueError(reason)


def blocked_scales(scale: torch.Tensor) -> torch.Tensor:
    """MX scales (rows, K/32) in cuBLAS's 128x4-tile order, flattened, rows padded to 128 and
    columns to 4 (the padding is never read for real data)."""
    rows, cols = scale.shape
    raw = scale.view(torch.uint8) if scale.element_size() == 1 else scale  # e8m0: pad as bytes
    padded = F.pad(raw, (0, -cols % 4, 0, -rows % 128)).view(scale.dtype)
    r, c = padded.shape[0] // 128, padded.shape[1] // 4
    # (row tile, 4 row groups of 32, 32, col tile, 4) -> (row tile, col tile, 32, 4 groups, 4)
    tiles = padded.view(r, 4, 32, c, 4).permute(0, 3, 2, 1, 4)
    return tiles.contiguous().flatten()


def _native(a: Fp8Tensor, b: Fp8Tensor, recipe: str, out_dtype: torch.dtype) -> torch.Tensor:
    if recipe == "mxfp8":
        scale_a, scale_b = blocked_scales(a.e8m0_scale()), blocked_scales(b.e8m0_scale())
        return raw_scaled_mm(a.data, b.data.t(), scale_a, scale_b, out_dtype=out_dtype)
    m = a.data.shape[0]
    data_a = F.pad(a.data.view(torch.uint8), (0, 0, 0, -m % 4)).view(a.data.dtype)  # M to 4
    inv_a = F.pad(a.inverse_scale, (0, 0, 0, -m % 4))
    scale_a = inv_a.t().contiguous().t()  # (M, K/128), column-major
    inv_b = b.inverse_scale  # (N/128, K/128)
    lead = F.pad(inv_b, (0, -inv_b.shape[1] % 4))  # K/128 padded to 4: the leading dimension
    scale_b = lead[:, : inv_b.shape[1]].t()  # (K/128, N/128), column-major
    out = raw_scaled_mm(data_a, b.data.t(), scale_a, scale_b, out_dtype=out_dtype)
    return out[:m]


@functools.cache
def block_scaled_mm_unsupported(device: str, recipe: str) -> str | None:
    """Why `block_scaled_mm` cannot run `recipe` on `device` (a 16 x 128 x 32 probe raised), or
    None."""
    x, w = torch.ones(16, 128, device=device), torch.ones(32, 128, device=device)
    qa, qb = quantize_operands(x, w, recipe=recipe)
    try:
        _native(qa, qb, recipe, torch.bfloat16)
    except (RuntimeError, ValueError, NotImplementedError) as why:
        first = str(why).splitlines()[0][:160]
        return (
            f"unsupported: torch._scaled_mm on {device} refuses {recipe} scale layouts ({first})"
        )
    return None


def block_scaled_mm(
    a: Fp8Tensor, b: Fp8Tensor, *, out_dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """a @ b.T in one `torch._scaled_mm` with block scales; the recipe is read from the operands'
    granularities (BLOCK_RECIPES). a: (M, K), b: (N, K) -> (M, N) in out_dtype (bf16: what the
    block-scaled kernels produce). ValueError on mismatched or partial K blocks; Unsupported
    where the device refuses the layout."""
    recipe = _recipe_of(a, b)
    _check_k(a, b, recipe)
    if reason := block_scaled_mm_unsupported(str(a.data.device), recipe):
        raise Unsupported(reason)
    return _native(a, b, recipe, out_dtype)


def _columns(b: Fp8Tensor, j: int, n: int) -> torch.Tensor:
    """b's inverse scales of K block j, one per output column: (1, N)."""
    scale = b.inverse_scale[:, j]
    if b.granularity is Granularity.BLOCKWISE:  # one per 128 rows of W: repeat over them
        scale = scale.repeat_interleave(BLOCK_SHAPES[b.granularity][0])[:n]
    return scale.reshape(1, n).contiguous()


def split_k_scaled_mm(
    a: Fp8Tensor, b: Fp8Tensor, *, out_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The same product as `block_scaled_mm` as one rowwise `torch._scaled_mm` per K block
    (within a block every row of a and column of b has one scale), partial products summed in
    fp32: DeepSeek-V3's promotion to fp32 per 128 K, unfused. Runs where rowwise `_scaled_mm`
    does (a CPU's oneDNN included)."""
    recipe = _recipe_of(a, b)
    _check_k(a, b, recipe)
    width, (m, k), n = k_block(recipe), a.data.shape, b.data.shape[0]
    out = torch.zeros(m, n, device=a.data.device)
    for j in range(k // width):
        cols = slice(j * width, (j + 1) * width)
        out += raw_scaled_mm(
            a.data[:, cols].contiguous(),
            b.data[:, cols].contiguous().t(),
            a.inverse_scale[:, j : j + 1].contiguous(),
            _columns(b, j, n),
            out_dtype=torch.float32,
        )
    return out.to(out_dtype)


def block_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    recipe: str,
    fmt: Fp8Format | str = "e4m3fn",
    out_dtype: torch.dtype = torch.bfloat16,
    nonfinite: str = "raise",
) -> torch.Tensor:
    """Forward of x (M, K) @ weight (N, K).T with both quantised per call by `recipe`, through
    `block_scaled_mm` (inference: no backward). nonfinite='raise' raises ValueError on NaN/inf
    (a host sync per call); 'nan' passes them through as NaN, with no sync. Other errors as
    block_scaled_mm."""
    qx, qw = quantize_operands(x, weight, recipe=recipe, fmt=fmt, nonfinite=nonfinite)
    return block_scaled_mm(qx, qw, out_dtype=out_dtype)
