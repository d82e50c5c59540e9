"""Benchmark inputs and their fp64 references (forward output and weight gradients).

Legend: T tokens, D model, F ffn, E experts, K top-k, A kept assignments.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from types import SimpleNamespace

import pandas as pd
import torch
from torch import Tensor

from kernel_lib import checks
from kernel_lib.checks import Unsupported
from kernel_lib.config import dtype_name, parse_dtype
from kernel_lib.moe.capacity import apply_capacity
from kernel_lib.moe.dispatch import dispatch_loop
from kernel_lib.moe.experts import FeedForwardExperts, replayed_activation
from kernel_lib.moe.routing import Routing, route_topk
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.moe.strategies import run_strategy, unavailable
from kernel_lib.moe.tolerances import tolerance

REFERENCE = "fp64 loop"  # what check_table compares each strategy with


@dataclass(frozen=True)
class MoECase:
    """One benchmark input of `shape`: x (T, D), a (D, E) gate, routing from x @ gate, the FFN
    experts (`feedforward`), and the fixed upstream gradient (T, D) of the forward + backward
    cases."""

    shape: MoEShape
    x: Tensor
    gate: Tensor
    routing: Routing
    feedforward: FeedForwardExperts
    grad_out: Tensor

    @property
    def dtype(self) -> str:
        return dtype_name(self.x.dtype)

    def executed_rows(self) -> int:
        """Kept assignments: the rows whose expert FLOPs count (host sync)."""
        return int(self.routing.counts.sum())

    def flops(self) -> float:
        """Forward expert FLOPs of the kept assignments (padding and dropped rows excluded)."""
        return float(self.executed_rows() * self.feedforward.flops_per_row())

    def run(self, strategy: str) -> Tensor:
        """Strategy `strategy` on this case (the padded one at the shape's capacity)."""
        return run_strategy(
            strategy, self.x, self.routing, self.feedforward, capacity=self.shape.capacity
        )


def make_case(
    shape: MoEShape,
    *,
    dtype: str = "bfloat16",
    activation: str = "relu",
    seed: int = 0,
    device: str = "cpu",
) -> MoECase:
    """Seeded inputs of `shape`; routing is top-k softmax of x @ gate with expert e's logit
    lowered by imbalance * e (0: balanced on average), then cut to the shape's capacity."""
    torch_dtype = parse_dtype(dtype)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    t, d, e = shape.tokens, shape.hidden, shape.experts
    feedforward = FeedForwardExperts(e, d, shape.ffn, activation=activation)
    feedforward = feedforward.to(device=device, dtype=torch_dtype).requires_grad_(False)
    x = torch.randn(t, d, generator=gen).to(device=device, dtype=torch_dtype)
    grad_out = torch.randn(t, d, generator=gen).to(device=device, dtype=torch_dtype)
    gate = (torch.randn(d, e, generator=gen) / d**0.5).to(device)
    skew = shape.imbalance * torch.arange(e, device=device, dtype=torch.float32)
    routing = route_topk(x.float() @ gate - skew, top_k=shape.top_k)
    if shape.capacity is not None:
        routing = apply_capacity(routing, shape.capacity)
    return MoECase(shape, x, gate, routing, feedforward, grad_out)


def memory_needed(shape: MoEShape, itemsize: int) -> int:
    """Estimated peak bytes of one case: x, weights and their gradients, the (A, D + 2F)
    intermediates, in the case's dtype and again in the fp64 reference (SwiGLU counted wide)."""
    t, d, f, e = shape.tokens, shape.hidden, shape.ffn, shape.experts
    rows = t * shape.top_k
    elements = 3 * t * d + 2 * 2 * e * d * 2 * f + rows * (d + 4 * f)
    return elements * (itemsize + 8)


def fp64_experts(experts: FeedForwardExperts, *, trainable: bool = False) -> FeedForwardExperts:
    """An fp64 copy of `experts` (with gradients when `trainable`)."""
    return copy.deepcopy(experts).double().requires_grad_(trainable)


def reference(case: MoECase) -> Tensor:
    """fp64 loop over experts: the oracle every strategy's forward is compared with."""
    with torch.no_grad():
        return dispatch_loop(case.x.double(), case.routing, fp64_experts(case.feedforward))


class _ReplayedKinks:
    """fp64 experts whose activation kinks follow the case's own pre-activations, as the routing
    does: one pre-activation that bf16 and fp64 put on opposite sides of ReLU's zero moves a weight
    gradient by a whole x * dh term, ~5 % of its max at D=1024, at any working precision."""

    def __init__(self, case: MoECase, experts: FeedForwardExperts):
        self.case, self.experts = case, experts

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        with torch.no_grad():
            h_case = self.case.x[token_idx] @ self.case.feedforward.w_in[e]
        h = replayed_activation(
            x[token_idx] @ self.experts.w_in[e], h_case, self.experts.activation
        )
        return h @ self.experts.w_out[e]


def reference_grads(case: MoECase, *, wrt_x: bool = False) -> tuple[Tensor, ...]:
    """fp64 (dL/dw_in, dL/dw_out) of L = <y, grad_out>, y the fp64 loop over experts with the
    case's activation kinks (_ReplayedKinks); with `wrt_x`, dL/dx first. Each expert's weights
    are leaves of their own: a slice of one (E, ...) leaf fills a gradient of all E experts for
    each expert (DeepSeek-V3's 256 at 4096 tokens: 51 s, against 1.2 s so; 2-core Xeon)."""
    experts = fp64_experts(case.feedforward)
    w_in, w_out = (
        [w.clone().requires_grad_(True) for w in ws] for ws in (experts.w_in, experts.w_out)
    )
    leaves = SimpleNamespace(w_in=w_in, w_out=w_out, activation=experts.activation)
    x = case.x.double().requires_grad_(wrt_x)
    with torch.enable_grad():
        y = dispatch_loop(x, case.routing, _ReplayedKinks(case, leaves))
        grads = torch.autograd.grad(
            y, [x] * wrt_x + w_in + w_out, case.grad_out.double(), materialize_grads=True
        )
    e = len(w_in)
    return (*grads[:wrt_x], torch.stack(grads[wrt_x : wrt_x + e]), torch.stack(grads[wrt_x + e :]))


def check_table(case: MoECase, strategies) -> pd.DataFrame:
    """Each strategy's forward on `case` against the fp64 loop: strategy, check (PASS, FAIL or
    skipped), rel_error, max_abs_error, tolerance, reason. A FAIL is a row, not a raise
    (measure.require_passed raises on it)."""
    tol = tolerance("forward", case.dtype)
    check = checks.against(lambda: reference(case), reference=REFERENCE, tolerance=tol)
    rows = []
    for name in strategies:
        reason = unavailable(name, case.x, case.feedforward)
        try:
            got = None if reason else check(case.run(name))
        except Unsupported as why:  # found out only when run (padded_max_autotune: no rows)
            reason = str(why)
        verdict = "skipped" if reason else "PASS" if got.passed else "FAIL"
        rows.append(
            {
                "strategy": name,
                "check": verdict,
                "rel_error": None if reason else got.rel_error,
                "max_abs_error": None if reason else got.max_abs_error,
                "tolerance": tol.value,
                "reason": reason or "",
            }
        )
    return pd.DataFrame(rows)


def edge_cases(dtype: str, *, device: str = "cpu") -> dict[str, MoECase]:
    """The edge cases every strategy is checked on: no tokens, every token to one expert,
    capacity mode with priority drops, the benchmark dtype, odd widths grouped GEMMs refuse."""
    fp32 = functools.partial(make_case, dtype="float32", device=device)
    return {
        "zero_tokens": fp32(MoEShape(0, 64, 96, 4, 2)),
        "all_to_one": fp32(MoEShape(64, 64, 96, 4, 1, imbalance=100.0)),
        "capacity_1.0": fp32(MoEShape(131, 64, 96, 4, 2).with_capacity_factor(1.0)),
        dtype: make_case(MoEShape(131, 64, 96, 5, 2), dtype=dtype, device=device),
        "odd_widths": fp32(MoEShape(37, 7, 13, 3, 2)),
    }
