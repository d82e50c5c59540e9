"""Triton grouped GEMM that gathers token rows itself (no permuted copy of x), in the block
layout of vLLM's `moe_align_block_size`: each expert's rows padded to BLOCK_M, one expert a block.

Legend: T tokens, D model, F ffn, E experts, A assignments, P padded rows (<= A + E*BLOCK_M).
Runs on CUDA/ROCm, or on CPU tensors under TRITON_INTERPRET=1 (no bf16 in the interpreter).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernel_lib.moe.dispatch import combine_sorted, sort_by_expert
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.routing import Routing

ACT_CODES = {"relu": 0, "gelu": 1, "swiglu": 2, "swiglu_clamped": 3}
BLOCK_M = 16  # rows per block; tl.dot needs >= 16


@triton.jit
def _gelu_tanh(v):
    inner = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    return 0.5 * v * (1 + (2 / (1 + tl.exp(-2 * inner)) - 1))


@triton.jit
def grouped_gemm_kernel(
    a_ptr,
    rows_ptr,
    block_expert_ptr,
    w_ptr,
    c_ptr,
    N,
    K,
    stride_am,
    stride_ak,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    stride_cn,
    GATHER: tl.constexpr,
    PRECISION: tl.constexpr,
    ACT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """C[p, n] = act(A[row(p)] @ W[e(p)])[n] for one (BLOCK_M, BLOCK_N) tile; row(p) is rows[p]
    (GATHER: a token of x) or p (A already in padded layout). ACT: -1 none, 0 relu, 1 gelu,
    2 swiglu, 3 gpt-oss's clamped swiglu (both: W holds [gate | up], 2N columns). Padding rows (rows[p] < 0) read zeros.
    PRECISION: "ieee" for fp32 operands (no silent TF32), else "tf32" (the default, unused)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = tl.load(rows_ptr + offs_m)
    row_ok = (rows >= 0) & (expert >= 0)
    src = rows if GATHER else offs_m
    src = tl.where(row_ok, src, 0)
    w_base = w_ptr + tl.maximum(expert, 0) * stride_we
    col_ok = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(
            a_ptr + src[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        w_off = (k0 + offs_k)[:, None] * stride_wk + offs_n[None, :] * stride_wn
        w_mask = k_ok[:, None] & col_ok[None, :]
        acc += tl.dot(
            a, tl.load(w_base + w_off, mask=w_mask, other=0.0), input_precision=PRECISION
        )
        if ACT >= 2:
            acc_up += tl.dot(
                a,
                tl.load(w_base + w_off + N * stride_wn, mask=w_mask, other=0.0),
                input_precision=PRECISION,
            )
    if ACT == 0:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 1:
        acc = _gelu_tanh(acc)
    elif ACT == 2:
        acc = acc / (1 + tl.exp(-acc)) * acc_up
    elif ACT == 3:  # experts.swiglu_clamped: limit 7, alpha 1.702
        acc = tl.minimum(acc, 7.0)
        acc = (tl.minimum(tl.maximum(acc_up, -7.0), 7.0) + 1) * acc / (1 + tl.exp(-1.702 * acc))
    c = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def grouped_gemm(
    a: Tensor, rows: Tensor, block_expert: Tensor, w: Tensor, n: int, *, gather: bool, act: int
) -> Tensor:
    """Launch grouped_gemm_kernel over every block: returns C (P, n) in a's dtype."""
    c = torch.zeros(rows.numel(), n, dtype=a.dtype, device=a.device)
    block_n, block_k = 32, 32
    grid = (block_expert.numel(), triton.cdiv(n, block_n))
    grouped_gemm_kernel[grid](
        a,
        rows,
        block_expert,
        w,
        c,
        n,
        a.shape[1],
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        c.stride(0),
        c.stride(1),
        GATHER=gather,
        PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        ACT=act,
        BLOCK_M=BLOCK_M,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
    )
    return c


def block_layout(routing: Routing, block_m: int = BLOCK_M):
    """Expert-sorted assignments padded per expert to block_m rows, all on the device.

    Returns (order, rows (P,) token per padded row or -1, block_expert (P/block_m,) expert per
    block or -1 past the end, dest (A,) padded row of each sorted assignment)."""
    order, tokens, _, offsets = sort_by_expert(routing)
    counts = routing.counts
    num_experts, num_a = counts.numel(), tokens.numel()
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    max_blocks = num_a // block_m + num_experts  # >= sum(ceil(count / block_m))
    expert_sorted = torch.repeat_interleave(
        torch.arange(num_experts, device=counts.device), counts
    )
    dest = (
        (padded_end - padded)[expert_sorted]
        + torch.arange(num_a, device=counts.device)
        - (offsets.long() - counts)[expert_sorted]
    )
    rows = torch.full((max_blocks * block_m,), -1, dtype=torch.long, device=counts.device)
    rows[dest] = tokens
    block_start = torch.arange(max_blocks, device=counts.device) * block_m
    block_expert = torch.searchsorted(padded_end, block_start, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1)
    return order, rows, block_expert, dest


def check_triton_device(x: Tensor) -> None:
    """Raise RuntimeError unless x is on a GPU or the Triton interpreter is on."""
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            f"dispatch_triton needs a CUDA/ROCm GPU tensor (x is on {x.device}) "
            "or TRITON_INTERPRET=1"
        )


def dispatch_triton(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> Tensor:
    """Fused gather + grouped GEMM (+ activation) for w_in, grouped GEMM for w_out, then the
    shared combine. x: (T, D) fp32/fp16/bf16 (bf16 only on GPU); fp32 accumulation."""
    if not isinstance(experts, FeedForwardExperts):
        raise NotImplementedError(
            f"experts={type(experts).__name__}: dispatch_triton runs FeedForwardExperts only"
        )
    if x.dim() != 2 or x.shape[0] != routing.num_tokens:
        raise ValueError(f"x must be (T={routing.num_tokens}, D), got {tuple(x.shape)}")
    check_triton_device(x)
    order, rows, block_expert, dest = block_layout(routing)
    if rows.numel() == 0:
        return torch.zeros_like(x)
    h = grouped_gemm(
        x,
        rows,
        block_expert,
        experts.w_in,
        experts.ffn,
        gather=True,
        act=ACT_CODES[experts.activation],
    )
    y = grouped_gemm(h, rows, block_expert, experts.w_out, experts.hidden, gather=False, act=-1)
    return combine_sorted(y[dest], order, routing, x)
