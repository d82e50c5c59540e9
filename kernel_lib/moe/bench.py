"""`python -m kernel_lib bench moe`: the MoE notebook's measurements, as records.

Legend: T tokens, D model, F ffn, E experts, K top-k, A kept assignments. Every timed path is a
`measure.compare` candidate checked at its timed shape, dtype and mode against an fp64 twin
(tolerances.py). Strategies are compared with `dense_gemm`, a GEMM pair with their FLOPs
((A, D) @ (D, F) then (A, F) @ (F, D)): ratio_vs_baseline = dense time / strategy time, with
its interval, and fraction_of_peak = strategy TFLOP/s over that pair's. The seed-style
baseline (the old system's fp32 training-mode forward) is compared twice: with our strategies
in fp32 (same dtype) and in moe_dtype (the seed's configuration against ours).

The strategies are the variants of one kernel: `variants.choose` picks the fastest checked one
on this machine (cached per machine fingerprint, named in every record's `variant`), and that
one is the headline. The plain path, `dispatch_loop` (index_select + mm + index_add per expert)
under torch.compile for the forward, eager for forward + backward and the seed comparisons, is
always timed beside them: a strategy slower than it is flagged.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import pandas as pd
import torch
from tqdm import tqdm

from kernel_lib import checks
from kernel_lib import records as rec
from kernel_lib.checks import Unsupported
from kernel_lib.config import parse_dtype
from kernel_lib.measure import Candidate, Case, compare
from kernel_lib.moe.cases import MoECase, make_case, memory_needed, reference, reference_grads
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.layers import MoEConfig, MoELayer, layer_reference
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.moe.seed_style import SeedStyleMoE
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.moe.strategies import run_strategy, unavailable
from kernel_lib.moe.tolerances import tolerance
from kernel_lib.platform import DeviceFacts
from kernel_lib.profiling.phases import phase
from kernel_lib.variants import choose

TOPIC = "moe"
DENSE, SEED = "dense_gemm", "seed_style"
PLAIN = "loop"  # the plain comparator's strategy: the obvious loop over experts
DENSE_BASIS = "dense GEMM pair, same FLOPs, same run"
# Weight gradients only (inputs need none): dW_out, dh, dW_in are 3 GEMMs after the forward's 2.
BACKWARD_FLOPS = 2.5
# The layer every other layer type is compared with, when it is timed.
LAYER_BASELINE = "standard"
# No warm-up call besides the two every candidate has: its checked first call (torch.compile
# compiles in it) and time_interleaved's call that sizes its reps. Every path here is warm after
# the first; a third call cost the plain loop ~1/13 of its time in each compare (13 -> 12 calls).
WARMUP = 0


def _mode(backward: bool) -> str:
    return "forward_backward" if backward else "forward"


def _unsupported(implementation: str, reason: str) -> Candidate:
    """A candidate that cannot run here: compare records it as skipped with `reason`."""

    def fn():
        raise Unsupported(reason)

    return Candidate(implementation, fn, check=lambda out: out)


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


def strategy_candidate(
    name: str, case: MoECase, *, backward: bool = False, compiled: bool = False, ref=None
) -> Candidate:
    """One strategy on one case: its forward output (eager or compiled) or its expert-weight
    gradients, checked against the fp64 loop over experts (`ref`: a shared cached reference)."""
    implementation = f"dispatch_{name}" + ("_compiled" if compiled else "")
    reason = unavailable(name, case.x, case.feedforward, compiled=compiled, backward=backward)
    if reason:
        return _unsupported(implementation, reason)
    feedforward = case.feedforward
    if backward:
        feedforward = copy.deepcopy(feedforward).requires_grad_(True)

    def forward():
        return run_strategy(name, case.x, case.routing, feedforward, capacity=case.shape.capacity)

    if compiled:
        # The loop's per-expert row counts are data: static shapes would recompile per count.
        forward = torch.compile(forward, dynamic=name == PLAIN)
    weights = [feedforward.w_in, feedforward.w_out]
    fn = _grads(forward, weights, case.grad_out) if backward else forward
    if backward:
        check = checks.against(
            ref or functools.partial(reference_grads, case),
            reference="fp64 loop over experts, autograd",
            tolerance=tolerance("grads", case.dtype),
        )
    else:
        check = checks.against(
            ref or functools.partial(reference, case),
            reference="fp64 loop over experts",
            tolerance=tolerance("forward", case.dtype),
        )
    flops = case.flops() * (BACKWARD_FLOPS if backward else 1)
    return Candidate(implementation, fn, check, flops=flops)


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


def _make_case(
    cfg: MoEBenchConfig, facts: DeviceFacts, shape: MoEShape, dtype: str | None = None
) -> MoECase:
    """make_case of `shape` with moe_activation on this device, in `dtype` (None: moe_dtype)."""
    return make_case(
        shape, dtype=dtype or cfg.dtype, activation=cfg.activation, device=facts.device
    )


def memory_reason(shape: MoEShape, dtype: str, facts: DeviceFacts) -> str | None:
    """Why a case of `shape` in `dtype` does not fit this device's memory, or None."""
    need = memory_needed(shape, parse_dtype(dtype).itemsize)
    if facts.memory_bytes and need > facts.memory_bytes:
        return (
            f"needs about {need / 2**30:.1f} GiB (case, weights, fp64 reference), "
            f"{facts.name} has {facts.memory_bytes / 2**30:.1f} GiB"
        )
    return None


def _finish(records: list[rec.Record], tokens: int, *, peak: bool = True) -> list[rec.Record]:
    """tokens/s in metrics; fraction_of_peak over the dense pair of the same compare."""
    dense = next((r for r in records if r.implementation == DENSE and r.status == "ok"), None)
    out = []
    for r in records:
        if r.status == "ok":
            per_s = tokens / r.median_ms * 1e3
            r = dataclasses.replace(r, metrics={**r.metrics, "tokens_per_s": per_s})
            if peak and dense is not None and r is not dense:
                r = rec.with_peak(r, dense.tflops, basis=DENSE_BASIS)
        out.append(r)
    return out


def with_plain(strategies) -> tuple:
    """`strategies` with the plain comparator's strategy, so it is always timed."""
    return tuple(strategies) if PLAIN in strategies else (*strategies, PLAIN)


def chosen_headline(
    records: list[rec.Record], case: Case, facts: DeviceFacts, *, comparator: str, key: str
) -> list[rec.Record]:
    """`variants.choose` among the dispatch records of one compare (the plain comparator among
    them; the other plain one, eager or compiled, is not a variant) and the chosen one declared
    the headline `key`. Records unchanged but for `variant` when none ran."""
    plain = f"dispatch_{PLAIN}"
    among = tuple(
        r.implementation
        for r in records
        if r.implementation.startswith("dispatch_")
        and (r.implementation == comparator or not r.implementation.startswith(plain))
    )
    choice, records = choose(
        f"moe_dispatch_{case.case}", case, records, facts=facts, among=among, comparator=comparator
    )
    return [rec.as_headline(r, key) if r.implementation == choice else r for r in records]


def compare_strategies(
    cfg: MoEBenchConfig,
    facts: DeviceFacts,
    shape: MoEShape,
    strategies,
    *,
    case_name: str,
    backward: bool = False,
    compiled=(),
    progress: str | None = None,
) -> tuple[Case, list[rec.Record]]:
    """Dense pair and every strategy (eager, then compiled) on the case of `shape` in moe_dtype,
    in one interleaved compare against `dense_gemm` (all skipped when the case does not fit):
    the compare's case and its records."""
    names = [DENSE] + [f"dispatch_{s}" for s in strategies]
    names += [f"dispatch_{s}_compiled" for s in compiled]
    reason = memory_reason(shape, cfg.dtype, facts)
    if reason:
        candidates = [_unsupported(n, reason) for n in names]
    else:
        case = _make_case(cfg, facts, shape)
        ref = functools.cache(functools.partial(reference_grads if backward else reference, case))
        candidates = [dense_candidate(case, backward=backward)]
        candidates += [strategy_candidate(s, case, backward=backward, ref=ref) for s in strategies]
        candidates += [strategy_candidate(s, case, compiled=True, ref=ref) for s in compiled]
    measured = Case(TOPIC, case_name, shape.as_dict(), cfg.dtype, _mode(backward))
    records = compare(
        measured,
        candidates,
        facts=facts,
        baseline=DENSE,
        min_time_s=cfg.min_time_s,
        warmup=WARMUP,
        progress=progress,
    )
    return measured, _finish(records, shape.tokens)


def section_throughput(
    cfg: MoEBenchConfig, facts: DeviceFacts, *, backward: bool = False, progress: bool = False
) -> list[rec.Record]:
    """Per (T, D, F) shape: dense pair, every strategy (eager; the `compile` ones compiled too
    for forward) and the plain comparator (the loop, compiled for forward, eager for forward +
    backward), at the first imbalance, dropless; the dispatch chosen here (`chosen_headline`)
    against the dense pair is the headline."""
    mode, out = _mode(backward), []
    compiled = () if backward else with_plain(cfg.compile)
    comparator = f"dispatch_{PLAIN}" + ("" if backward else "_compiled")
    for shape in cfg.shapes:
        case, records = compare_strategies(
            cfg,
            facts,
            shape,
            with_plain(cfg.strategies),
            case_name=mode,
            backward=backward,
            compiled=compiled,
            progress=f"moe {mode}" if progress else None,
        )
        key = f"moe.{mode}_vs_dense"
        out += chosen_headline(records, case, facts, comparator=comparator, key=key)
    return out


SEED_CASES = {  # case name -> (our dtype, headline key)
    "seed_same_dtype": ("float32", "moe.seed_same_dtype"),
    "seed_config": (None, "moe.seed_config"),
}


def section_seed(cfg: MoEBenchConfig, facts: DeviceFacts, case_name: str) -> list[rec.Record]:
    """Our side strategies (cfg.side; eager forward, the plain loop among them) against the
    seed-style baseline at the first shape, in one interleaved compare with baseline
    `seed_style`: case `seed_same_dtype` (ours in fp32) or `seed_config` (ours in moe_dtype
    against the seed's fp32 training-mode forward). The headline: the dispatch chosen here
    (`chosen_headline`)."""
    dtype, key = SEED_CASES[case_name]
    dtype, shape = dtype or cfg.dtype, cfg.shapes[0]  # None: moe_dtype
    strategies = with_plain(cfg.side)
    names = [f"dispatch_{s}" for s in strategies] + [SEED]
    reason = memory_reason(shape, "float32", facts)  # the seed's dtype
    if reason:
        candidates = [_unsupported(n, reason) for n in names]
    else:
        case = _make_case(cfg, facts, shape, dtype)
        ref = functools.cache(functools.partial(reference, case))
        candidates = [strategy_candidate(s, case, ref=ref) for s in strategies]
        candidates.append(seed_style_candidate(case))
    measured = Case(TOPIC, case_name, shape.as_dict(), dtype, "forward")
    records = compare(
        measured,
        candidates,
        facts=facts,
        baseline=SEED,
        min_time_s=cfg.min_time_s,
        warmup=WARMUP,
    )
    records = _finish(records, shape.tokens, peak=False)
    comparator = f"dispatch_{PLAIN}"
    return chosen_headline(records, measured, facts, comparator=comparator, key=key)


def section_capacity(cfg: MoEBenchConfig, facts: DeviceFacts) -> list[rec.Record]:
    """Capacity-factor mode (priority drops) at the first shape, the side strategies (cfg.side):
    case `forward_capacity`, with the routing's load and drop figures in every record's metrics."""
    shape = cfg.shapes[0].with_capacity_factor(cfg.capacity_factor)
    _, records = compare_strategies(cfg, facts, shape, cfg.side, case_name="forward_capacity")
    if memory_reason(shape, cfg.dtype, facts):
        return records
    load = load_metrics(_make_case(cfg, facts, shape).routing)
    return [dataclasses.replace(r, metrics={**r.metrics, **load}) for r in records]


def _layer_candidate(layer_type: str, case: MoECase, strategy: str) -> Candidate:
    """One layer preset (router, capacity, dispatch) at the case's sizes, eval, no grad; its
    output checked against the fp64 twin on its own routing. FLOPs: kept expert rows only."""
    shape = case.shape
    cfg = MoEConfig.for_layer_type(
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
        return _unsupported(layer_type, reason)
    routing, _ = layer.route(case.x)
    check = checks.against(
        functools.partial(layer_reference, layer, case.x),
        reference="fp64 twin on the layer's own routing",
        tolerance=tolerance("forward", case.dtype),
    )
    metrics = {**load_metrics(routing), "K": cfg.top_k}
    flops = float(int(routing.counts.sum()) * layer.experts.flops_per_row())
    return Candidate(layer_type, lambda: layer(case.x).y, check, flops=flops, metrics=metrics)


def section_layers(
    cfg: MoEBenchConfig, facts: DeviceFacts, *, strategy: str = "sorted_grouped"
) -> list[rec.Record]:
    """Forward of each layer type's preset at the first shape, in one compare against the
    `standard` layer when it is timed (shape: the requested K; metrics.K: the preset's)."""
    shape = cfg.shapes[0]
    reason = memory_reason(shape, cfg.dtype, facts)
    if reason:
        candidates = [_unsupported(t, reason) for t in cfg.layer_types]
    else:
        case = _make_case(cfg, facts, shape)
        candidates = [_layer_candidate(t, case, strategy) for t in cfg.layer_types]
    baseline = LAYER_BASELINE if LAYER_BASELINE in cfg.layer_types else None
    records = compare(
        Case(TOPIC, "layer_forward", shape.as_dict(), cfg.dtype, "forward"),
        candidates,
        facts=facts,
        baseline=baseline,
        min_time_s=cfg.min_time_s,
        warmup=WARMUP,
    )
    return _finish(records, shape.tokens, peak=False)


def sweep_values(axis: str, cfg: MoEBenchConfig) -> tuple:
    return {
        "tokens": cfg.sweep_tokens,
        "experts": cfg.sweep_experts,
        "top_k": cfg.sweep_top_k,
        "imbalance": cfg.imbalance,
    }[axis]


def section_sweep(
    axis: str, cfg: MoEBenchConfig, facts: DeviceFacts, *, progress: bool = False
) -> list[rec.Record]:
    """One declared sweep (case `sweep_<axis>`, the swept value in its shape: T, E, K or imbalance): forward of the
    sweep strategies and the dense pair at each point; tokens at full size, the other axes at
    moe_sweep_base_tokens."""
    base = cfg.shapes[0]
    if axis != "tokens":
        base = dataclasses.replace(base, tokens=cfg.sweep_base_tokens)
    out = []
    for value in tqdm(sweep_values(axis, cfg), disable=not progress, desc=f"moe sweep {axis}"):
        out += compare_strategies(
            cfg,
            facts,
            dataclasses.replace(base, **{axis: value}),
            cfg.sweep_strategies,
            case_name=f"sweep_{axis}",
        )[1]
    return out


def load_text(cfg: MoEBenchConfig) -> str:
    """What the load histograms count: the routing of the first shape's tokens (plot titles)."""
    shape = cfg.shapes[0]
    return f"T={shape.tokens},E={shape.experts},K={shape.top_k}"


def balance_text(cfg: MoEBenchConfig) -> str:
    """What the load-over-steps plot routes: the preset, its tokens a step, the bias update's
    step size and the skew of the logits (plot titles)."""
    return (
        f"{cfg.balance_preset} T={cfg.preset_tokens},"
        f"gamma={cfg.balance_gamma},zipf={cfg.preset_zipf}"
    )


def load_rows(cfg: MoEBenchConfig, facts: DeviceFacts) -> list[dict]:
    """Tokens per expert at each imbalance (one row per expert), for the load histograms."""
    rows = []
    for imbalance in cfg.imbalance:
        shape = dataclasses.replace(cfg.shapes[0], imbalance=imbalance)
        routing = _make_case(cfg, facts, shape).routing
        metrics = load_metrics(routing)
        rows += [
            {"imbalance": imbalance, "expert": e, "tokens": n, "cv": round(metrics["cv"], 3)}
            for e, n in enumerate(metrics["tokens_per_expert"])
        ]
    return rows


def variant_table(records: list[rec.Record]) -> pd.DataFrame:
    """The dispatch candidates of a throughput section side by side, for this machine: time,
    ratio against the dense pair with its interval, which one is used here (`variant`, and
    whether this run measured or reused the cached choice) and any flag (a tuned strategy
    slower than the plain comparator). Skipped and wrong candidates with their reason."""
    rows = [
        {
            "case": r.case,
            "D": r.shape.get("D"),
            "implementation": r.implementation,
            "status": r.status,
            "median_ms": r.median_ms,
            "ratio_vs_dense": r.ratio_vs_baseline,
            "ratio_low": r.ratio_low,
            "ratio_high": r.ratio_high,
            "chosen": r.variant is not None and r.implementation == r.variant,
            "choice": r.metrics.get("variant_source"),
            "flags_or_reason": "; ".join(r.flags) or (r.reason or ""),
        }
        for r in records
        if r.implementation.startswith("dispatch_")
    ]
    return pd.DataFrame(rows).round(3)


def baseline_table(records: list[rec.Record]) -> pd.DataFrame:
    """The seed-style comparisons: speed, ratio against the seed with its interval and verdict,
    and what each implementation dropped (dropless strategies drop nothing)."""
    rows = [
        {
            "case": r.case,
            "implementation": r.implementation,
            "dtype": r.dtype,
            "tokens_per_s": r.metrics.get("tokens_per_s"),
            "ratio_vs_seed_style": r.ratio_vs_baseline,
            "ratio_low": r.ratio_low,
            "ratio_high": r.ratio_high,
            "verdict": r.verdict,
            "drop_rate": r.metrics.get("drop_rate", 0.0),
            "reported_dropped": r.metrics.get("reported_dropped", 0),
        }
        for r in records
        if r.case in SEED_CASES and r.status == "ok"
    ]
    return pd.DataFrame(rows).round(3)
