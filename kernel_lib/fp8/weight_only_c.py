"""The weight-only FP8 linear as a C kernel (weight_only_c.c) built for the CPU it runs on:
`c_w8a16_linear` converts each e4m3fn weight to fp32 in registers (bit shifts and one multiply)
inside a GEMM whose threads own tiles of output channels, streaming the FP8 weight once per call;
`c_dequant_linear` converts the whole weight to bf16 in C and hands it to `F.linear` (oneDNN),
for prefill, where the GEMM's arithmetic outweighs the weight's bytes. The same source compiles
to AVX-512 or AVX2 vectors, and where the CPU has AVX512-VBMI and -BF16 to byte lookups and bf16
dot products (`isa`). Built and cached per CPU by kernel_lib.c_kernels;
without a compiler that builds it, both raise kernel_lib.checks.Unsupported (a skipped record)."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
import torch.nn.functional as F

from kernel_lib import c_kernels
from kernel_lib.fp8.weight_only import Fp8Weight

SOURCE = Path(__file__).with_name("weight_only_c.c")


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(c_kernels.build(SOURCE, "weight_only_c")))
    ptr, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.w8a16_linear.argtypes = [ptr, i64, i64, ptr, i64, ptr, ptr, ptr, c_int]
    lib.fp8_weight_to_bf16.argtypes = [ptr, i64, i64, ptr, ptr, ptr, c_int]
    return lib


ISAS = ("generic", "avx2", "avx512", "avx512_vbmi_bf16")  # by weight_only_isa()'s code


def isa() -> str:
    """The build here: avx512_vbmi_bf16 (byte lookups and bf16 dot products), or fp32 FMAs in
    avx512, avx2 or generic vectors."""
    return ISAS[_library().weight_only_isa()]


def _scales(w: Fp8Weight) -> tuple[int | None, int | None]:
    """(channel_scale, block_scale) pointers, the other None."""
    ptr = w.scale_inv.data_ptr()
    return (ptr, None) if w.scaling == "channel" else (None, ptr)


def _checked(x: torch.Tensor, w: Fp8Weight) -> None:
    if x.dtype != torch.bfloat16 or x.device.type != "cpu" or x.dim() != 2:
        raise ValueError(f"x must be a 2-D bfloat16 CPU tensor, got {x.dtype} {tuple(x.shape)}")
    if w.data.dtype != torch.float8_e4m3fn or x.shape[1] != w.data.shape[1]:
        raise ValueError(
            f"w must be e4m3fn (N, K={x.shape[1]}), got {w.data.dtype} {tuple(w.data.shape)}"
        )
    if not (w.data.is_contiguous() and w.scale_inv.dtype == torch.float32):
        raise ValueError("w.data must be contiguous and w.scale_inv float32")


def c_w8a16_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """x (M, K) bf16 @ (W (N, K) e4m3fn * scale_inv)^T -> (M, N) bf16, fp32 accumulation, one
    rounding to bf16, on torch's thread count. Raises Unsupported where it cannot be built."""
    _checked(x, w)
    lib = _library()
    x = x.contiguous()
    (m, k), n = x.shape, w.data.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16)
    channel, block = _scales(w)
    threads = torch.get_num_threads()
    lib.w8a16_linear(
        x.data_ptr(), m, k, w.data.data_ptr(), n, channel, block, out.data_ptr(), threads
    )
    return out


def c_dequantize_weight(w: Fp8Weight, out: torch.Tensor | None = None) -> torch.Tensor:
    """W as bf16 (N, K): data * scale_inv in fp32, rounded once, converted in C; into `out`
    (a contiguous bf16 (N, K) tensor) where given."""
    lib = _library()
    n, k = w.data.shape
    if out is None:
        out = torch.empty(n, k, dtype=torch.bfloat16)
    elif out.shape != (n, k) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bfloat16 ({n}, {k}) tensor")
    channel, block = _scales(w)
    threads = torch.get_num_threads()
    lib.fp8_weight_to_bf16(w.data.data_ptr(), n, k, channel, block, out.data_ptr(), threads)
    return out


def c_dequant_linear(
    x: torch.Tensor, w: Fp8Weight, *, workspace: torch.Tensor | None = None
) -> torch.Tensor:
    """W converted to bf16 in C (`c_dequantize_weight`, into `workspace` where given), then
    `F.linear`."""
    _checked(x, w)
    return F.linear(x, c_dequantize_weight(w, workspace))
