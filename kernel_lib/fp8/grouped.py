"""FP8 grouped GEMM for MoE experts: tokens sorted by expert times each expert's weight, rowwise
scaled (one scale per token, one per expert output channel), through `torch._scaled_grouped_mm`,
beside a loop of rowwise `torch._scaled_mm` calls, one per expert, as its twin.

Letters: T routed tokens (rows of x, grouped by expert), E experts, K in, N out features.
`_scaled_grouped_mm(a, b, scale_a, scale_b, offs)`: a (T, K) row-major, b (E, K, N) column-major,
scale_a (T,), scale_b (E, N) fp32 inverse scales, offs (E,) int32 cumulative row ends; bf16 out.
torch 2.13 has no CPU kernel for it (NotImplementedError), found by a probe on a tiny shape.
"""

from __future__ import annotations

import functools

import torch

from kernel_lib.backends.probes import CRASHES
from kernel_lib.checks import Unsupported
from kernel_lib.fp8.formats import Fp8Format
from kernel_lib.fp8.matmul import raw_scaled_mm
from kernel_lib.fp8.quantize import Fp8Tensor, quantize


def group_offsets(counts: list[int], *, device=None) -> torch.Tensor:
    """Cumulative row ends of the groups, int32 as `_scaled_grouped_mm` wants; ValueError on a
    negative count. Cached per counts and device: a timed call copies nothing to the device."""
    if any(c < 0 for c in counts):
        raise ValueError(f"counts={counts} must be >= 0")
    return _offsets(tuple(counts), str(torch.device(device or "cpu")))


@functools.lru_cache(maxsize=64)
def _offsets(counts: tuple[int, ...], device: str) -> torch.Tensor:
    return torch.tensor(counts, dtype=torch.int64).cumsum(0).to(device, torch.int32)


def quantize_experts(
    x: torch.Tensor, weights: torch.Tensor, *, fmt: Fp8Format | str = "e4m3fn"
) -> tuple[Fp8Tensor, Fp8Tensor]:
    """x (T, K) per token and weights (E, N, K) per expert output channel, rowwise."""
    if weights.dim() != 3 or x.dim() != 2 or x.shape[1] != weights.shape[2]:
        raise ValueError(
            f"x.shape={tuple(x.shape)} must be (T, K) and weights.shape={tuple(weights.shape)} (E, N, K)"
        )
    rowwise = {"fmt": fmt, "granularity": "rowwise"}
    return quantize(x, **rowwise), quantize(weights, **rowwise)


def _native(qx: Fp8Tensor, qw: Fp8Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch._scaled_grouped_mm(
        qx.data,
        qw.data.transpose(-2, -1),
        qx.inverse_scale.reshape(-1),
        qw.inverse_scale.squeeze(-1).contiguous(),
        offs=offs,
        out_dtype=torch.bfloat16,
    )


@functools.cache
def scaled_grouped_mm_unsupported(device: str) -> str | None:
    """Why `scaled_grouped_mm` cannot run on `device` (a 2-expert, 32 x 16 x 16 probe raised),
    or None."""
    qx, qw = quantize_experts(
        torch.ones(32, 16, device=device), torch.ones(2, 16, 16, device=device)
    )
    try:
        _native(qx, qw, group_offsets([16, 16], device=device))
    except (RuntimeError, ValueError, NotImplementedError) as why:
        return f"unsupported: torch._scaled_grouped_mm has no kernel for {device} ({type(why).__name__})"
    return None


def _check_groups(qx: Fp8Tensor, qw: Fp8Tensor, counts: list[int]) -> None:
    if len(counts) != qw.data.shape[0] or sum(counts) != qx.data.shape[0]:
        raise ValueError(
            f"counts={counts} must have E={qw.data.shape[0]} entries summing to T={qx.data.shape[0]}"
        )


def scaled_grouped_mm(qx: Fp8Tensor, qw: Fp8Tensor, counts: list[int]) -> torch.Tensor:
    """Row block g of x (counts[g] rows, in expert order) times expert g's weight.T, in one
    `torch._scaled_grouped_mm`. qx: (T, K), qw: (E, N, K) rowwise -> (T, N) bf16. ValueError on
    counts that do not match; Unsupported where the device has no kernel."""
    _check_groups(qx, qw, counts)
    if reason := scaled_grouped_mm_unsupported(str(qx.data.device)):
        raise Unsupported(reason)
    return _native(qx, qw, group_offsets(counts, device=qx.data.device))


def looped_scaled_mm(qx: Fp8Tensor, qw: Fp8Tensor, counts: list[int]) -> torch.Tensor:
    """The same as `scaled_grouped_mm`, one rowwise `torch._scaled_mm` per non-empty expert
    (bf16 out, as rowwise kernels produce). Runs where `_scaled_mm` does (a CPU's oneDNN too)."""
    _check_groups(qx, qw, counts)
    t, n = qx.data.shape[0], qw.data.shape[1]
    out = torch.empty(t, n, dtype=torch.bfloat16, device=qx.data.device)
    start = 0
    for g, count in enumerate(counts):
        rows = slice(start, start + count)
        start += count
        if count:
            out[rows] = raw_scaled_mm(
                qx.data[rows],
                qw.data[g].t(),
                qx.inverse_scale[rows],
                qw.inverse_scale[g].reshape(1, n),
                out_dtype=torch.bfloat16,
            )
    return out


def skewed_counts(tokens: int, experts: int, *, seed: int = 0) -> list[int]:
    """Rows per expert as routers skew them: `tokens` draws from Zipf weights 1 / rank over the
    first E - 1 experts (seeded), the last expert always empty (an empty group is the edge case
    grouped kernels get wrong). ValueError unless experts >= 2 and tokens >= 0."""
    if experts < 2 or tokens < 0:
        raise ValueError(f"experts={experts} must be >= 2 and tokens={tokens} >= 0")
    if tokens == 0:
        return [0] * experts
    weights = 1.0 / torch.arange(1, experts, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.multinomial(weights, tokens, replacement=True, generator=gen)
    return torch.bincount(picks, minlength=experts).tolist()


@functools.cache
def grouped_mm_unsupported(device: str) -> str | None:
    """Why bf16 `torch._grouped_mm` cannot run on `device` (a 2-expert probe raised, or probing
    would kill the process), or None."""
    if crash := CRASHES.get((torch.device(device).type, "_grouped_mm")):
        return f"unsupported: {crash}"
    x, w = (torch.ones(s, device=device, dtype=torch.bfloat16) for s in ((32, 16), (2, 16, 16)))
    try:
        torch._grouped_mm(x, w.transpose(-2, -1), offs=group_offsets([16, 16], device=device))
    except (RuntimeError, NotImplementedError) as why:
        return f"unsupported: torch._grouped_mm has no bf16 kernel for {device} ({type(why).__name__})"
    return None


def bf16_grouped_mm(x: torch.Tensor, weights: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The bf16 baseline: x (T, K) row groups times weights (E, N, K).T in one
    `torch._grouped_mm` -> (T, N) bf16; Unsupported where the device has no kernel."""
    if reason := grouped_mm_unsupported(str(x.device)):
        raise Unsupported(reason)
    return torch._grouped_mm(
        x, weights.transpose(-2, -1), offs=group_offsets(counts, device=x.device)
    )
