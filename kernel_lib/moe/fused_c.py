"""The expert FFN of a bf16 MoE as one fused C kernel (fused_c.c) on CPUs with AVX512-BF16.

Legend: T tokens, D model, F ffn, E experts, A kept assignments. After the sort by expert, each
tile of 8 rows of one expert is gathered, multiplied by w_in, activated, multiplied by w_out and
scaled by its routing weight without leaving L1, then added to its token's fp32 output row; each
thread owns a range of tokens, so no row is shared and each token's sum runs in expert order
(deterministic), rounded to bf16 once. Where torch's path runs the gather, each expert's two
GEMMs, the activation and the combine as separate passes over (A, D) and (A, F) tensors, this
reads each row once and writes no intermediate.
Weights are packed once per expert set into the kernel's pair-interleaved layout (fused_c.c) and
kept until a weight changes, as packed.py does for oneDNN; the packing is not part of a call.
Forward only, bf16 only, every FeedForwardExperts activation; built and cached per CPU by kernel_lib.c_kernels.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from kernel_lib import c_kernels
from kernel_lib.c_kernels import check_tensor
from kernel_lib.checks import Unsupported
from kernel_lib.moe.dispatch import _check_ffn, _check_inputs, check_inference, sort_by_expert
from kernel_lib.moe.experts import GATED, SWIGLU_ALPHA, SWIGLU_LIMIT, FeedForwardExperts, in_width
from kernel_lib.moe.packed import packed_once
from kernel_lib.moe.routing import Routing
from kernel_lib.profiling.phases import phase

SOURCE = Path(__file__).with_name("fused_c.c")
ACTIVATIONS = {"relu": 0, "gelu": 1, "swiglu": 2, "swiglu_clamped": 3}  # fused_c.c's codes
LANES = 16  # output columns a vector; packed widths are multiples of it


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(c_kernels.build(SOURCE, "fused_c")))
    if lib.fused_available():  # the kernels exist in builds for AVX512-BF16 only
        ptr, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        f32 = ctypes.c_float
        lib.fused_ffn.argtypes = [ptr, i64, i64, ptr, ptr, ptr, i64, ptr, i64, i64, ptr, i64]
        lib.fused_ffn.argtypes += [i64, c_int, f32, f32, ptr, ptr, c_int]
        lib.fused_ffn.restype = c_int  # 1: a thread's buffers could not be allocated
    return lib


def fused_unavailable(x: Tensor, experts) -> str | None:
    """Why the fused kernel cannot run on these operands here, or None."""
    if not isinstance(experts, FeedForwardExperts):
        return f"fused_c is built for FeedForwardExperts, not {type(experts).__name__}"
    if x.device.type != "cpu" or x.dtype != torch.bfloat16:
        return f"fused_c runs bfloat16 on a CPU, not {x.dtype} on {x.device.type}"
    try:
        lib = _library()
    except Unsupported as err:
        return str(err)
    return None if lib.fused_available() else "fused_c needs a CPU with AVX512-BF16"


def pack(w: Tensor) -> Tensor:
    """(E, K, N) -> fused_c.c's layout (E, Np/16, Kp/2, 16, 2): K padded to even and N to a
    multiple of 16 with zeros; lane j of a vector holds the pair (k, k+1) of column j."""
    e, k, n = w.shape
    w = F.pad(w, (0, _round_up(n, LANES) - n, 0, k % 2))
    return w.view(e, w.shape[1] // 2, 2, w.shape[2] // LANES, LANES).permute(0, 3, 1, 4, 2)


class CPackedExperts(NamedTuple):
    w_in: Tensor  # (E, Hp/16, Dp/2, 16, 2); Hp: [gate | up] each padded to Fp (gated), or Fp
    w_out: Tensor  # (E, Np/16, Fp/2, 16, 2)
    ffn: int  # Fp: F rounded up to 16


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pack_experts(experts: FeedForwardExperts) -> CPackedExperts:
    ffn = _round_up(experts.ffn, LANES)
    w_in = experts.w_in.detach()
    if experts.activation in GATED:
        halves = w_in.split(experts.ffn, dim=-1)
        w_in = torch.cat([F.pad(h, (0, ffn - experts.ffn)) for h in halves], dim=-1)
    w_out = F.pad(experts.w_out.detach(), (0, 0, 0, ffn - experts.ffn))
    return CPackedExperts(pack(w_in).contiguous(), pack(w_out).contiguous(), ffn)


def packed(experts: FeedForwardExperts) -> CPackedExperts:
    """The experts' weights in the kernel's layout, packed again only when a weight changed."""
    return packed_once(_CACHE, experts, _pack_experts)


FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # routing.weight, as fp32


def _check_operands(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> None:
    """Raise unless fused_c.c reads only what exists, as dispatch_loop means it: x (T, D) bf16
    of the experts' D; their weights contiguous bf16 of their shapes; A assignments, int64 tokens
    in [0, T) and experts in [0, E) with a weight each, counted per expert by counts (E,) (the
    segments the kernel runs). One ValueError or TypeError naming the operand."""
    if not isinstance(routing, Routing):
        raise TypeError(f"routing must be a Routing, got {type(routing).__name__}")
    e, d, f = experts.num_experts, experts.hidden, experts.ffn
    if routing.num_experts != e:
        raise ValueError(f"routing.num_experts={routing.num_experts} but experts has E={e}")
    check_tensor("x", x, torch.bfloat16, ("T", d), contiguous=False)
    _check_inputs(x, routing)
    h = in_width(f, experts.activation)
    check_tensor("experts.w_in", experts.w_in, torch.bfloat16, (e, d, h))  # pack() views them
    check_tensor("experts.w_out", experts.w_out, torch.bfloat16, (e, f, d))
    tokens, ids, _, counts = routing_tensors(routing, e)
    a = tokens.shape[0]
    for name, index, size in (("token_idx", tokens, x.shape[0]), ("expert_idx", ids, e)):
        if a and not 0 <= index.min() <= index.max() < size:
            raise range_error(name, index, size)
    if not torch.equal(counts, torch.bincount(ids, minlength=e)):
        raise counts_error(routing)


def routing_tensors(routing: Routing, experts: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """routing's token_idx and expert_idx (int64, (A,)), weight (FLOATS, (A,)) and counts
    (int64, (experts,)), strided or not, once those are their dtypes and shapes: what a C kernel
    reading them (after a contiguous copy) may index; one ValueError or TypeError naming it."""
    loose = {"contiguous": False}
    tokens = check_tensor("routing.token_idx", routing.token_idx, torch.int64, ("A",), **loose)
    a = tokens.shape[0]
    ids = check_tensor("routing.expert_idx", routing.expert_idx, torch.int64, (a,), **loose)
    weight = check_tensor("routing.weight", routing.weight, FLOATS, (a,), **loose)
    counts = check_tensor("routing.counts", routing.counts, torch.int64, (experts,), **loose)
    return tokens, ids, weight, counts


def range_error(name: str, index: Tensor, size: int) -> ValueError:
    """routing.`name` holds an index outside [0, size)."""
    low, high = int(index.min()), int(index.max())
    return ValueError(f"routing.{name} must lie in [0, {size}), got [{low}, {high}]")


def counts_error(routing: Routing) -> ValueError:
    """routing.counts does not count routing.expert_idx per expert."""
    return ValueError(
        f"routing.counts (sum {int(routing.counts.sum())}) must count routing.expert_idx per "
        f"expert (A={routing.expert_idx.numel()})"
    )


def dispatch_fused_c(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> Tensor:
    """Sort by expert, then the fused kernel adds each assignment's weighted FFN output into
    its token's fp32 row (each thread owns a range of tokens), rounded to x's dtype once.

    x: (T, D) bf16 on a CPU with AVX512-BF16; FeedForwardExperts; any routing (token or expert
    choice, with drops); no autograd (check_inference). Raises ValueError or TypeError on other
    operands (`_check_operands`, fused_unavailable say why), MemoryError where the kernel's
    buffers do not fit."""
    _check_ffn(experts)
    _check_operands(x, routing, experts)
    check_inference("fused_c", x, experts)
    reason = fused_unavailable(x, experts)
    if reason:
        raise ValueError(reason)
    with phase("sort/gather"):  # the kernel gathers rows itself: this is the sort
        _, tokens, weight, ends = sort_by_expert(routing)
        w, x, weight = packed(experts), x.contiguous(), weight.float().contiguous()
        acc, out = torch.empty(x.shape, dtype=torch.float32), torch.empty_like(x)
    with phase("experts fused"):
        failed = _library().fused_ffn(
            x.data_ptr(), x.shape[0], x.shape[1], tokens.data_ptr(), weight.data_ptr(),
            ends.data_ptr(), routing.num_experts, w.w_in.data_ptr(), _round_up(x.shape[1], 2),
            w.w_in.shape[1] * LANES, w.w_out.data_ptr(), w.ffn, w.w_out.shape[1] * LANES,
            ACTIVATIONS[experts.activation], SWIGLU_LIMIT, SWIGLU_ALPHA, acc.data_ptr(),
            out.data_ptr(), torch.get_num_threads(),
        )  # fmt: skip
    if failed:
        raise MemoryError(f"fused_c: no memory for its buffers at T={x.shape[0]}, D={x.shape[1]}")
    return out
