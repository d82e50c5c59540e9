"""`python -m kernel_lib bench moe`: the MoE notebook's measurements, as records.

Legend: T tokens, D model, F ffn, E experts, K top-k. Every strategy's record carries
fraction_of_peak = its TFLOP/s over a dense GEMM pair with identical FLOPs timed in the same run
(`dense_gemm`: (A, D) @ (D, F) then (A, F) @ (F, D), A = kept assignments), and
ratio_vs_baseline = seed-style median / its median (forward only: the seed timed forward).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import pandas as pd
import torch
from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.moe.cases import MoECase, dtype_of, make_case, run, unavailable
from kernel_lib.moe.layers import MoEConfig, MoELayer
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.moe.seed_style import SeedStyleMoE
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.timing import Timing, time_fn, time_interleaved

TOPIC = "moe"
DENSE_BASIS = "dense GEMM pair, same FLOPs, same run"


def _time(fn, facts: DeviceFacts, min_time_s: float):
    return time_fn(fn, device=facts.device, warmup=1, min_time_s=min_time_s)


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """A function to time and how to make its record from the timing."""

    fn: Callable[[], object]
    record: Callable[[Timing], rec.Record]


def _forward_backward(fn, params):
    """fn() -> y; returns a callable running y and dL/dparams for L = <y, g> (g fixed)."""
    for p in params:
        p.requires_grad_(True)
    grad = None

    def step():
        nonlocal grad
        y = fn()
        grad = torch.randn_like(y) if grad is None else grad
        torch.autograd.backward(y, grad, inputs=params)
        for p in params:
            p.grad = None

    return step


def _kind(backward: bool) -> str:
    return "forward_backward" if backward else "forward"


def dense_candidate(case: MoECase, *, facts: DeviceFacts, backward: bool = False) -> _Candidate:
    """The dense ceiling: a GEMM pair with the case's executed FLOPs, in its dtype."""
    rows, e = case.executed_rows(), case.experts
    a = torch.randn(rows, e.hidden, dtype=case.x.dtype, device=case.x.device)
    w1 = e.w_in[0, :, : e.ffn].detach().clone()
    w2 = e.w_out[0].detach().clone()
    fn = lambda: (a @ w1) @ w2  # noqa: E731
    if backward:
        fn = _forward_backward(fn, [w1, w2])
    flops = 2 * rows * e.hidden * e.ffn * 2 * (3 if backward else 1)
    dtype = str(case.x.dtype).removeprefix("torch.")
    return _Candidate(fn, lambda timing: rec.measured(
        TOPIC, _kind(backward), "dense_gemm", timing, facts=facts, dtype=dtype, shape=case.shape, flops=flops))


def strategy_candidate(
    name: str,
    case: MoECase,
    *,
    facts: DeviceFacts,
    backward: bool = False,
    compiled: bool = False,
) -> _Candidate | rec.Record:
    """One strategy on one case: forward (no grad) or forward + backward to the expert weights;
    a skipped record where the strategy cannot run here."""
    impl = f"dispatch_{name}" + ("_compiled" if compiled else "")
    dtype = str(case.x.dtype).removeprefix("torch.")
    reason = unavailable(name, case)
    if reason:
        return rec.skipped(TOPIC, _kind(backward), impl, reason, facts=facts, dtype=dtype, shape=case.shape)
    experts = case.experts if not backward else _trainable_copy(case.experts)
    case = dataclasses.replace(case, experts=experts)

    def fn():
        return run(name, case)

    if compiled:
        fn = torch.compile(fn, dynamic=False)
    if backward:
        fn = _forward_backward(fn, [experts.w_in, experts.w_out])
    return _Candidate(fn, lambda timing: rec.measured(
        TOPIC, _kind(backward), impl, timing, facts=facts, dtype=dtype, shape=case.shape,
        flops=case.flops() * (3 if backward else 1),
        metrics={"tokens_per_s": case.x.shape[0] / timing.median_ms * 1e3}))


def _trainable_copy(experts):
    copy = type(experts)(
        experts.num_experts, experts.hidden, experts.ffn, activation=experts.activation
    )
    copy = copy.to(experts.w_in.dtype)
    with torch.no_grad():
        copy.w_in.copy_(experts.w_in)
        copy.w_out.copy_(experts.w_out)
    return copy


def seed_style_candidate(case: MoECase, *, facts: DeviceFacts, capacity_factor: float = 1.25) -> _Candidate:
    """The old system's forward (fp32, training mode, graph recorded, random drops) on the same x,
    gate and experts; FLOPs count only the rows it really ran; drop rates in metrics."""
    top_k = case.routing.top_k or 1
    seed = SeedStyleMoE(case.gate, case.experts, top_k=top_k, capacity_factor=capacity_factor)
    x = case.x.float()
    torch.manual_seed(0)
    with torch.enable_grad():
        out = seed(x)
    kept = out.assignments - out.dropped

    def fn():
        with torch.enable_grad():  # as the seed ran: recording the graph
            return seed(x)

    def record(timing: Timing) -> rec.Record:
        metrics = {
            "drop_rate": out.dropped / max(out.assignments, 1),
            "dropped": out.dropped,
            "reported_dropped": out.reported_dropped,
            "tokens_per_s": x.shape[0] / timing.median_ms * 1e3,
        }
        return rec.measured(TOPIC, "forward", "seed_style", timing, facts=facts, dtype="float32",
                            shape=case.shape, flops=float(kept * case.experts.flops_per_row()), metrics=metrics)

    return _Candidate(fn, record)


def compare(
    case: MoECase,
    strategies: list[str],
    *,
    facts: DeviceFacts,
    backward: bool = False,
    compiled: list[str] = (),
    seed_style: bool = True,
    min_time_s: float = 0.2,
    progress: bool = False,
) -> list[rec.Record]:
    """Dense ceiling, every strategy (eager, then compiled where asked), and the seed-style
    baseline (forward only), all on one case and timed in alternation (`time_interleaved`), so
    fractions and ratios hold on a shared machine; fractions and ratios filled in."""
    entries = [dense_candidate(case, facts=facts, backward=backward)]  # candidates, or skipped records
    for name, comp in [(s, False) for s in strategies] + [(s, True) for s in compiled]:
        entries.append(strategy_candidate(name, case, facts=facts, backward=backward, compiled=comp))
    with_seed = seed_style and not backward
    if with_seed:
        entries.append(seed_style_candidate(case, facts=facts))
    fns = {i: c.fn for i, c in enumerate(entries) if isinstance(c, _Candidate)}
    with torch.set_grad_enabled(backward):
        timings = time_interleaved(fns, device=facts.device, warmup=1, min_time_s=min_time_s,
                                   progress="moe strategies" if progress else None)
    out = [c.record(timings[i]) if isinstance(c, _Candidate) else c for i, c in enumerate(entries)]
    dense, baseline = out[0], out[-1] if with_seed else None
    return [_derive(r, dense, baseline) for r in out]


def _derive(record: rec.Record, dense: rec.Record, baseline: rec.Record | None) -> rec.Record:
    if record.status != "ok":
        return record
    record = rec.with_peak(record, dense.tflops, basis=DENSE_BASIS)
    if baseline is not None and record is not baseline and record.implementation != "dense_gemm":
        record = rec.with_baseline(record, baseline)
    return record


def time_layer_types(
    case: MoECase,
    layer_types: list[str],
    *,
    facts: DeviceFacts,
    strategy: str = "sorted_grouped",
    min_time_s: float = 0.2,
) -> list[rec.Record]:
    """Forward (eval, no grad) of each layer type's preset at the case's sizes, incl. routing."""
    e = case.experts
    out = []
    for layer_type in layer_types:
        cfg = MoEConfig.for_layer_type(
            layer_type,
            hidden=e.hidden,
            ffn=e.ffn,
            num_experts=e.num_experts,
            top_k=case.routing.top_k or 1,
            strategy=strategy,
        )
        torch.manual_seed(0)
        layer = MoELayer(cfg).to(case.x.dtype).eval().requires_grad_(False)
        routing = layer.route(case.x)[0]
        rows = int(routing.counts.sum())
        timing = _time(lambda: layer(case.x), facts, min_time_s)
        out.append(
            rec.measured(
                TOPIC,
                "layer_forward",
                layer_type,
                timing,
                facts=facts,
                dtype=str(case.x.dtype).removeprefix("torch."),
                shape={**case.shape, "K": cfg.top_k},
                flops=float(rows * layer.experts.flops_per_row()),
                metrics={
                    **load_metrics(routing),
                    "tokens_per_s": case.x.shape[0] / timing.median_ms * 1e3,
                },
            )
        )
    return out


def sweep(
    axis: str,
    values: list,
    base: dict,
    strategies: list[str],
    *,
    facts: DeviceFacts,
    min_time_s: float = 0.1,
    progress: bool = False,
) -> list[rec.Record]:
    """Forward of each strategy (and the dense ceiling) as one make_case argument varies;
    records get case = f"sweep_{axis}" and the value in shape."""
    out = []
    for value in tqdm(values, disable=not progress, desc=f"moe sweep {axis}"):
        case = make_case(**{**base, axis: value})
        recs = compare(case, strategies, facts=facts, seed_style=False, min_time_s=min_time_s)
        out += [
            dataclasses.replace(r, case=f"sweep_{axis}", shape={**r.shape, axis: value})
            for r in recs
        ]
    return out


def load_rows(base: dict, imbalances: list[float]) -> list[dict]:
    """Tokens per expert for each imbalance (one row per expert) for the load histograms."""
    rows = []
    for imbalance in imbalances:
        metrics = load_metrics(make_case(**{**base, "imbalance": imbalance}).routing)
        rows += [
            {"imbalance": imbalance, "expert": e, "tokens": n, "cv": round(metrics["cv"], 3)}
            for e, n in enumerate(metrics["tokens_per_expert"])
        ]
    return rows


def base_case(params: dict, *, device: str = "cpu", index: int = 0) -> dict:
    """make_case keyword arguments for throughput shape `index`: the index-th entries of
    moe_tokens, moe_hidden and moe_ffn (three lists of one length, read together)."""
    n = len(params["moe_hidden"])
    for name in ("moe_tokens", "moe_ffn"):
        if len(params[name]) != n:
            raise ValueError(
                f"{name}={params[name]} must have one entry per moe_hidden entry ({n})"
            )
    dtype_of(params["moe_dtype"])
    return {
        "tokens": params["moe_tokens"][index],
        "hidden": params["moe_hidden"][index],
        "ffn": params["moe_ffn"][index],
        "experts": params["moe_experts"],
        "top_k": params["moe_top_k"],
        "dtype": params["moe_dtype"],
        "activation": params["moe_activation"],
        "device": device,
    }


def section_throughput(
    params: dict, facts: DeviceFacts, *, backward: bool = False, progress: bool = False
) -> list[rec.Record]:
    """Per (tokens, hidden, ffn) shape: dense ceiling, every strategy (eager; compiled too for
    forward), and the seed-style baseline (forward only), dropless, at the first imbalance."""
    out = []
    for index in range(len(params["moe_hidden"])):
        case = make_case(
            **base_case(params, device=facts.device, index=index),
            imbalance=params["moe_imbalance"][0],
        )
        out += compare(
            case,
            params["moe_strategies"],
            facts=facts,
            backward=backward,
            compiled=[] if backward else params["moe_compile"],
            min_time_s=params["moe_min_time_s"],
            progress=progress,
        )
    return out


def section_capacity(params: dict, facts: DeviceFacts) -> list[rec.Record]:
    """Capacity-factor mode (priority drops) at the first hidden size: case `forward_capacity`."""
    case = make_case(
        **base_case(params, device=facts.device), capacity_factor=params["moe_capacity_factor"]
    )
    recs = compare(
        case,
        params["moe_strategies"],
        facts=facts,
        seed_style=False,
        min_time_s=params["moe_min_time_s"],
    )
    return [
        dataclasses.replace(
            r, case="forward_capacity", metrics={**r.metrics, **load_metrics(case.routing)}
        )
        for r in recs
    ]


def section_layers(params: dict, facts: DeviceFacts) -> list[rec.Record]:
    return time_layer_types(
        make_case(**base_case(params, device=facts.device)),
        params["moe_layer_types"],
        facts=facts,
        min_time_s=params["moe_min_time_s"],
    )


def section_sweep(
    axis: str, params: dict, facts: DeviceFacts, *, progress: bool = False
) -> list[rec.Record]:
    """One declared sweep: tokens (full size); experts, top_k, imbalance (at sweep_base_tokens)."""
    values = {
        "tokens": params["moe_sweep_tokens"],
        "experts": params["moe_sweep_experts"],
        "top_k": params["moe_sweep_top_k"],
        "imbalance": params["moe_imbalance"],
    }[axis]
    base = base_case(params, device=facts.device)
    if axis != "tokens":
        base = {**base, "tokens": params["moe_sweep_base_tokens"]}
    return sweep(
        axis,
        values,
        base,
        params["moe_sweep_strategies"],
        facts=facts,
        min_time_s=params["moe_min_time_s"],
        progress=progress,
    )


def baseline_table(records: list[rec.Record]) -> pd.DataFrame:
    """Forward strategies next to the seed-style baseline: speed, ratio and what each dropped."""
    rows = [
        {
            "implementation": r.implementation,
            "D": r.shape.get("D"),
            "dtype": r.dtype,
            "tokens_per_s": r.metrics.get("tokens_per_s"),
            "ratio_vs_seed_style": r.ratio_vs_baseline,
            "drop_rate": r.metrics.get("drop_rate", 0.0),
            "reported_dropped": r.metrics.get("reported_dropped", 0),
        }
        for r in records
        if r.case == "forward" and r.status == "ok" and r.implementation != "dense_gemm"
    ]
    return pd.DataFrame(rows).round(3)


SWEEPS = ("tokens", "experts", "top_k", "imbalance")


def suite(params: dict, *, progress: bool = False) -> list[rec.Record]:
    """What the notebook measures, in its order."""
    facts = device_facts()
    records = section_throughput(params, facts, progress=progress)
    if params["moe_backward"]:
        records += section_throughput(params, facts, backward=True, progress=progress)
    records += section_capacity(params, facts)
    records += section_layers(params, facts)
    for axis in SWEEPS:
        records += section_sweep(axis, params, facts, progress=progress)
    return records
