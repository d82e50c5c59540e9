"""Triton kernels fusing amax, scale and FP8 cast: one kernel per row (rowwise), or three passes
(tensorwise, whose scale needs the whole tensor first): a partial amax per block into its own slot,
their max, then scale and cast. No program writes to an address another one writes (one-address
atomics serialise across the GPU).

Semantics match `quantize(..., nonfinite="nan")`: amax over finite values, non-finite values stored
as NaN, finite values clamped to +-fp8_max. GPU kernels; on CPU they run under TRITON_INTERPRET=1
(fp32/fp16/bf16 inputs) for tests only.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernel_lib.fp8.formats import Fp8Format, format_info, fp8_format
from kernel_lib.fp8.quantize import Fp8Tensor
from kernel_lib.fp8.scaling import AMAX_EPS, Granularity

BLOCK_SIZE = 1024  # elements per program in the tensorwise kernels
ROW_BLOCK = 1024  # columns per step inside a row program


@triton.jit
def _round_to_grid(y, smallest_normal, MBITS: tl.constexpr):
    """Round |y| <= fp8_max to the FP8 grid (nearest, ties to even) in fp32, so the final cast is
    exact whatever rounding the cast itself uses (the Triton interpreter truncates)."""
    mag = tl.abs(y)
    shift: tl.constexpr = 23 - MBITS
    bits = mag.to(tl.int32, bitcast=True)
    bits = bits + ((1 << (shift - 1)) - 1) + ((bits >> shift) & 1)
    normal = (bits & ~((1 << shift) - 1)).to(tl.float32, bitcast=True)
    # Below the smallest normal the spacing is fixed: adding and removing a constant whose fp32
    # ulp equals that spacing rounds to nearest even in the fp32 adder.
    magic = smallest_normal * 2.0 ** (23 - MBITS)
    sub = (mag + magic) - magic
    sign = y.to(tl.int32, bitcast=True) & -2147483648  # 0x80000000: keeps -0.0 as torch does
    rounded = tl.where(mag < smallest_normal, sub, normal).to(tl.int32, bitcast=True)
    return (rounded | sign).to(tl.float32, bitcast=True)


@triton.jit
def _fp8_code(
    x, scale, fmax, smallest_normal, FP8: tl.constexpr, MBITS: tl.constexpr, NAN_CODE: tl.constexpr
):
    """Bit pattern of x * scale clamped, rounded and cast; NaN/inf inputs get the NaN pattern
    (written as bits because the interpreter casts NaN to a finite e4m3fn value)."""
    y = _round_to_grid(tl.minimum(tl.maximum(x * scale, -fmax), fmax), smallest_normal, MBITS)
    code = y.to(FP8).to(tl.uint8, bitcast=True)
    return tl.where(tl.abs(x) < float("inf"), code, NAN_CODE)


@triton.jit
def _partial_amax_kernel(x_ptr, amax_ptr, bad_ptr, n, BLOCK: tl.constexpr):
    """Block b's amax over finite values into amax_ptr[b], its NaN/inf count into bad_ptr[b]."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    finite = tl.abs(x) < float("inf")  # False for inf and NaN
    tl.store(amax_ptr + pid, tl.max(tl.where(finite, tl.abs(x), 0.0), axis=0))
    tl.store(bad_ptr + pid, tl.sum((~finite & (offs < n)).to(tl.int32), axis=0))


@triton.jit
def _scale_cast_kernel(
    x_ptr,
    amax_ptr,
    q_ptr,
    bits_ptr,
    scale_ptr,
    n,
    fmax,
    smallest_normal,
    margin_mul,
    eps,
    MBITS: tl.constexpr,
    NAN_CODE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    scale = tl.math.div_rn(fmax, tl.maximum(tl.load(amax_ptr), eps) * margin_mul)
    if tl.program_id(0) == 0:
        tl.store(scale_ptr, scale)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    code = _fp8_code(x, scale, fmax, smallest_normal, q_ptr.dtype.element_ty, MBITS, NAN_CODE)
    tl.store(bits_ptr + offs, code, mask=offs < n)


@triton.jit
def fused_quantize_rowwise_kernel(
    x_ptr,
    q_ptr,
    bits_ptr,
    scale_ptr,
    amax_ptr,
    bad_ptr,
    k,
    fmax,
    smallest_normal,
    margin_mul,
    eps,
    MBITS: tl.constexpr,
    NAN_CODE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One program per row: amax over the row, then scale and cast (the row re-read from cache);
    the row's NaN/inf count into bad_ptr[row]."""
    row = tl.program_id(0).to(tl.int64) * k
    running = tl.zeros((BLOCK,), dtype=tl.float32)
    bad = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(0, k, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row + offs, mask=offs < k, other=0.0).to(tl.float32)
        finite = tl.abs(x) < float("inf")
        running = tl.maximum(running, tl.where(finite, tl.abs(x), 0.0))
        bad += (~finite & (offs < k)).to(tl.int32)
    row_amax = tl.max(running, axis=0)
    scale = tl.math.div_rn(fmax, tl.maximum(row_amax, eps) * margin_mul)  # correctly rounded
    tl.store(amax_ptr + tl.program_id(0), row_amax)
    tl.store(scale_ptr + tl.program_id(0), scale)
    tl.store(bad_ptr + tl.program_id(0), tl.sum(bad, axis=0))
    for start in range(0, k, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row + offs, mask=offs < k, other=0.0).to(tl.float32)
        code = _fp8_code(x, scale, fmax, smallest_normal, q_ptr.dtype.element_ty, MBITS, NAN_CODE)
        tl.store(bits_ptr + row + offs, code, mask=offs < k)


@functools.cache
def _nan_code(dtype: torch.dtype) -> int:
    """The bit pattern torch gives NaN in `dtype` (built once: no tensor op per call)."""
    return torch.tensor(float("nan")).to(dtype).view(torch.uint8).item()


def partial_amax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The tensorwise first pass: per BLOCK_SIZE block of flat x, (amax over finite values fp32,
    NaN/inf count int32), one slot per block. x: contiguous, non-empty."""
    blocks = triton.cdiv(x.numel(), BLOCK_SIZE)
    amax = torch.empty(blocks, dtype=torch.float32, device=x.device)
    bad = torch.empty(blocks, dtype=torch.int32, device=x.device)
    _partial_amax_kernel[(blocks,)](x, amax, bad, x.numel(), BLOCK=BLOCK_SIZE)
    return amax, bad


def fused_quantize(
    x: torch.Tensor,
    *,
    fmt: Fp8Format | str = "e4m3fn",
    granularity: Granularity | str = "tensorwise",
    margin: float = 0.0,
    check_nonfinite: bool = False,
) -> Fp8Tensor:
    """Dynamic `quantize` in Triton. x: (..., K) contiguous fp32/fp16/bf16, scaled in fp32.
    check_nonfinite=True raises ValueError naming the NaN/inf count (a host sync); otherwise
    they come back as NaN, as with quantize(..., nonfinite="nan")."""
    fmt = fp8_format(fmt)
    gran = Granularity(granularity) if granularity in ("tensorwise", "rowwise") else None
    if gran is None:
        raise ValueError(
            f"granularity={granularity!r} must be one of ['tensorwise', 'rowwise'] here"
        )
    if not x.is_floating_point() or x.dim() < 1:
        raise ValueError(
            f"x must be a floating tensor with dim >= 1, got {x.dtype} {tuple(x.shape)}"
        )
    x = x.contiguous()
    info = format_info(fmt)
    q = torch.empty(x.shape, dtype=info.dtype, device=x.device)
    bad = torch.zeros(1, dtype=torch.int32, device=x.device)  # NaN/inf count per program
    n, mul = x.numel(), 2.0**margin
    cast = {"MBITS": info.mantissa_bits, "NAN_CODE": _nan_code(info.dtype)}
    if gran is Granularity.TENSORWISE:
        scale = torch.empty((), dtype=torch.float32, device=x.device)
        if n:
            partial, bad = partial_amax(x)
            group_amax = partial.amax()  # max is exact in any order: bit-exact with `quantize`
            _scale_cast_kernel[(partial.numel(),)](
                x,
                group_amax,
                q,
                q.view(torch.uint8),
                scale,
                n,
                info.max,
                info.smallest_normal,
                mul,
                AMAX_EPS,
                **cast,
                BLOCK=BLOCK_SIZE,
            )
        else:
            group_amax = torch.zeros((), dtype=torch.float32, device=x.device)
            scale.fill_(info.max / AMAX_EPS)
    else:
        k = x.shape[-1]
        rows = n // k if k else 0
        group_amax = torch.zeros((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
        scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
        if rows:
            bad = torch.empty(rows, dtype=torch.int32, device=x.device)
            fused_quantize_rowwise_kernel[(rows,)](
                x,
                q,
                q.view(torch.uint8),
                scale,
                group_amax,
                bad,
                k,
                info.max,
                info.smallest_normal,
                mul,
                AMAX_EPS,
                **cast,
                BLOCK=min(ROW_BLOCK, triton.next_power_of_2(k)),
            )
    if check_nonfinite and (count := int(bad.sum())) > 0:
        raise ValueError(f"x has {count} NaN/inf of {n} values; an FP8 cast would hide them")
    return Fp8Tensor(q, scale, group_amax, fmt, gran)
