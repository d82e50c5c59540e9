"""The smallest Triton kernel: probes whether Triton can launch on a device (imported lazily)."""

import torch
import triton
import triton.language as tl


@triton.jit
def fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, value, mask=offsets < n)


def fill(out: torch.Tensor, value: float) -> torch.Tensor:
    """out[:] = value, by a Triton kernel; out: a contiguous float32 vector."""
    fill_kernel[(triton.cdiv(out.numel(), 128),)](out, value, out.numel(), BLOCK=128)
    return out
