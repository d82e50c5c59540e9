"""The weight-only FP8 linear as a C kernel (weight_only_c.c) built for the CPU it runs on:
`c_w8a16_linear` converts each e4m3fn weight to fp32 in registers (bit shifts and one multiply)
inside a GEMM whose threads own tiles of output channels, streaming the FP8 weight once per call;
`c_dequant_linear` converts the whole weight to bf16 in C and hands it to `F.linear` (oneDNN),
for prefill, where the GEMM's arithmetic outweighs the weight's bytes. The same source compiles
to AVX-512 or AVX2 vectors, and where the CPU has AVX512-VBMI and -BF16 to byte lookups and bf16
dot products (`isa`), whose threads read their weight rows either NB side by side per K chunk or
one after another (`streamed`); it also holds `moe_decode`, a MoE layer's decode step on FP8 or bf16
experts in one call (kernel_lib.moe.fp8_experts wraps it). Built and cached per CPU by
kernel_lib.c_kernels; without a compiler that builds it, every wrapper raises
kernel_lib.checks.Unsupported (a skipped record).
Every operand the C code reads through a pointer is checked first (`_checked_weight`, `_checked`):
a bad one is one ValueError or TypeError naming it, a buffer C cannot allocate a MemoryError."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
import torch.nn.functional as F

from kernel_lib import c_kernels
from kernel_lib.c_kernels import check_tensor
from kernel_lib.checks import Unsupported
from kernel_lib.fp8.scaling import BLOCK
from kernel_lib.fp8.weight_only import SCALINGS, Fp8Weight

SOURCE = Path(__file__).with_name("weight_only_c.c")


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(c_kernels.build(SOURCE, "weight_only_c")))
    ptr, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.w8a16_linear.argtypes = [ptr, i64, i64, ptr, i64, ptr, ptr, ptr, c_int, i64, c_int]
    lib.w8a16_linear.restype = c_int  # 1: a buffer could not be allocated; 2: not streamed here
    lib.fp8_weight_to_bf16.argtypes = [ptr, i64, i64, ptr, ptr, ptr, c_int]
    lib.fp8_weight_to_bf16.restype = None
    f32 = ctypes.c_float
    lib.moe_decode.argtypes = [ptr, i64, i64, ptr, ptr, ptr, i64, ptr, i64, c_int, ptr, ptr, i64]
    lib.moe_decode.argtypes += [ptr, ptr, i64, c_int, f32, f32, ptr, c_int, i64]
    lib.moe_decode.restype = c_int  # 1: no memory; 2-4: a routing operand out of its range
    return lib


ISAS = ("generic", "avx2", "avx512", "avx512_vbmi_bf16")  # by weight_only_isa()'s code


def isa() -> str:
    """The build here: avx512_vbmi_bf16 (byte lookups and bf16 dot products), or fp32 FMAs in
    avx512, avx2 or generic vectors."""
    return ISAS[_library().weight_only_isa()]


def _checked_weight(w: Fp8Weight) -> tuple[int | None, int | None]:
    """(channel_scale, block_scale) pointers, the other None, once w is what the C code reads:
    contiguous e4m3fn data (N, K) and float32 scales, (N, 1) or (ceil(N/128), ceil(K/128))."""
    if not isinstance(w, Fp8Weight):
        raise TypeError(f"w must be an Fp8Weight, got {type(w).__name__}")
    if not isinstance(w.scaling, str) or w.scaling not in SCALINGS:
        raise ValueError(f"w.scaling={w.scaling!r} must be one of {list(SCALINGS)}")
    n, k = check_tensor("w.data", w.data, torch.float8_e4m3fn, ("N", "K")).shape
    blocks = (n, 1) if w.scaling == "channel" else (-(-n // BLOCK), -(-k // BLOCK))
    ptr = check_tensor("w.scale_inv", w.scale_inv, torch.float32, blocks).data_ptr()
    return (ptr, None) if w.scaling == "channel" else (None, ptr)


def _checked(x: torch.Tensor, w: Fp8Weight) -> tuple[int | None, int | None]:
    """_checked_weight's pointers, once x is a bf16 (M, K) CPU tensor of w's K too."""
    scales = _checked_weight(w)
    check_tensor("x", x, torch.bfloat16, ("M", "K"), contiguous=False)
    if x.shape[1] != w.data.shape[1]:
        raise ValueError(f"x has K={x.shape[1]} columns, w.data (N, K) K={w.data.shape[1]}")
    return scales


def _out(name: str, out: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """`out` checked as a contiguous bf16 CPU tensor of `shape`, or a new one."""
    if out is None:
        return torch.empty(shape, dtype=torch.bfloat16)
    return check_tensor(name, out, torch.bfloat16, tuple(shape))


# c_w8a16_prefetch_linear's distance: about one DRAM latency (~100 ns) of one row's stream at a
# decode's per-row share of the bandwidth (~10 GB/s), 16 cache lines; a candidate beside no
# prefetch, chosen by measurement. The MoE decode's too (moe.fp8_experts.c_moe_decode).
PREFETCH_BYTES = 1024


def check_prefetch(prefetch) -> None:
    """ValueError naming `prefetch` unless it is an int >= 0 (bytes ahead; a bool is not)."""
    if type(prefetch) is not int or prefetch < 0:
        raise ValueError(f"prefetch={prefetch!r} must be an int >= 0 (bytes ahead)")


def c_w8a16_linear(
    x: torch.Tensor, w: Fp8Weight, *, prefetch: int = 0, streamed: bool = False
) -> torch.Tensor:
    """x (M, K) bf16 @ (W (N, K) e4m3fn * scale_inv)^T -> (M, N) bf16, fp32 accumulation, one
    rounding to bf16, on torch's thread count; `prefetch` > 0: each weight line prefetched that
    many bytes ahead of its read (0: none); `streamed`: each thread reads its weight rows one
    after another, not NB of them side by side (the bf16-dot-product build only). Raises
    ValueError/TypeError on a bad operand, MemoryError where the kernel's buffers do not fit,
    Unsupported where it cannot be built (or streamed where the build lacks it)."""
    channel, block = _checked(x, w)
    check_prefetch(prefetch)
    lib = _library()
    if streamed and (build := isa()) != "avx512_vbmi_bf16":
        raise Unsupported(f"streamed rows are built with AVX512-VBMI and -BF16 only, not {build}")
    (m, k), n = x.shape, w.data.shape[0]
    if x.numel() == 0 or n == 0:  # no row, column or product to read: the empty sum
        return torch.zeros(m, n, dtype=torch.bfloat16)
    x = x.contiguous()
    out = torch.empty(m, n, dtype=torch.bfloat16)
    threads = torch.get_num_threads()
    failed = lib.w8a16_linear(
        x.data_ptr(), m, k, w.data.data_ptr(), n, channel, block, out.data_ptr(), threads,
        prefetch, streamed,
    )  # fmt: skip
    if failed:
        raise MemoryError(f"c_w8a16_linear: no memory for its buffers at M={m}, K={k}")
    return out


def c_w8a16_prefetch_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """c_w8a16_linear prefetching PREFETCH_BYTES ahead."""
    return c_w8a16_linear(x, w, prefetch=PREFETCH_BYTES)


def c_w8a16_streamed_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """c_w8a16_linear with each thread's weight rows streamed one after another."""
    return c_w8a16_linear(x, w, streamed=True)


def _dequantize(
    w: Fp8Weight, scales: tuple[int | None, int | None], out: torch.Tensor
) -> torch.Tensor:
    """W into the checked `out`: fp8_weight_to_bf16 of w's checked data and scales."""
    lib = _library()
    n, k = w.data.shape
    threads = torch.get_num_threads()
    lib.fp8_weight_to_bf16(w.data.data_ptr(), n, k, *scales, out.data_ptr(), threads)
    return out


def c_dequantize_weight(w: Fp8Weight, out: torch.Tensor | None = None) -> torch.Tensor:
    """W as bf16 (N, K): data * scale_inv in fp32, rounded once, converted in C; into `out`
    (a contiguous bf16 (N, K) CPU tensor) where given. Raises ValueError/TypeError on a bad
    operand."""
    scales = _checked_weight(w)
    return _dequantize(w, scales, _out("out", out, w.data.shape))


def c_dequant_linear(
    x: torch.Tensor, w: Fp8Weight, *, workspace: torch.Tensor | None = None
) -> torch.Tensor:
    """W converted to bf16 in C (as `c_dequantize_weight`, into `workspace` where given), then
    `F.linear`."""
    scales = _checked(x, w)
    return F.linear(x, _dequantize(w, scales, _out("workspace", workspace, w.data.shape)))
