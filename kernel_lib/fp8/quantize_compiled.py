"""`quantize` compiled by torch.compile (Inductor), with the FP8 cast written as integer bit
arithmetic: on CPU, torch's elementwise fp32 -> fp8 conversion is scalar and takes most of the time,
while rounding on the fp32 bit pattern vectorises. Bit-exact with `quantize(..., nonfinite="nan")`."""

from __future__ import annotations

import functools
import math

import torch

from kernel_lib.fp8.formats import Fp8Format, format_info, fp8_format
from kernel_lib.fp8.quantize import Fp8Tensor
from kernel_lib.fp8.scaling import AMAX_EPS, Granularity, scale_from_amax


def _codes(y: torch.Tensor, finite: torch.Tensor, fmt: Fp8Format, nan_code: int) -> torch.Tensor:
    """FP8 bit patterns of y (|y| <= max): round to nearest even on the fp32 bits. Integer ops stay
    int32 and the float is bit-cast once, so Inductor keeps the loop vectorised."""
    info = format_info(fmt)
    m = info.mantissa_bits
    shift = 23 - m
    bias = 1 - round(math.log2(info.smallest_normal))  # 7, 15, 8, 16
    bits = y.view(torch.int32)
    sign = (bits >> 31) & 1  # also set for -0.0, as torch's cast keeps -0
    mag_bits = bits & 0x7FFFFFFF
    rounded = (mag_bits + ((1 << (shift - 1)) - 1) + ((mag_bits >> shift) & 1)) >> shift
    normal = rounded - ((127 - bias) << m)  # (exp32 << m | mantissa) rebased to the FP8 bias
    mag = y.abs()
    subnormal = torch.round(mag * (1.0 / info.min_subnormal)).to(torch.int32)  # 0 .. 2**m, exact
    code = torch.where(mag < info.smallest_normal, subnormal, normal)
    if fmt in (Fp8Format.E4M3FNUZ, Fp8Format.E5M2FNUZ):
        sign = sign * (code != 0).to(torch.int32)  # fnuz has no -0: 0x80 is its NaN
    code = code | (sign << 7)
    return torch.where(finite, code, nan_code).to(torch.uint8)


def _quantize_impl(x: torch.Tensor, out: torch.Tensor, fmt: Fp8Format, gran: Granularity, nan_code: int):
    info = format_info(fmt)
    finite = torch.isfinite(x)
    mag = torch.where(finite, x.abs(), 0.0).float()
    group_amax = mag.amax() if gran is Granularity.TENSORWISE else mag.amax(dim=-1, keepdim=True)
    # The scale is recomputed in the cast loop rather than stored first: a stored scale is a
    # separate loop over all rows, which splits the rowwise kernel into two passes over x.
    scale = torch.div(torch.full_like(group_amax, info.max), group_amax.clamp(min=AMAX_EPS))
    y = (x.float() * scale).clamp(-info.max, info.max)
    out.copy_(_codes(y, finite, fmt, nan_code))  # Inductor stores straight into `out`
    return group_amax


@functools.cache
def _compiled(fmt: Fp8Format, gran: Granularity):
    nan_code = torch.tensor(float("nan")).to(format_info(fmt).dtype).view(torch.uint8).item()
    return torch.compile(functools.partial(_quantize_impl, fmt=fmt, gran=gran, nan_code=nan_code),
                         dynamic=False)


def compiled_quantize(x: torch.Tensor, *, fmt: Fp8Format | str = "e4m3fn",
                      granularity: Granularity | str = "tensorwise",
                      out: torch.Tensor | None = None) -> Fp8Tensor:
    """Dynamic tensorwise or rowwise quantize, one compiled graph per (format, granularity, shape).
    x: (..., K) float; NaN/inf come back as NaN (no host sync). `out`: a preallocated FP8 tensor
    of x's shape to write into (a fresh large allocation costs page faults on CPU, as `clone`
    does). First call compiles (seconds)."""
    fmt = fp8_format(fmt)
    dtype = format_info(fmt).dtype
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != dtype:
        raise ValueError(f"out must be {dtype} of shape {tuple(x.shape)}, got {out.dtype} {tuple(out.shape)}")
    if granularity not in ("tensorwise", "rowwise"):
        raise ValueError(f"granularity={granularity!r} must be one of ['tensorwise', 'rowwise'] here")
    gran = Granularity(granularity)
    # Every (format, granularity, shape) is its own graph of one function: raise the per-function
    # limit from 8, and fail rather than silently run eager when it is hit.
    with torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True):
        group_amax = _compiled(fmt, gran)(x, out.view(torch.uint8))
    scale = scale_from_amax(group_amax, fmt)  # the same correctly rounded division, on (rows, 1)
    return Fp8Tensor(out, scale, group_amax, fmt, gran)
