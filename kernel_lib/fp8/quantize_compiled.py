"""`quantize` compiled by torch.compile (Inductor), two ways, both bit-exact with
`quantize(..., nonfinite="nan")`:
- cast="bits": the FP8 cast written as one float add and integer bit arithmetic (eager torch's
  fp32 -> fp8 conversion is scalar; this measured ~1.2x faster than Inductor's own cast on an AMD
  EPYC with AVX-512-bf16, but 7.7x slower on an Intel Xeon with AMX);
- cast="plain": the same computation as `quantize`, written plainly (amax, scale, clamp,
  `.to(fp8)`), Inductor's own vectorised cast: the comparator every tuned variant is timed beside.
Which is faster depends on the CPU, so the benchmark measures both where it runs
(`kernel_lib.variants.tune`). Rowwise "bits" can also be compiled with `fuse_rows`: the graph
then returns no scale (it is recomputed from amax outside, bit-identically), so Inductor fuses
each row's amax loop and its cast loop under one outer loop (its outer-loop fusion) and the row
is cast while it is still in L1/L2, instead of an amax pass over all of x and then a cast pass
that reads x from memory again."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch._inductor.config  # registers the config module division_key reads

from kernel_lib.checks import Unsupported
from kernel_lib.fp8.formats import Fp8Format, format_info, fp8_format
from kernel_lib.fp8.quantize import Fp8Tensor
from kernel_lib.fp8.scaling import AMAX_EPS, Granularity, amax, scale_from_amax

CASTS = ("bits", "plain")


@dataclass(frozen=True)
class CastConstants:
    """What the bit cast to `fmt` needs: its mantissa bits, exponent bias, the fp32 bits of its
    max, its NaN code, and whether it is a fnuz format (no -0)."""

    mantissa_bits: int
    bias: int
    max_bits: int
    nan_code: int
    fnuz: bool


@functools.cache
def cast_constants(fmt: Fp8Format) -> CastConstants:
    info = format_info(fmt)
    return CastConstants(
        mantissa_bits=info.mantissa_bits,
        bias=1 - round(math.log2(info.smallest_normal)),  # 7, 15, 8, 16
        max_bits=torch.tensor(info.max, dtype=torch.float32).view(torch.int32).item(),
        nan_code=torch.tensor(float("nan")).to(info.dtype).view(torch.uint8).item(),
        fnuz=fmt in (Fp8Format.E4M3FNUZ, Fp8Format.E5M2FNUZ),
    )


def _codes(
    bits: torch.Tensor, sign: torch.Tensor, finite: torch.Tensor, c: CastConstants
) -> torch.Tensor:
    """FP8 bit patterns of sign * y, from the fp32 bits of y (0 <= y <= max); c.nan_code where
    the int32 mask `finite` is 0 (it is all ones elsewhere). One float add rounds y
    to the FP8 grid: `magic` = 2**(e + 23 - m) for y's binade e (subnormals use the smallest normal
    binade), so the sum's fp32 ulp is the FP8 ulp and the hardware rounds to nearest even. The
    sum's bits minus the magic's bits count FP8 ulps above the binade start, which is the code once
    the binade's own offset is added; a carry into the next binade comes out right by itself."""
    m, bias = c.mantissa_bits, c.bias
    min_exp = (127 + 1 - bias) << 23  # fp32 exponent field of the smallest normal
    exp = torch.clamp_min(bits & 0x7F800000, min_exp)
    magic = exp + ((23 - m) << 23)
    ulps = (bits.view(torch.float32) + magic.view(torch.float32)).view(torch.int32) - magic
    code = ulps + (exp >> (23 - m)) - ((128 - bias) << m)
    if c.fnuz:
        sign = sign * (code != 0).to(torch.int32)  # fnuz has no -0: 0x80 is its NaN
    return (((code | sign) & finite) | (c.nan_code & ~finite)).to(torch.uint8)


def _quantize_impl(
    x: torch.Tensor,
    out: torch.Tensor,
    fmt: Fp8Format,
    gran: Granularity,
    c: CastConstants,
    fuse_rows: bool = False,
):
    """Writes the codes into `out`; returns (amax, scale), or amax alone with `fuse_rows`. Non-negative floats order like their
    bit patterns, so |x|, the finite test, amax and the clamp to max are integer ops (a float max
    or clamp costs three instructions for NaN propagation). Inductor makes this an amax loop and
    then the cast loop, which reads x again (from memory, for large x)."""
    info = format_info(fmt)
    bits = x.float().view(torch.int32)
    mag = bits & 0x7FFFFFFF
    # all ones where x is finite, else 0: two integer ops (a bool mask and `where` compile to four)
    finite = (mag - 0x7F800000) >> 31
    group_amax = mag & finite
    group_amax = (
        group_amax.amax()
        if gran is Granularity.TENSORWISE
        else group_amax.amax(dim=-1, keepdim=True)
    )
    group_amax = group_amax.view(torch.float32)
    scale = _scale(group_amax, info.max)
    y = (mag.view(torch.float32) * scale).view(torch.int32)
    y = torch.clamp_max(y, c.max_bits)  # the fp32 bits of the format's max
    sign = (bits >> 24) & 0x80  # also set for -0.0, as torch's cast keeps -0
    out.copy_(_codes(y, sign, finite, c))  # stored straight into `out`
    return group_amax if fuse_rows else (group_amax, scale)


# Triton's fp32 `/` is an approximate division (up to 2 ulp) unless Inductor is told to emit
# div_rn: the scale must be eager's correctly rounded quotient on a GPU too. (C++ is exact.) The
# key's spellings, newest first: torch 2.11's and later, and torch 2.10's (sic, "divison").
DIVISION_KEYS = ("eager_numerics.division_rounding", "emulate_divison_rounding")


def division_key(config=None) -> str:
    """The first of DIVISION_KEYS that `config` (torch._inductor.config) has; the newest where
    it has neither (`inductor_patch` then says the key is missing)."""
    config = config if config is not None else torch._inductor.config
    for key in DIVISION_KEYS:
        try:
            functools.reduce(getattr, key.split("."), config)
            return key
        except AttributeError:
            continue
    return DIVISION_KEYS[0]


EXACT_DIVISION = {division_key(): True}  # the spelling this torch uses


def inductor_patch(settings: dict):
    """torch._inductor.config.patch(settings), or Unsupported naming the first key the running
    torch lacks (a key added after it: torch 2.10 has no eager_numerics.division_rounding)."""
    for key in settings:
        try:
            functools.reduce(getattr, key.split("."), torch._inductor.config)
        except AttributeError:
            raise Unsupported(
                f"torch {torch.__version__}'s Inductor has no config key {key}"
            ) from None
    return torch._inductor.config.patch(settings)


def _scale(group_amax: torch.Tensor, fp8_max: float) -> torch.Tensor:
    """fp8_max / amax as a true division (`fp8_max / t` compiles to a reciprocal and a multiply,
    which rounds differently), the same in eager and in the compiled graph."""
    return torch.div(torch.full_like(group_amax, fp8_max), group_amax.clamp(min=AMAX_EPS))


def _plain_impl(x: torch.Tensor, out: torch.Tensor, fmt: Fp8Format, gran: Granularity):
    """`quantize(x, nonfinite="nan")` as plain ops, written into `out`; returns (amax, scale)."""
    info = format_info(fmt)
    finite = torch.isfinite(x)
    group_amax = amax(torch.where(finite, x, 0.0), gran)
    scale = scale_from_amax(group_amax, fmt)
    scaled = (x.float() * scale).clamp(-info.max, info.max)
    out.copy_(torch.where(finite, scaled, torch.nan).to(info.dtype))
    return group_amax, scale


@functools.cache
def _compiled(fmt: Fp8Format, gran: Granularity, cast: str, fuse_rows: bool):
    if cast == "plain":
        return torch.compile(functools.partial(_plain_impl, fmt=fmt, gran=gran), dynamic=False)
    impl = functools.partial(
        _quantize_impl, fmt=fmt, gran=gran, c=cast_constants(fmt), fuse_rows=fuse_rows
    )
    return torch.compile(impl, dynamic=False)


def output_for(
    x: torch.Tensor, fmt: Fp8Format, out: torch.Tensor | None, granularity: str
) -> torch.Tensor:
    """`out`, or a fresh `fmt` tensor of x's shape, for a dynamic tensorwise or rowwise quantise
    into it. Raises ValueError if `out` is not of `fmt` and x's shape, or on another granularity."""
    dtype = format_info(fmt).dtype
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != dtype:
        raise ValueError(
            f"out must be {dtype} of shape {tuple(x.shape)}, got {out.dtype} {tuple(out.shape)}"
        )
    if granularity not in ("tensorwise", "rowwise"):
        raise ValueError(
            f"granularity={granularity!r} must be one of ['tensorwise', 'rowwise'] here"
        )
    return out


def compiled_quantize(
    x: torch.Tensor,
    *,
    fmt: Fp8Format | str = "e4m3fn",
    granularity: Granularity | str = "tensorwise",
    out: torch.Tensor | None = None,
    cast: str = "bits",
    fuse_rows: bool = False,
) -> Fp8Tensor:
    """Dynamic tensorwise or rowwise quantize, one compiled graph per (format, granularity, shape);
    `cast` "bits" or "plain", `fuse_rows` (rowwise "bits" only) one pass over each row (see the
    module docstring).
        x: (..., K) float; NaN/inf come back as NaN (no host sync). `out`: a preallocated FP8 tensor
        of x's shape to write into (a fresh large allocation costs page faults on CPU, as `clone`
        does). First call compiles (seconds). Raises kernel_lib.checks.Unsupported once 64 graphs
    were compiled in this process (a skipped record, never an eager run under this name)."""
    fmt = fp8_format(fmt)
    out = output_for(x, fmt, out, granularity)
    if cast not in CASTS:
        raise ValueError(f"cast={cast!r} must be one of {list(CASTS)}")
    if fuse_rows and (cast, granularity) != ("bits", "rowwise"):
        raise ValueError(f"fuse_rows is built for cast='bits' rowwise, not {cast!r} {granularity}")
    gran = Granularity(granularity)
    # Every (format, granularity, shape) is its own graph of one function: raise the per-function
    # limit from 8, and say so rather than silently run eager when it is hit.
    try:
        with (
            torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True),
            inductor_patch(EXACT_DIVISION),
        ):
            codes = out.view(torch.uint8) if cast == "bits" else out
            got = _compiled(fmt, gran, cast, fuse_rows)(x, codes)
    except torch._dynamo.exc.FailOnRecompileLimitHit as why:
        raise Unsupported(
            f"compiled_quantize: recompile limit (64 graphs) hit in this process: "
            f"{str(why).splitlines()[0][:120]}"
        ) from None
    group_amax, scale = (got, _scale(got, format_info(fmt).max)) if fuse_rows else got
    return Fp8Tensor(out, scale, group_amax, fmt, gran)
