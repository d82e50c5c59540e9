"""FP8 formats: OCP/NVIDIA e4m3fn and e5m2, AMD MI300 e4m3fnuz and e5m2fnuz; ranges read from torch.finfo."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import pandas as pd
import torch


class Fp8Format(str, Enum):
    """The four FP8 encodings torch supports; string values so parameter files map straight onto them."""

    E4M3FN = "e4m3fn"  # OCP/NVIDIA: no inf, one NaN pattern, max 448; forward weights/activations
    E5M2 = "e5m2"  # OCP/NVIDIA: IEEE-like with inf, max 57344; gradients
    E4M3FNUZ = "e4m3fnuz"  # AMD MI300: no inf, NaN = 0x80 (no -0), exponent bias 8, max 240
    E5M2FNUZ = "e5m2fnuz"  # AMD MI300: as above with 5 exponent bits


FORMATS = tuple(f.value for f in Fp8Format)

_DTYPES = {
    Fp8Format.E4M3FN: torch.float8_e4m3fn,
    Fp8Format.E5M2: torch.float8_e5m2,
    Fp8Format.E4M3FNUZ: torch.float8_e4m3fnuz,
    Fp8Format.E5M2FNUZ: torch.float8_e5m2fnuz,
}
_MANTISSA_BITS = {
    Fp8Format.E4M3FN: 3,
    Fp8Format.E5M2: 2,
    Fp8Format.E4M3FNUZ: 3,
    Fp8Format.E5M2FNUZ: 2,
}


def fp8_format(fmt: str | Fp8Format) -> Fp8Format:
    """The Fp8Format named by `fmt`; ValueError listing the valid names."""
    if isinstance(fmt, Fp8Format):
        return fmt
    if fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} must be one of {list(FORMATS)}")
    return Fp8Format(fmt)


@dataclass(frozen=True)
class FormatInfo:
    """Range and resolution of one format: max and smallest normal from torch.finfo, the rest derived."""

    name: str
    dtype: torch.dtype
    max: float  # largest finite value; casts saturate here (e4m3fn even maps inf -> 448)
    smallest_normal: float
    min_subnormal: (
        float  # smallest_normal / 2**mantissa_bits: below half of it a value flushes to 0
    )
    eps: float  # ulp at 1.0; the worst relative rounding error of a normal value is eps / 2
    mantissa_bits: int
    has_inf: bool


def format_info(fmt: str | Fp8Format) -> FormatInfo:
    """Range and resolution of `fmt` (one of FORMATS)."""
    fmt = fp8_format(fmt)
    dtype = _DTYPES[fmt]
    fi = torch.finfo(dtype)
    mbits = _MANTISSA_BITS[fmt]
    return FormatInfo(
        name=fmt.value,
        dtype=dtype,
        max=float(fi.max),
        smallest_normal=float(fi.smallest_normal),
        min_subnormal=float(fi.smallest_normal) / 2**mbits,
        # 2**-mantissa_bits: torch 2.13's finfo(float8_e5m2fnuz).eps says 0.125, but 1.125 rounds to 1.0
        eps=2.0**-mbits,
        mantissa_bits=mbits,
        has_inf=fmt is Fp8Format.E5M2,
    )


def fp8_dtype(fmt: str | Fp8Format) -> torch.dtype:
    """The torch dtype of `fmt`."""
    return _DTYPES[fp8_format(fmt)]


def format_table(formats: list[str] | None = None) -> pd.DataFrame:
    """One row per format: max, smallest normal/subnormal, eps and dynamic range in binades."""
    rows = []
    for name in formats or FORMATS:
        info = format_info(name)
        rows.append({
            "format": info.name,
            "torch dtype": str(info.dtype).removeprefix("torch."),
            "max": info.max,
            "smallest normal": info.smallest_normal,
            "min subnormal": info.min_subnormal,
            "eps": info.eps,
            "binades": round(math.log2(info.max / info.min_subnormal), 2),
            "inf": info.has_inf,
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("format")
