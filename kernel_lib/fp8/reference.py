"""fp64 oracles for the FP8 kernels, written from the formats' definitions alone (no kernel code):
scales from amax, rounding to the format grid by frexp/ldexp, and the dequantised fp64 matmul.

The quantisation they define: s = fp32(fp8_max / max(amax, 1e-12)) per tensor, row, 128x128 or
1x128 block (amax over finite values), or for MX per 1x32 block s = 2**-e with
e = clamp(floor(log2(amax)) - floor(log2(fp8_max)), -127, 127) (OCP MX v1.0 section 6.3);
q = RNE_fmt(clamp(fp32(x * s), +-fp8_max)); NaN/inf -> NaN.
"""

from __future__ import annotations

import math

import torch

from kernel_lib.fp8.formats import Fp8Format, format_info, fp8_format
from kernel_lib.fp8.quantize import Fp8Tensor
from kernel_lib.fp8.scaling import AMAX_EPS, BLOCK, MX_BLOCK, Granularity
from kernel_lib.fp8.scaling import granularity as _granularity

_EPS32 = float(torch.tensor(AMAX_EPS, dtype=torch.float32))  # the clamp as fp32 sees it


def round_to_format(v: torch.Tensor, fmt: Fp8Format | str) -> torch.Tensor:
    """The nearest value of `fmt` to each v in fp64, ties to even, |v| > max saturating to
    +-max, NaN/inf to NaN. frexp gives v's binade; below the smallest normal the spacing stays
    that of the smallest normal binade; round-half-even of v / ulp lands on the grid."""
    info = format_info(fmt)
    v = v.double()
    mag = v.abs().clamp(max=info.max)
    _, exp = torch.frexp(mag)  # mag = m * 2**exp with m in [0.5, 1): binade exp - 1
    min_exp = round(math.log2(info.smallest_normal))
    ulp_exp = (exp - 1).clamp(min=min_exp) - info.mantissa_bits
    rounded = torch.ldexp(torch.round(torch.ldexp(mag, -ulp_exp)), ulp_exp)
    return torch.where(torch.isfinite(v), torch.copysign(rounded, v), torch.nan)


def _scale(group_amax: torch.Tensor, fmax: float, gran: Granularity) -> torch.Tensor:
    if gran is Granularity.MX:
        # frexp: amax = m * 2**exp, m in [0.5, 1), so floor(log2(amax)) = exp - 1; amax 0 -> -127
        _, exp = torch.frexp(group_amax)
        e = torch.where(group_amax > 0, exp - 1 - math.floor(math.log2(fmax)), -127)
        return torch.ldexp(torch.ones_like(group_amax), -e.clamp(-127, 127)).float()
    # fp64 division of fp32 operands, rounded once to fp32: the correctly rounded fp32 quotient
    return (fmax / group_amax.clamp(min=_EPS32)).float()


_ROW_BLOCKS = {Granularity.BLOCKWISE_1X128: BLOCK, Granularity.MX: MX_BLOCK}


def _group_amax(mag: torch.Tensor, gran: Granularity) -> torch.Tensor:
    """max |x| per scaling group of the non-negative fp64 `mag`, by the obvious loops."""
    if gran is Granularity.TENSORWISE:
        return mag.max() if mag.numel() else mag.new_zeros(())
    if gran is Granularity.ROWWISE:
        return mag.amax(dim=-1, keepdim=True) if mag.shape[-1] else mag.sum(-1, keepdim=True)
    if gran in _ROW_BLOCKS:  # one column slice per block of each row
        width = _ROW_BLOCKS[gran]
        k = mag.shape[-1]
        slices = [mag[..., j : j + width] for j in range(0, k, width)]
        return torch.stack([s.amax(dim=-1) for s in slices], dim=-1) if slices else mag
    rows, cols = math.ceil(mag.shape[0] / BLOCK), math.ceil(mag.shape[1] / BLOCK)
    out = mag.new_zeros(rows, cols)
    for i in range(rows):
        for j in range(cols):
            out[i, j] = mag[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK].max()
    return out


def _per_element(scale: torch.Tensor, shape: tuple[int, ...], gran: Granularity) -> torch.Tensor:
    if gran in _ROW_BLOCKS:
        cols = torch.arange(shape[-1], device=scale.device) // _ROW_BLOCKS[gran]
        return scale.double()[..., cols]
    if gran is not Granularity.BLOCKWISE:
        return scale.double().expand(shape)
    rows = torch.arange(shape[0], device=scale.device) // BLOCK
    cols = torch.arange(shape[1], device=scale.device) // BLOCK
    return scale.double()[rows[:, None], cols[None, :]]


def _quantize64(x: torch.Tensor, fmt: Fp8Format, gran: Granularity):
    """(values on the grid, per-element scale, group scale, group amax), all from fp64 x."""
    info = format_info(fmt)
    x64 = x.double()
    finite = torch.isfinite(x64)
    clean = torch.where(finite, x64, 0.0)
    group_amax = _group_amax(clean.abs(), gran)
    scale = _scale(group_amax, info.max, gran)
    full = _per_element(scale, tuple(x.shape), gran)
    scaled = (clean * full).float().double()  # the product is formed in fp32
    return round_to_format(torch.where(finite, scaled, torch.nan), fmt), full, scale, group_amax


def quantize_reference(
    x: torch.Tensor,
    *,
    fmt: Fp8Format | str = "e4m3fn",
    granularity: Granularity | str = "tensorwise",
) -> Fp8Tensor:
    """Dynamic quantisation of x (..., K) by the definition above; blockwise needs a 2-D x."""
    fmt, gran = fp8_format(fmt), _granularity(granularity)
    values, _, scale, group_amax = _quantize64(x, fmt, gran)
    return Fp8Tensor(values.to(format_info(fmt).dtype), scale, group_amax.float(), fmt, gran)


def dequantized_reference(
    x: torch.Tensor, *, fmt: Fp8Format | str = "e4m3fn", granularity: str = "tensorwise"
) -> torch.Tensor:
    """x quantised dynamically by the definition above and dequantised, in fp64."""
    values, full, _, _ = _quantize64(x, fp8_format(fmt), _granularity(granularity))
    return values / full


def fp8_linear_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    fmt: Fp8Format | str = "e4m3fn",
    granularity: str = "tensorwise",
    weight_granularity: str | None = None,
) -> torch.Tensor:
    """x (..., K) and weight (N, K) quantised dynamically (tensorwise: one scale each; rowwise:
    per row of x and per output channel of W; blockwise recipes: x by `granularity`, W by
    `weight_granularity`, default the same), dequantised and multiplied in fp64 -> (..., N)."""
    x2 = x.detach().reshape(-1, x.shape[-1])
    w_gran = weight_granularity or granularity
    out = dequantized_reference(x2, fmt=fmt, granularity=granularity) @ (
        dequantized_reference(weight.detach(), fmt=fmt, granularity=w_gran).t()
    )
    if bias is not None:
        out = out + bias.detach().double()
    return out.reshape(*x.shape[:-1], weight.shape[0])


def grouped_linear_reference(
    x: torch.Tensor,
    weights: torch.Tensor,
    counts: list[int],
    *,
    fmt: Fp8Format | str | None = "e4m3fn",
) -> torch.Tensor:
    """x (T, K) rows grouped by expert (counts[e] rows for expert e, in order) times each
    expert's weights[e] (N, K).T, x per token and each weight per output channel quantised
    rowwise (fmt=None: not quantised), dequantised and multiplied in fp64, by a loop over
    experts -> (T, N)."""

    def operand(t):
        t = t.detach()
        return (
            t.double() if fmt is None else dequantized_reference(t, fmt=fmt, granularity="rowwise")
        )

    xq = operand(x)
    out = x.new_zeros(x.shape[0], weights.shape[1], dtype=torch.float64)
    start = 0
    for e, count in enumerate(counts):
        wq = operand(weights[e])
        out[start : start + count] = xq[start : start + count] @ wq.t()
        start += count
    return out
