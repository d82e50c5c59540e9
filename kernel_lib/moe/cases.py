"""Benchmark inputs and the correctness check every timing is preceded by.

Legend: T tokens, D model, F ffn, E experts, K top-k.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from kernel_lib.moe import dispatch
from kernel_lib.moe.capacity import apply_capacity, expert_capacity
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.routing import Routing, check_top_k, route_topk

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
}
# Strategy name (notebook parameter) -> dispatch function name (record `implementation`).
STRATEGIES = ("loop", "sorted_grouped", "sorted_segments", "padded", "triton")
# Max |error| / max |reference| allowed against the fp64 loop: a few ulps of the input dtype
# times the accumulation depth's square root, measured margins ~10x below these.
REL_TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 5e-2}


@dataclass(frozen=True)
class MoECase:
    """One benchmark input: x (T, D), a (D, E) gate, routing from x @ gate, FFN experts."""

    x: Tensor
    gate: Tensor
    routing: Routing
    experts: FeedForwardExperts
    capacity: int | None  # None: dropless
    imbalance: float

    @property
    def shape(self) -> dict:
        e = self.experts
        return {
            "T": self.x.shape[0],
            "D": e.hidden,
            "F": e.ffn,
            "E": e.num_experts,
            "K": self.routing.top_k or 0,
            "imbalance": self.imbalance,
            "capacity": self.capacity,
        }

    def executed_rows(self) -> int:
        """Kept assignments: the rows whose expert FLOPs count (host sync)."""
        return int(self.routing.counts.sum())

    def flops(self) -> float:
        """Forward expert FLOPs of the kept assignments (padding and dropped rows excluded)."""
        return float(self.executed_rows() * self.experts.flops_per_row())


def dtype_of(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype={name!r} must be one of {list(DTYPES)}")
    return DTYPES[name]


def make_case(
    tokens: int,
    hidden: int,
    ffn: int,
    experts: int,
    top_k: int,
    *,
    dtype: str = "bfloat16",
    imbalance: float = 0.0,
    capacity_factor: float | None = None,
    activation: str = "relu",
    seed: int = 0,
    device: str = "cpu",
) -> MoECase:
    """Seeded inputs; routing is top-k softmax of x @ gate with expert e's logit lowered by
    imbalance * e (0: balanced on average). capacity_factor None: dropless."""
    for name, value in (("hidden", hidden), ("ffn", ffn), ("experts", experts)):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1")
    if tokens < 0:
        raise ValueError(f"tokens={tokens} must be >= 0")
    check_top_k(top_k, experts)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ffn_experts = FeedForwardExperts(experts, hidden, ffn, activation=activation)
    ffn_experts = ffn_experts.to(device=device, dtype=dtype_of(dtype)).requires_grad_(False)
    x = torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype_of(dtype))
    gate = (torch.randn(hidden, experts, generator=gen) / hidden**0.5).to(device)
    skew = imbalance * torch.arange(experts, device=device, dtype=torch.float32)
    routing = route_topk(x.float() @ gate - skew, top_k=top_k)
    capacity = None
    if capacity_factor is not None:
        capacity = expert_capacity(tokens * top_k, experts, capacity_factor=capacity_factor)
        routing = apply_capacity(routing, capacity)
    return MoECase(x, gate, routing, ffn_experts, capacity, imbalance)


def strategy_fn(name: str):
    """The dispatch function of a strategy name (Triton imported only when asked for)."""
    if name not in STRATEGIES:
        raise ValueError(f"strategy={name!r} must be one of {list(STRATEGIES)}")
    if name == "triton":
        from kernel_lib.moe.dispatch_triton import dispatch_triton

        return dispatch_triton
    return getattr(dispatch, f"dispatch_{name}")


def unavailable(name: str, case: MoECase) -> str | None:
    """Why strategy `name` cannot run on this case here, or None when it can."""
    if name == "triton" and not case.x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton kernel needs a CUDA/ROCm GPU (tested on CPU under TRITON_INTERPRET=1)"
    if name == "sorted_grouped":
        try:
            dispatch.check_grouped_mm(case.x, case.experts)
        except ValueError as err:
            return f"torch._grouped_mm: {err}"
    return None


def run(name: str, case: MoECase) -> Tensor:
    """Strategy `name` on the case (the padded one at the case's capacity)."""
    if name == "padded":
        return dispatch.dispatch_padded(case.x, case.routing, case.experts, capacity=case.capacity)
    return strategy_fn(name)(case.x, case.routing, case.experts)


def reference(case: MoECase) -> Tensor:
    """fp64 loop over experts: the oracle every strategy is compared with."""
    experts64 = (
        FeedForwardExperts(
            case.experts.num_experts,
            case.experts.hidden,
            case.experts.ffn,
            activation=case.experts.activation,
        )
        .double()
        .requires_grad_(False)
    )
    with torch.no_grad():
        experts64.w_in.copy_(case.experts.w_in)
        experts64.w_out.copy_(case.experts.w_out)
    return dispatch.dispatch_loop(case.x.double(), case.routing, experts64)


def check_strategies(case: MoECase, strategies: list[str]) -> pd.DataFrame:
    """Each strategy's max |error| relative to the fp64 reference; raises AssertionError on a
    FAIL. Strategies that cannot run here are listed as skipped with the reason."""
    ref = reference(case)
    scale = ref.abs().max().item() if ref.numel() else 1.0
    tol = REL_TOL[case.x.dtype]
    rows = []
    for name in strategies:
        reason = unavailable(name, case)
        if reason:
            rows.append(
                {
                    "strategy": name,
                    "rel_err": "-",
                    "tol": f"{tol:.0e}",
                    "result": "skipped",
                    "reason": reason,
                }
            )
            continue
        err = (
            (run(name, case).double() - ref).abs().max().item() / max(scale, 1e-30)
            if ref.numel()
            else 0.0
        )
        rows.append(
            {
                "strategy": name,
                "rel_err": f"{err:.1e}",
                "tol": f"{tol:.0e}",
                "result": "PASS" if err <= tol else "FAIL",
                "reason": "",
            }
        )
    table = pd.DataFrame(rows)
    failed = table[table["result"] == "FAIL"]
    if len(failed):
        raise AssertionError(f"strategies disagree with the fp64 reference:\n{failed}")
    return table
