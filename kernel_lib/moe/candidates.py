"""The MoE notebook's candidates: each timed path of a case with its check, against an fp64 twin
(tolerances.py) at the timed shape, dtype and mode.

Legend: T tokens, D model, F ffn, E experts, K top-k, A kept assignments. `dense_gemm` is the GEMM
pair with a case's executed FLOPs ((A, D) @ (D, F) then (A, F) @ (F, D)), the strategies'
baseline; `dispatch_<strategy>` one strategy, eager or compiled; a user's `moe.dispatch` kernel
(kernel_lib.plugins) under its own name, eager, checked as the strategies are; `seed_style` the
old system's fp32 training-mode forward; a layer type's preset (router, capacity, dispatch).
bench.py's sections compare them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import torch

from kernel_lib import checks
from kernel_lib.checks import Unsupported
from kernel_lib.measure import Candidate
from kernel_lib.moe.cases import MoECase, reference, reference_grads
from kernel_lib.moe.layers import MoELayer, MoELayerConfig, layer_reference
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.moe.seed_style import SeedStyleMoE
from kernel_lib.moe.strategies import run_strategy, unavailable
from kernel_lib.moe.tolerances import tolerance
from kernel_lib.plugins import FORWARD_ONLY, Plugin, registered
from kernel_lib.profiling.phases import phase

DENSE, SEED = "dense_gemm", "seed_style"
PLAIN = "loop"  # the plain comparator's strategy: the obvious loop over experts
# Weight gradients only (inputs need none): dW_out, dh, dW_in are 3 GEMMs after the forward's 2.
BACKWARD_FLOPS = 2.5
SLOT = "moe.dispatch"  # the plug-ins' slot (kernel_lib.plugins.SLOTS)


def unsupported(implementation: str, reason: str, *, plugin: dict | None = None) -> Candidate:
    """A candidate that cannot run here: compare records it as skipped with `reason`."""

    def fn():
        raise Unsupported(reason)

    return Candidate(implementation, fn, check=lambda out: out, plugin=plugin)


def _grads(forward, weights: list[torch.Tensor], grad_out: torch.Tensor):
    """A function giving dL/dweights for L = <forward(), grad_out> (no .grad accumulated)."""

    def fn():
        with torch.enable_grad():
            return torch.autograd.grad(forward(), weights, grad_out)

    return fn


def dense_candidate(case: MoECase, *, backward: bool = False) -> Candidate:
    """The dense GEMM pair with the case's executed FLOPs, in its dtype, checked against the
    same pair in fp64 on the same operands (output, or weight gradients when `backward`)."""
    rows, ff = case.executed_rows(), case.feedforward
    gen = torch.Generator().manual_seed(1)
    a, grad_out = (torch.randn(rows, ff.hidden, generator=gen).to(case.x) for _ in range(2))
    w1, w2 = ff.w_in[0].detach().clone(), ff.w_out[0].detach().clone()

    def pair(a, w1, w2):
        with phase("GEMM 1"):  # SwiGLU's w_in is 2F wide: same FLOPs as its experts
            h = (a @ w1)[:, : ff.ffn]
        with phase("GEMM 2"):
            return h @ w2

    if backward:
        w1.requires_grad_(True)
        w2.requires_grad_(True)
        fn = _grads(lambda: pair(a, w1, w2), [w1, w2], grad_out)
        w64 = [w.detach().double().requires_grad_(True) for w in (w1, w2)]
        ref = _grads(lambda: pair(a.double(), *w64), w64, grad_out.double())
    else:
        fn = functools.partial(pair, a, w1, w2)
        ref = functools.partial(pair, a.double(), w1.double(), w2.double())
    quantity = "grads" if backward else "forward"
    check = checks.against(
        ref, reference="fp64 GEMM pair, same operands", tolerance=tolerance(quantity, case.dtype)
    )
    flops = rows * ff.flops_per_row() * (BACKWARD_FLOPS if backward else 1)
    return Candidate(DENSE, fn, check, flops=flops)


def _experts(case: MoECase, backward: bool):
    """The case's experts; with `backward` a copy of them whose weights take gradients."""
    if backward:
        return copy.deepcopy(case.feedforward).requires_grad_(True)
    return case.feedforward


def _dispatch_candidate(
    implementation: str, forward, experts, case: MoECase, *, backward: bool, ref, plugin=None
) -> Candidate:
    """`forward()`, a dispatch of the case on `experts`: its output, or with `backward` the
    gradients of `experts`' weights, checked against the fp64 loop over experts (`ref`: a
    shared cached reference); the case's expert FLOPs."""
    if backward:
        fn = _grads(forward, [experts.w_in, experts.w_out], case.grad_out)
        check = checks.against(
            ref or functools.partial(reference_grads, case),
            reference="fp64 loop over experts, autograd",
            tolerance=tolerance("grads", case.dtype),
        )
    else:
        fn = forward
        check = checks.against(
            ref or functools.partial(reference, case),
            reference="fp64 loop over experts",
            tolerance=tolerance("forward", case.dtype),
        )
    flops = case.flops() * (BACKWARD_FLOPS if backward else 1)
    return Candidate(implementation, fn, check, flops=flops, plugin=plugin)


def strategy_candidate(
    name: str, case: MoECase, *, backward: bool = False, compiled: bool = False, ref=None
) -> Candidate:
    """One strategy on one case: its forward output (eager or compiled) or its expert-weight
    gradients, checked against the fp64 loop over experts (`ref`: a shared cached reference)."""
    implementation = f"dispatch_{name}" + ("_compiled" if compiled else "")
    reason = unavailable(name, case.x, case.feedforward, compiled=compiled, backward=backward)
    if reason:
        return unsupported(implementation, reason)
    experts = _experts(case, backward)

    def forward():
        return run_strategy(name, case.x, case.routing, experts, capacity=case.shape.capacity)

    if compiled:
        # The loop's per-expert row counts are data: static shapes would recompile per count.
        forward = torch.compile(forward, dynamic=name == PLAIN)
    return _dispatch_candidate(implementation, forward, experts, case, backward=backward, ref=ref)


def _in_dtype(check, dtype: torch.dtype):
    """`check`, refusing first an output that is not a tensor in `dtype` (the slot's contract)."""

    def checked(out):
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        if got != dtype:
            raise TypeError(f"returned {got}, not a (T, D) tensor in x.dtype {dtype}")
        return check(out)

    return checked


def plugin_candidate(
    plugin: Plugin, case: MoECase, *, backward: bool = False, ref=None
) -> Candidate:
    """A user's `moe.dispatch` kernel on one case, eager, checked as a strategy is (with
    `backward`, only when it declared backward=True: else skipped)."""
    if backward and not plugin.backward:
        return unsupported(plugin.name, FORWARD_ONLY, plugin=plugin.source)
    experts = _experts(case, backward)
    forward = functools.partial(plugin.fn, case.x, case.routing, experts)
    candidate = _dispatch_candidate(
        plugin.name, forward, experts, case, backward=backward, ref=ref, plugin=plugin.source
    )
    if backward:
        return candidate
    return dataclasses.replace(candidate, check=_in_dtype(candidate.check, case.x.dtype))


def plugin_candidates(case: MoECase, *, backward: bool = False, ref=None) -> list[Candidate]:
    """One candidate per plug-in registered in `moe.dispatch`, in the order registered."""
    return [plugin_candidate(p, case, backward=backward, ref=ref) for p in registered(SLOT)]


def plugins_unsupported(reason: str) -> list[Candidate]:
    """Every `moe.dispatch` plug-in skipped with `reason` (the case does not fit)."""
    return [unsupported(p.name, reason, plugin=p.source) for p in registered(SLOT)]


def seed_style_candidate(case: MoECase, *, capacity_factor: float = 1.25) -> Candidate:
    """The old system's forward (fp32, training mode, graph recorded, random drops reseeded per
    call) on the case's x, gate and experts, checked against its fp64 twin with the same
    routing, drops and dropout masks. FLOPs count only the rows it ran; drops in metrics."""
    kw = dict(top_k=case.shape.top_k, capacity_factor=capacity_factor)
    seed = SeedStyleMoE(case.gate, case.feedforward, **kw)
    twin = SeedStyleMoE(case.gate, case.feedforward, **kw, dtype=torch.float64)
    x = case.x.float()
    with torch.no_grad():
        once = seed(x)

    def fn():
        with torch.enable_grad():  # as the seed ran: recording the graph
            return seed(x).y

    def ref():
        with torch.no_grad():
            return twin(x).y

    check = checks.against(
        ref,
        reference="fp64 twin, same routing, drops and dropout masks",
        tolerance=tolerance("forward", "float32"),
    )
    metrics = {
        "drop_rate": once.dropped / max(once.assignments, 1),
        "dropped": once.dropped,
        "reported_dropped": once.reported_dropped,
    }
    flops = float((once.assignments - once.dropped) * case.feedforward.flops_per_row())
    return Candidate(SEED, fn, check, flops=flops, dtype="float32", metrics=metrics)


def layer_candidate(layer_type: str, case: MoECase, strategy: str) -> Candidate:
    """One layer preset (router, capacity, dispatch) at the case's sizes, eval, no grad; its
    output checked against the fp64 twin on its own routing. FLOPs: kept expert rows only."""
    shape = case.shape
    cfg = MoELayerConfig.for_layer_type(
        layer_type,
        hidden=shape.hidden,
        ffn=shape.ffn,
        num_experts=shape.experts,
        top_k=shape.top_k,
        strategy=strategy,
    )
    torch.manual_seed(0)
    layer = MoELayer(cfg).to(device=case.x.device, dtype=case.x.dtype).eval().requires_grad_(False)
    reason = unavailable(strategy, case.x, layer.experts)
    if reason:
        return unsupported(layer_type, reason)
    routing, _ = layer.route(case.x)
    check = checks.against(
        functools.partial(layer_reference, layer, case.x),
        reference="fp64 twin on the layer's own routing",
        tolerance=tolerance("forward", case.dtype),
    )
    metrics = {**load_metrics(routing), "K": cfg.top_k}
    flops = float(int(routing.counts.sum()) * layer.experts.flops_per_row())
    return Candidate(layer_type, lambda: layer(case.x).y, check, flops=flops, metrics=metrics)
