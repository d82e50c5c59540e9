"""The one registry of dispatch strategies: notebook name -> dispatch function, and where each
cannot run. Cases, layers and the bench all go through it.

Legend: T tokens, D model, E experts. Every strategy maps (x (T, D), routing, experts) to the
same (T, D) output; see dispatch.py for what each does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from torch import Tensor

from kernel_lib.config import parse_choice
from kernel_lib.moe import dispatch
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.packed import packing_unavailable
from kernel_lib.moe.routing import Routing

STRATEGIES = (
    "loop", "sorted_grouped", "sorted_segments", "packed_segments", "padded",
    "padded_max_autotune", "per_core", "fused_c", "triton",
)  # fmt: skip
# strategies in modules of their own, imported when asked for (Triton, a C library, threads)
ELSEWHERE = {
    "fused_c": "kernel_lib.moe.fused_c",
    "triton": "kernel_lib.moe.dispatch_triton",
    "per_core": "kernel_lib.moe.per_core",
    "padded_max_autotune": "kernel_lib.moe.max_autotune",
}
ANY_EXPERTS = ("loop",)  # strategies that run every expert family; the others FFN experts only


def dispatch_fn(name: str) -> Callable[[Tensor, Routing, object], Tensor]:
    """The dispatch function of strategy `name`, looked up at call time (ELSEWHERE's modules
    imported only when asked for). Raises ValueError listing the valid names."""
    parse_choice(name, STRATEGIES, param="strategy")
    module = importlib.import_module(ELSEWHERE[name]) if name in ELSEWHERE else dispatch
    return getattr(module, f"dispatch_{name}")


def run_strategy(
    name: str, x: Tensor, routing: Routing, experts, *, capacity: int | None = None
) -> Tensor:
    """Strategy `name` on (x, routing, experts); `capacity` sizes the padded strategy's buffer
    (None: its largest expert load) and is ignored by the others."""
    if name == "padded":
        return dispatch.dispatch_padded(x, routing, experts, capacity=capacity)
    return dispatch_fn(name)(x, routing, experts)


def unavailable(
    name: str,
    x: Tensor,
    experts: FeedForwardExperts,
    *,
    compiled: bool = False,
    backward: bool = False,
) -> str | None:
    """Why strategy `name` cannot run on these operands here (a skip reason), or None."""
    parse_choice(name, STRATEGIES, param="strategy")
    if name == "triton" and not x.is_cuda:
        # The interpreter (TRITON_INTERPRET=1) runs it in numpy: for its unit tests, never a figure.
        return "Triton kernel needs a CUDA/ROCm GPU (tested on CPU under TRITON_INTERPRET=1)"
    if name == "triton" and backward:
        return "the Triton kernel is forward only (no autograd backward)"
    if name == "fused_c":
        if backward:
            return "the fused C kernel is forward only (no autograd backward)"
        if compiled:
            return "the fused C kernel is opaque to torch.compile; timed as it is"
        from kernel_lib.moe.fused_c import fused_unavailable  # compiled C: built on first use

        return fused_unavailable(x, experts)
    if name == "per_core":
        if backward:
            return "experts scheduled over cores write one preallocated buffer (no autograd)"
        if compiled:
            return "its worker threads are opaque to torch.compile; timed as it is"
        if x.device.type != "cpu":
            return f"schedules experts over CPU cores, not {x.device.type}"
    if name == "padded_max_autotune":
        if backward:
            return "compiled for inference (max-autotune forward only; no autograd graph)"
        if compiled:
            return "compiled with max-autotune already; not compiled again"
        if x.device.type != "cpu":
            # its GEMMs would have ATen's bmm alone to choose from: the padded strategy compiled
            return f"Inductor's C++ max-autotune GEMM template: CPU only, not {x.device.type}"
    if name == "packed_segments":
        if backward:
            return "prepacked oneDNN weights are inference only (no autograd)"
        if compiled:
            return (
                "prepacked oneDNN linears are what Inductor's freezing emits; not compiled again"
            )
        return packing_unavailable(x, experts)
    if name == "sorted_grouped":
        try:
            dispatch.check_grouped_mm(x, experts)
        except ValueError as err:
            return f"torch._grouped_mm: {err}"
        if compiled and x.dtype != torch.bfloat16:
            # torch's meta kernel for _grouped_mm (what torch.compile traces with) takes bf16 only
            return f"torch.compile traces torch._grouped_mm in bfloat16 only, not {x.dtype}"
    return None
