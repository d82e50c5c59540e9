"""Quantisation error metrics: SQNR, relative error, and per-format/per-scaling tables."""

from __future__ import annotations

import math

import pandas as pd
import torch

from kernel_lib.checks import relative_error
from kernel_lib.fp8.quantize import dequantize, quantize
from kernel_lib.fp8.scaling import GRANULARITIES

KINDS = ("normal", "outlier_rows", "outlier_columns", "lognormal")


def error_metrics(reference: torch.Tensor, approx: torch.Tensor) -> dict:
    """SQNR (dB), relative Frobenius error and max abs error of `approx` against `reference` (fp64)."""
    ref, out = reference.double(), approx.double()
    noise = (out - ref).norm().item()
    signal = ref.norm().item()
    return {
        "sqnr_db": 20 * math.log10(signal / noise) if noise > 0 else math.inf,
        "rel_error": noise / signal if signal > 0 else math.nan,
        "max_abs_error": (out - ref).abs().max().item() if ref.numel() else 0.0,
    }


def sample_tensor(kind: str, shape: tuple[int, int], *, seed: int = 0) -> torch.Tensor:
    """Test inputs: 'normal' N(0,1), 'outlier_rows' (1 row in 64 x1e4, as extreme activation outliers),
    'outlier_columns' (1 column in 64 x100: the outlier feature channels of LLM activations),
    'lognormal' (values over many binades)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    if kind == "normal":
        return x
    if kind == "outlier_rows":
        rows = torch.randperm(shape[0], generator=gen)[: max(1, shape[0] // 64)]
        x[rows] *= 1e4
        return x
    if kind == "outlier_columns":
        cols = torch.randperm(shape[1], generator=gen)[: max(1, shape[1] // 64)]
        x[:, cols] *= 100
        return x
    if kind == "lognormal":
        return torch.sign(x) * torch.exp(2.0 * torch.randn(shape, generator=gen))
    raise ValueError(f"kind={kind!r} must be one of {list(KINDS)}")


def _median_row_sqnr(x: torch.Tensor, back: torch.Tensor) -> float:
    noise = (back - x.double()).norm(dim=-1)
    return torch.median(20 * torch.log10(x.double().norm(dim=-1) / noise.clamp(min=1e-300))).item()


def quantization_error_table(
    x: torch.Tensor, *, formats: list[str], granularities: list[str]
) -> pd.DataFrame:
    """One row per (format, granularity) of a 2-D x: SQNR, relative error and max error over the
    whole tensor (dominated by its largest rows), the median over rows of each row's SQNR (what
    a typical row keeps when a few rows are outliers), and the share of values flushed to zero."""
    rows = []
    for fmt in formats:
        for gran in granularities:
            q = quantize(x, fmt=fmt, granularity=gran)
            back = dequantize(q, dtype=torch.float64)
            flushed = ((back == 0) & (x != 0)).double().mean().item()
            rows.append(
                {
                    "format": fmt,
                    "granularity": gran,
                    **error_metrics(x, back),
                    "median_row_sqnr_db": _median_row_sqnr(x, back),
                    "flushed_to_zero": flushed,
                }
            )
    return pd.DataFrame(rows)


def relative_errors(x: torch.Tensor, *, formats: list[str], granularity: str) -> pd.DataFrame:
    """Per-element |dequant(quant(x)) - x| / |x| over nonzero x, per format (for histograms).
    Columns: format, rel_error."""
    frames = []
    nz = x != 0
    for fmt in formats:
        back = dequantize(quantize(x, fmt=fmt, granularity=granularity), dtype=torch.float64)
        err = ((back - x.double()).abs() / x.double().abs())[nz]
        frames.append(pd.DataFrame({"format": fmt, "rel_error": err.cpu().numpy()}))
    return pd.concat(frames, ignore_index=True)


def recipe_error_table(tensors: dict[str, torch.Tensor], *, fmt: str = "e4m3fn") -> pd.DataFrame:
    """One row per (tensor, granularity) of every granularity (tensorwise, rowwise, 128x128 and
    1x128 blockwise, MX) on the same 2-D tensors, in `fmt` (MX: e4m3fn or e5m2): SQNR (dB),
    max relative error (max |dequant - x| / max |x|, `checks.relative_error`) and the median
    row's SQNR."""
    rows = []
    for name, x in tensors.items():
        for gran in GRANULARITIES:
            back = dequantize(quantize(x, fmt=fmt, granularity=gran), dtype=torch.float64)
            rows.append({
                "tensor": name,
                "granularity": gran,
                "sqnr_db": error_metrics(x, back)["sqnr_db"],
                "max_rel_error": relative_error(back, x.double()),
                "median_row_sqnr_db": _median_row_sqnr(x, back),
            })  # fmt: skip
    return pd.DataFrame(rows)
