"""`python -m kernel_lib bench moe`: the MoE notebook's measurements, as records.

Legend: T tokens, D model, F ffn, E experts, K top-k, A kept assignments. Every timed path is a
`measure.check_then_time` candidate (candidates.py) checked at its timed shape, dtype and mode
against an fp64 twin. Strategies are compared with `dense_gemm`, a GEMM pair with their FLOPs:
ratio_vs_baseline = dense time / strategy time, with its interval, and fraction_of_peak =
strategy TFLOP/s over that pair's. The seed-style baseline (the old system's fp32 training-mode
forward) is compared twice: with our strategies in fp32 (same dtype) and in moe_dtype (the
seed's configuration against ours).

The strategies are the variants of one kernel: `variants.choose` picks the fastest checked one
on this machine (cached per machine fingerprint, named in every record's `variant`), and that
one is the headline. The plain path, `dispatch_loop` (index_select + mm + index_add per expert)
under torch.compile for the forward, eager for forward + backward and the seed comparisons, is
always timed beside them: a strategy slower than it is flagged. A user's `moe.dispatch` kernels
(kernel_lib.plugins) are timed in the same compares (`compare_strategies`, presets), never chosen.
"""

from __future__ import annotations

import dataclasses
import functools

from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.config import parse_dtype
from kernel_lib.measure import Case, check_then_time
from kernel_lib.moe.candidates import (
    DENSE,
    PLAIN,
    SEED,
    dense_candidate,
    layer_candidate,
    plugin_candidates,
    plugins_unsupported,
    seed_style_candidate,
    strategy_candidate,
    unsupported,
)  # fmt: skip
from kernel_lib.moe.cases import MoECase, make_case, memory_needed, reference, reference_grads
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.platform import DeviceFacts
from kernel_lib.variants import choose

TOPIC = "moe"
DENSE_BASIS = "dense GEMM pair, same FLOPs, same run"
# The layer every other layer type is compared with, when it is timed.
LAYER_BASELINE = "standard"
# No warm-up call besides the two every candidate has: its checked first call (torch.compile
# compiles in it) and time_interleaved's call that sizes its reps. Every path here is warm after
# the first; a third call cost the plain loop ~1/13 of its time in each compare (13 -> 12 calls).
WARMUP = 0


def _mode(backward: bool) -> str:
    return "forward_backward" if backward else "forward"


def case_of(
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
    them; the other plain one, eager or compiled, is not a variant; nor is a plug-in, whatever
    its name) and the chosen one declared the headline `key`. Records unchanged but for
    `variant` when none ran."""
    plain = f"dispatch_{PLAIN}"
    among = tuple(
        r.implementation
        for r in records
        if r.implementation.startswith("dispatch_")
        and r.plugin is None
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
    """Dense pair, every strategy (eager, then compiled) and every `moe.dispatch` plug-in on the
    case of `shape` in moe_dtype, in one interleaved compare against `dense_gemm` (all skipped
    when the case does not fit): the compare's case and its records."""
    names = [DENSE] + [f"dispatch_{s}" for s in strategies]
    names += [f"dispatch_{s}_compiled" for s in compiled]
    reason = memory_reason(shape, cfg.dtype, facts)
    if reason:
        candidates = [unsupported(n, reason) for n in names] + plugins_unsupported(reason)
    else:
        case = case_of(cfg, facts, shape)
        ref = functools.cache(functools.partial(reference_grads if backward else reference, case))
        candidates = [dense_candidate(case, backward=backward)]
        candidates += [strategy_candidate(s, case, backward=backward, ref=ref) for s in strategies]
        candidates += [strategy_candidate(s, case, compiled=True, ref=ref) for s in compiled]
        candidates += plugin_candidates(case, backward=backward, ref=ref)
    measured = Case(TOPIC, case_name, shape.as_dict(), cfg.dtype, _mode(backward))
    records = check_then_time(
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
        candidates = [unsupported(n, reason) for n in names]
    else:
        case = case_of(cfg, facts, shape, dtype)
        ref = functools.cache(functools.partial(reference, case))
        candidates = [strategy_candidate(s, case, ref=ref) for s in strategies]
        candidates.append(seed_style_candidate(case))
    measured = Case(TOPIC, case_name, shape.as_dict(), dtype, "forward")
    records = check_then_time(
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
    load = load_metrics(case_of(cfg, facts, shape).routing)
    return [dataclasses.replace(r, metrics={**r.metrics, **load}) for r in records]


def section_layers(
    cfg: MoEBenchConfig, facts: DeviceFacts, *, strategy: str = "sorted_grouped"
) -> list[rec.Record]:
    """Forward of each layer type's preset at the first shape, in one compare against the
    `standard` layer when it is timed (shape: the requested K; metrics.K: the preset's)."""
    shape = cfg.shapes[0]
    reason = memory_reason(shape, cfg.dtype, facts)
    if reason:
        candidates = [unsupported(t, reason) for t in cfg.layer_types]
    else:
        case = case_of(cfg, facts, shape)
        candidates = [layer_candidate(t, case, strategy) for t in cfg.layer_types]
    baseline = LAYER_BASELINE if LAYER_BASELINE in cfg.layer_types else None
    records = check_then_time(
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
    """One declared sweep (case `sweep_<axis>`, the swept value in its shape: T, E, K or
    imbalance): forward of the sweep strategies and the dense pair at each point; tokens at full
    size, the other axes at moe_sweep_base_tokens."""
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
