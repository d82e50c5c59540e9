"""Scaling recipes: tensorwise, rowwise, blockwise (128x128 and 1x128, the DeepSeek-V3 recipe,
arXiv:2412.19437 section 3.3) and MX (1x32 power-of-two scales, OCP Microscaling Formats v1.0) amax;
dynamic and delayed (amax history) scales.

Convention: a *quantisation* scale s maps x to x * s in FP8 range (s = fp8_max / amax; MX:
s = 2**(emax_elem - floor(log2(amax)))); dequantisation, and `torch._scaled_mm`'s scale_a/scale_b,
use the inverse 1 / s. A K (or M) that is not a multiple of the block leaves a partial last block,
scaled by the amax of the elements it has (as if zero-padded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from kernel_lib.fp8.formats import Fp8Format, format_info

BLOCK = 128  # DeepSeek-V3 style 128x128 weight blocks and 1x128 activation blocks
MX_BLOCK = 32  # OCP MX: 32 consecutive elements along K share one scale
E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127  # the exponents an e8m0 scale (torch.float8_e8m0fnu) holds
AMAX_EPS = 1e-12  # an all-zero tensor gets scale fp8_max / 1e-12 rather than inf (as torchao does)


class Granularity(str, Enum):
    TENSORWISE = "tensorwise"  # one scale: fastest, one outlier shrinks every value's resolution
    ROWWISE = "rowwise"  # one scale per row (per token / per output channel): handles outlier rows
    BLOCKWISE = "blockwise"  # one scale per 128x128 block of a 2-D tensor (DeepSeek-V3 weights)
    BLOCKWISE_1X128 = "blockwise_1x128"  # one per row per 128 along K (DeepSeek-V3 activations)
    MX = "mx"  # one power-of-two (e8m0) scale per row per 32 along K: MXFP8 (e4m3fn, e5m2 only)


class ScalingMode(str, Enum):
    DYNAMIC = "dynamic"  # amax of the tensor being cast, every call
    DELAYED = "delayed"  # max over an amax history of earlier calls (Transformer Engine's recipe)


GRANULARITIES = tuple(g.value for g in Granularity)
# (rows, columns) of one scaling block, for the block granularities; 1-row blocks run along K of
# any (..., K) tensor, 128x128 blocks need a 2-D one.
BLOCK_SHAPES = {
    Granularity.BLOCKWISE: (BLOCK, BLOCK),
    Granularity.BLOCKWISE_1X128: (1, BLOCK),
    Granularity.MX: (1, MX_BLOCK),
}
MODES = tuple(m.value for m in ScalingMode)


def granularity(value: str | Granularity) -> Granularity:
    """The Granularity named by `value`; ValueError listing the valid names."""
    if isinstance(value, Granularity):
        return value
    if value not in GRANULARITIES:
        raise ValueError(f"granularity={value!r} must be one of {list(GRANULARITIES)}")
    return Granularity(value)


@dataclass(frozen=True)
class ScalingRecipe:
    """How one operand's scale is chosen."""

    granularity: Granularity = Granularity.TENSORWISE
    mode: ScalingMode = ScalingMode.DYNAMIC
    history_len: int = 16  # delayed only: calls remembered; longer reacts slower to growing amax
    margin: float = 0.0  # scale divided by 2**margin: headroom against amax growth (delayed)

    def __post_init__(self):
        object.__setattr__(self, "granularity", granularity(self.granularity))
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {list(MODES)}")
        object.__setattr__(self, "mode", ScalingMode(self.mode))
        if self.history_len < 1:
            raise ValueError(f"history_len={self.history_len} must be >= 1")
        if not math.isfinite(self.margin) or self.margin < 0:
            raise ValueError(f"margin={self.margin} must be finite and >= 0")
        if self.mode is ScalingMode.DELAYED and self.granularity is not Granularity.TENSORWISE:
            raise NotImplementedError(
                f"delayed scaling is built for tensorwise only, not granularity={self.granularity.value!r}"
            )


RECIPES = {
    "tensorwise_dynamic": ScalingRecipe(Granularity.TENSORWISE, ScalingMode.DYNAMIC),
    "rowwise_dynamic": ScalingRecipe(Granularity.ROWWISE, ScalingMode.DYNAMIC),
    "tensorwise_delayed": ScalingRecipe(
        Granularity.TENSORWISE, ScalingMode.DELAYED, history_len=16
    ),
}


def scaling_recipe(name: str) -> ScalingRecipe:
    """A named preset (exact name); ValueError listing the valid ones."""
    if name not in RECIPES:
        raise ValueError(f"recipe={name!r} must be one of {list(RECIPES)}")
    return RECIPES[name]


def scale_shape(shape: tuple[int, ...], gran: Granularity) -> tuple[int, ...]:
    """Shape of the scale for a tensor of `shape`: (), (..., 1), (ceil(M/128), ceil(K/128)) or,
    for 1-row blocks of width b, (..., ceil(K/b))."""
    if gran is Granularity.TENSORWISE:
        return ()
    if gran is Granularity.ROWWISE:
        return (*shape[:-1], 1)
    rows, cols = BLOCK_SHAPES[gran]
    if rows == 1:
        return (*shape[:-1], math.ceil(shape[-1] / cols))
    return (math.ceil(shape[0] / rows), math.ceil(shape[1] / cols))


def _block_amax(a: torch.Tensor, gran: Granularity) -> torch.Tensor:
    """max of the non-negative `a` per block: zero padding to whole blocks leaves it unchanged."""
    rows, cols = BLOCK_SHAPES[gran]
    if rows == 1:
        p = torch.nn.functional.pad(a, (0, -a.shape[-1] % cols))
        return p.reshape(*p.shape[:-1], p.shape[-1] // cols, cols).amax(dim=-1)
    m, k = a.shape
    p = torch.nn.functional.pad(a, (0, -k % cols, 0, -m % rows))
    return p.reshape(p.shape[0] // rows, rows, p.shape[1] // cols, cols).amax(dim=(1, 3))


def amax(x: torch.Tensor, gran: Granularity | str) -> torch.Tensor:
    """max |x| per scaling group as fp32 (NaN/inf propagate). x: (..., K); blockwise needs (M, K)."""
    gran = granularity(gran)
    a = x.abs()
    if gran is Granularity.TENSORWISE:
        return a.max().float()  # not amax(): torch_xla 2.9 reads amax() as "reduce no dim"
    if gran is Granularity.ROWWISE:
        return a.amax(dim=-1, keepdim=True).float()
    return _block_amax(a, gran).float()


def scale_from_amax(
    amax: torch.Tensor, fmt: Fp8Format | str, *, margin: float = 0.0
) -> torch.Tensor:
    """Quantisation scale fp8_max / (amax * 2**margin) in fp32; amax is clamped to AMAX_EPS."""
    fmax = format_info(fmt).max
    denominator = amax.float().clamp(min=AMAX_EPS) * 2.0**margin
    # torch.div, not `fmax / tensor`: Tensor.__rtruediv__ is reciprocal-then-multiply (two roundings)
    return torch.div(torch.full_like(denominator, fmax), denominator)  # no host-to-device copy


def scale_product(x: torch.Tensor, scale: torch.Tensor, gran: Granularity) -> torch.Tensor:
    """x * scale, each element times its group's scale. 1-row blocks: the whole blocks as a
    (..., K // b, b) view and the partial last block apart, concatenated. torch 2.13's Inductor
    (CPU) miscompiles the per-element expansion (gather by k // b, repeat_interleave or padded
    blocks) when K is not a multiple of b, reading out of bounds; this form compiles right.
    128x128 blocks still go through the expansion (see tests/fp8/test_quantize.py)."""
    if gran not in BLOCK_SHAPES or BLOCK_SHAPES[gran][0] != 1:
        return x * broadcast_scale(scale, tuple(x.shape), gran)
    width, k, lead = BLOCK_SHAPES[gran][1], x.shape[-1], x.shape[:-1]
    whole, n = k - k % width, k // width
    head = x[..., :whole].reshape(*lead, n, width) * scale[..., :n, None]
    head = head.reshape(*lead, whole)
    return head if whole == k else torch.cat([head, x[..., whole:] * scale[..., n:]], dim=-1)


def emax_elem(fmt: Fp8Format | str) -> int:
    """floor(log2(fp8_max)): the largest exponent of the element format (e4m3fn 8, e5m2 15)."""
    return math.floor(math.log2(format_info(fmt).max))


def mx_scale_from_amax(amax: torch.Tensor, fmt: Fp8Format | str) -> torch.Tensor:
    """MX quantisation scale 2**-e in fp32, e = floor(log2(amax)) - emax_elem clamped to the e8m0
    range; amax 0 (or subnormal) gives e = -127. The exponent is read from amax's fp32 bits
    (exact, no log2 rounding): a subnormal or zero amax reads as -127, which clamps the same."""
    biased = (amax.float().view(torch.int32) >> 23) & 0xFF
    e = (biased - 127 - emax_elem(fmt)).clamp(E8M0_MIN_EXP, E8M0_MAX_EXP)
    # -e lies in [-119, 127] (amax <= fp32 max): a normal fp32 power of two, built from its bits
    return ((127 - e) << 23).view(torch.float32)


def broadcast_scale(
    scale: torch.Tensor, shape: tuple[int, ...], gran: Granularity | str
) -> torch.Tensor:
    """`scale` expanded to one value per element of a tensor of `shape`."""
    gran = granularity(gran)
    if gran not in BLOCK_SHAPES:
        return scale
    rows, cols = BLOCK_SHAPES[gran]
    col_block = torch.arange(shape[-1], device=scale.device) // cols
    if rows == 1:
        return scale[..., col_block]
    row_block = torch.arange(shape[0], device=scale.device) // rows
    return scale[row_block[:, None], col_block[None, :]]


def delayed_scale(
    history: torch.Tensor, amax_now: torch.Tensor, fmt: Fp8Format | str, *, margin: float = 0.0
) -> torch.Tensor:
    """Scale from the max of the amax history; the current amax only while the history is empty
    (all zeros). No host sync: the choice is a `torch.where` on the device."""
    past = history.max()
    reference = torch.where(past > 0, past, amax_now.float())
    return scale_from_amax(reference, fmt, margin=margin)


def push_amax(history: torch.Tensor, amax_now: torch.Tensor) -> None:
    """Append `amax_now` to the history in place, dropping the oldest entry (non-finite ones too)."""
    value = torch.nan_to_num(amax_now.float(), nan=0.0, posinf=0.0)
    history.copy_(torch.cat([history[1:], value.reshape(1)]))


@dataclass(frozen=True)
class CastStats:
    """What a cast would do to each element, counted BEFORE the cast: FP8 casts saturate silently
    (e4m3fn maps even inf to 448) and flush tiny values to zero without a trace."""

    numel: int
    nan: int
    inf: int
    saturated: int  # finite x whose scaled value rounds past the format's max (clamped to +-max)
    underflow: int  # nonzero finite x whose scaled value rounds to zero

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf

    def as_dict(self) -> dict:
        return {
            "numel": self.numel,
            "nan": self.nan,
            "inf": self.inf,
            "saturated": self.saturated,
            "underflow": self.underflow,
        }


def cast_stats(
    x: torch.Tensor,
    scale: torch.Tensor,
    fmt: Fp8Format | str,
    gran: Granularity | str = Granularity.TENSORWISE,
) -> CastStats:
    """Count NaN, inf, saturating and underflowing elements of x * scale for a cast to `fmt`."""
    info = format_info(fmt)
    finite = torch.isfinite(x)
    scaled = x.float() * broadcast_scale(scale, tuple(x.shape), gran)
    mag = scaled.abs()
    # Round-to-nearest-even: exactly half the smallest subnormal rounds to 0 (the even neighbour).
    tiny = (x != 0) & (mag <= info.min_subnormal / 2)
    # Past max + half an ulp a value would round beyond max; up to there it rounds to max anyway
    # (so amax * (max / amax) landing one fp32 ulp above max is not saturation).
    overflow = info.max + 2.0 ** math.floor(math.log2(info.max)) * info.eps / 2
    return CastStats(
        numel=x.numel(),
        nan=int(torch.isnan(x).sum()),
        inf=int(torch.isinf(x).sum()),
        saturated=int((finite & (mag > overflow)).sum()),
        underflow=int((finite & tiny).sum()),
    )
