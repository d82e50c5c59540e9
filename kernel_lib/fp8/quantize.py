"""Quantise to and dequantise from FP8 with a scale per tensor, row, 128x128 or 1x128 block, or
32-element MX block (plain PyTorch ops, torch.compile-able); their fp64 oracle is
`kernel_lib.fp8.reference`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel_lib.fp8.formats import Fp8Format, format_info, fp8_format
from kernel_lib.fp8.scaling import (
    Granularity,
    amax,
    broadcast_scale,
    mx_scale_from_amax,
    scale_from_amax,
    scale_product,
    scale_shape,
)  # fmt: skip
from kernel_lib.fp8.scaling import granularity as _granularity

NONFINITE = ("raise", "nan")
MX_FORMATS = (Fp8Format.E4M3FN, Fp8Format.E5M2)  # the FP8 element types OCP MX v1.0 defines


@dataclass(frozen=True)
class Fp8Tensor:
    """FP8 data with its quantisation scale: x ~= data / scale. scale: (), (..., 1) or one per
    block (`scaling.scale_shape`); MX scales are powers of two (`e8m0_scale` holds them exactly)."""

    data: torch.Tensor
    scale: torch.Tensor  # fp32, q = x * scale
    amax: torch.Tensor  # fp32 max |x| over finite values per group, for delayed-scaling histories
    fmt: Fp8Format
    granularity: Granularity

    @property
    def inverse_scale(self) -> torch.Tensor:
        """1 / scale: what dequantisation and `torch._scaled_mm`'s scale_a / scale_b expect."""
        return self.scale.reciprocal()

    def e8m0_scale(self) -> torch.Tensor:
        """The inverse scales as torch.float8_e8m0fnu (MX only: exact for powers of two)."""
        if self.granularity is not Granularity.MX:
            raise ValueError(f"e8m0 scales are MX's, not granularity={self.granularity.value!r}")
        return self.inverse_scale.to(torch.float8_e8m0fnu)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self, dtype=dtype)


def _check(x: torch.Tensor, gran: Granularity, nonfinite: str, fmt: Fp8Format) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x))}")
    if nonfinite not in NONFINITE:
        raise ValueError(f"nonfinite={nonfinite!r} must be one of {list(NONFINITE)}")
    if gran is Granularity.BLOCKWISE and x.dim() != 2:
        raise ValueError(f"blockwise scaling needs a 2-D x, got x.shape={tuple(x.shape)}")
    if gran is not Granularity.TENSORWISE and x.dim() < 1:
        raise ValueError(f"{gran.value} scaling needs x.dim() >= 1, got a 0-d tensor")
    if gran is Granularity.MX and fmt not in MX_FORMATS:
        raise ValueError(
            f"fmt={fmt.value!r}: MX scaling is defined for {[f.value for f in MX_FORMATS]} only"
        )


def _check_scale(scale: torch.Tensor, x: torch.Tensor, gran: Granularity) -> None:
    want = scale_shape(tuple(x.shape), gran)
    if tuple(scale.shape) != want:
        raise ValueError(
            f"scale.shape={tuple(scale.shape)} must be {want} for {gran.value} x{tuple(x.shape)}"
        )


def _raise_nonfinite(x: torch.Tensor) -> None:
    nan, inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
    raise ValueError(
        f"x has {nan} NaN and {inf} inf of {x.numel()} values; an FP8 cast would saturate or hide them "
        "(pass nonfinite='nan' to mark them NaN instead)"
    )


def quantize(
    x: torch.Tensor,
    *,
    fmt: Fp8Format | str = "e4m3fn",
    granularity: Granularity | str = "tensorwise",
    scale: torch.Tensor | None = None,
    margin: float = 0.0,
    nonfinite: str = "raise",
) -> Fp8Tensor:
    """Cast x to `fmt` with x * scale clamped to +-fp8_max (saturation is explicit, and counted by
    `cast_stats`). scale=None: dynamic, fp8_max / (amax * 2**margin) from x itself (MX: the
    power of two 2**(emax_elem - floor(log2(amax))), margin not applied; values past fp8_max,
    up to 2x, saturate as the MX spec says).

    x: (..., K), any float dtype; the scaled value is formed in fp32. nonfinite='raise' raises
    ValueError (with counts) on NaN/inf, which costs a host sync; 'nan' marks them NaN in the
    output and takes amax over finite values only. Raises ValueError/TypeError on bad arguments.
    """
    fmt = fp8_format(fmt)
    gran = _granularity(granularity)
    _check(x, gran, nonfinite, fmt)
    if scale is not None:
        _check_scale(scale, x, gran)
    info = format_info(fmt)
    finite = None
    if nonfinite == "nan":
        finite = torch.isfinite(x)
        group_amax = amax(torch.where(finite, x, 0.0), gran)
    else:
        group_amax = amax(x, gran)
        if not bool(torch.isfinite(group_amax).all()):
            _raise_nonfinite(x)
    if scale is None and gran is Granularity.MX:
        scale = mx_scale_from_amax(group_amax, fmt)
    elif scale is None:
        scale = scale_from_amax(group_amax, fmt, margin=margin)
    scaled = scale_product(x.float(), scale.float(), gran).clamp(-info.max, info.max)
    if finite is not None:
        scaled = torch.where(finite, scaled, torch.nan)
    return Fp8Tensor(scaled.to(info.dtype), scale.float(), group_amax, fmt, gran)


def dequantize(t: Fp8Tensor, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """data / scale in fp32, returned as `dtype`."""
    return (t.data.float() / broadcast_scale(t.scale, tuple(t.data.shape), t.granularity)).to(
        dtype
    )


def fp8_grid(fmt: Fp8Format | str) -> torch.Tensor:
    """Every finite non-negative value of `fmt` in fp64, ascending; index i is the bit pattern i."""
    info = format_info(fmt)
    values = torch.arange(128, dtype=torch.uint8).view(info.dtype).double()
    return values[torch.isfinite(values)]
