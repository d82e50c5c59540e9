"""torch_xla specifics: trace vs compile vs execute, recompiles on shape changes and how bucketing
avoids them, matmul precision, and the XLA metrics report. torch_xla is imported lazily: it lives
only in the XLA environment (requirements-tpu.txt)."""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import statistics

import pandas as pd
import torch

from kernel_lib.backends.costs import mlp_input, small_mlp
from kernel_lib.backends.roofline import gemm_error
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.records import Record, measured, with_baseline
from kernel_lib.timing import Timing, time_fn

PRECISIONS = ("default", "high", "highest")  # torch_xla.backends.set_mat_mul_precision values


def xla_facts() -> dict:
    """torch_xla's view of the runtime: PJRT device type and count, matmul precision, libtpu."""
    import torch_xla.backends
    import torch_xla.runtime as xr

    return {
        "pjrt_device": xr.device_type(),
        "PJRT_DEVICE env": os.environ.get("PJRT_DEVICE", "unset"),
        "devices": xr.global_runtime_device_count(),
        "mat_mul_precision": torch_xla.backends.get_mat_mul_precision(),
        "libtpu": _libtpu_version(),
    }


def _libtpu_version() -> str:
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return "not installed (TPU hosts: pip install torch-xla[tpu])"


def use_full_fp32(target: Target) -> str:
    """Run fp32 matmuls at XLA precision 'highest' from here on, so the 'float32' rows of the sweep
    are fp32 (a TPU's 'default' uses bf16 passes; `matmul_precision` measures that separately).
    Returns the precision now in force, or the skip reason."""
    if not target.present:
        return f"skipped: {target.reason}"
    import torch_xla.backends

    torch_xla.backends.set_mat_mul_precision("highest")
    return torch_xla.backends.get_mat_mul_precision()


def compile_count() -> int:
    """Graphs compiled so far in this process (the UncachedCompile counter)."""
    import torch_xla.debug.metrics as met

    return met.counter_value("UncachedCompile") or 0


def _metric_timing(name: str) -> Timing | None:
    """A Timing from a torch_xla metric's samples (nanoseconds), as recorded by the runtime."""
    import torch_xla.debug.metrics as met

    data = met.metric_data(name)
    if not data:
        return None
    ms = sorted(value / 1e6 for _, value in data[2])
    q = lambda f: ms[min(len(ms) - 1, round(f * (len(ms) - 1)))]  # noqa: E731
    return Timing(
        median_ms=statistics.median(ms),
        p10_ms=q(0.1),
        p90_ms=q(0.9),
        min_ms=ms[0],
        reps=len(ms),
        method=f"torch_xla metric {name}",
        peak_mem_bytes=None,
    )


def compile_phases(
    target: Target, *, batch: int, dim: int, dtype: str, min_time_s: float = 0.2
) -> list[Record]:
    """One MLP forward on a new shape, split into: trace (building the lazy graph on the host,
    never run), first_call (trace + compile + execute), compile (XLA's CompileTime metric in the
    first call) and cached_call (trace + execute once the graph is cached). It runs batch + 1 rows:
    XLA's graph cache lives as long as the process, and the costs section compiled (batch, dim)."""
    if not target.present:
        return [
            target.absent("xla_phase", phase)
            for phase in ("trace", "first_call", "compile", "cached_call")
        ]
    import torch_xla
    import torch_xla.debug.metrics as met

    facts, device = target.facts, target.facts.device
    rows = batch + 1
    mlp, x = (
        small_mlp(dim, device=device, dtype=dtype),
        mlp_input(rows, dim, device=device, dtype=dtype),
    )
    torch_xla.sync()
    shape = {"batch": rows, "dim": dim}

    def record(phase: str, timing: Timing, **metrics) -> Record:
        return measured(
            TOPIC,
            "xla_phase",
            phase,
            timing,
            facts=facts,
            dtype=dtype,
            shape=shape,
            metrics=metrics,
        )

    with torch.no_grad():
        # Host-only: outputs are dropped unsynced, so their graphs are never compiled or run.
        trace = time_fn(lambda: mlp(x), device="cpu", min_time_s=min_time_s)
        met.clear_metrics()
        before = compile_count()
        first = time_fn(lambda: mlp(x), device=device, warmup=0, reps=1)
        compiles, compile_time = compile_count() - before, _metric_timing("CompileTime")
        cached = time_fn(lambda: mlp(x), device=device, min_time_s=min_time_s)
    records = [
        record("trace", trace, note="host only: the lazy graph is built, never run"),
        record("first_call", first, compiles=compiles),
    ]
    if compile_time:
        records.append(record("compile", compile_time, compiles=compiles))
    execute = max(cached.median_ms - trace.median_ms, 0.0)
    records.append(
        with_baseline(
            record(
                "cached_call",
                cached,
                compiles=compile_count() - before - compiles,
                execute_ms_derived=execute,
            ),
            records[1],
        )
    )
    return records


def bucket_length(length: int, bucket: int) -> int:
    """`length` rounded up to a multiple of `bucket`: the shape the compiler sees after padding."""
    return math.ceil(length / bucket) * bucket


def _forward(
    mlp: torch.nn.Module, host: torch.Tensor, *, device: str, bucket: int | None
) -> torch.Tensor:
    """mlp over host (1, L, D) on the device; with `bucket`, padded on the host to bucket length
    and sliced back on the host, so the device graph only ever sees bucket shapes."""
    length = host.shape[1]
    if bucket:
        host = torch.nn.functional.pad(host, (0, 0, 0, bucket_length(length, bucket) - length))
    with torch.no_grad():
        return mlp(host.to(device)).cpu()[:, :length]


def _validate(seq_lens: list[int], bucket: int) -> None:
    if not seq_lens or min(seq_lens) <= 0:
        raise ValueError(f"xla_seq_lens={seq_lens} must be non-empty positive lengths")
    if bucket <= 0:
        raise ValueError(f"xla_bucket={bucket} must be > 0")


def _inputs(seq_lens: list[int], dim: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [torch.randn(1, n, dim, generator=gen) for n in seq_lens]


def recompiles(target: Target, *, seq_lens: list[int], bucket: int, dim: int) -> list[Record]:
    """A pass over inputs of lengths `seq_lens`, bucketed first then unpadded; metrics.compiles is
    how many graphs XLA compiled during that pass (a shape compiled before in this process is a
    cache hit). The bucketed outputs' real rows are checked against the unpadded ones
    (AssertionError if they differ) before anything is recorded."""
    _validate(seq_lens, bucket)
    if not target.present:
        return [target.absent("shape_change", impl) for impl in ("unpadded", "bucketed")]
    facts, device = target.facts, target.facts.device
    mlp, inputs = small_mlp(dim, device=device, dtype="float32"), _inputs(seq_lens, dim)
    outputs, counts, timings = {}, {}, {}
    for impl, b in (("bucketed", bucket), ("unpadded", None)):

        def run(impl=impl, b=b):
            outputs[impl] = [_forward(mlp, h, device=device, bucket=b) for h in inputs]

        before = compile_count()
        timings[impl] = time_fn(run, device=device, warmup=0, reps=1)
        counts[impl] = compile_count() - before
    diff = max(
        (p - u).abs().max().item()
        for p, u in zip(outputs["bucketed"], outputs["unpadded"], strict=True)
    )
    if diff > 1e-5:
        raise AssertionError(f"bucketed outputs differ from unpadded ones by {diff:.2e}")
    records = {
        impl: measured(
            TOPIC,
            "shape_change",
            impl,
            timings[impl],
            facts=facts,
            dtype="float32",
            shape={"passes": len(seq_lens), "dim": dim},
            metrics={
                "compiles": counts[impl],
                "max_abs_diff_vs_unpadded": diff if b else 0.0,
                "distinct_shapes": len({bucket_length(n, b) if b else n for n in seq_lens}),
            },
        )
        for impl, b in (("unpadded", None), ("bucketed", bucket))
    }
    return [records["unpadded"], with_baseline(records["bucketed"], records["unpadded"])]


def compile_table(records: list[Record]) -> pd.DataFrame:
    """Compile counts of the shape-change passes and their output check: deterministic, so a report
    can compare them."""
    rows = {
        r.implementation: {
            "distinct_shapes": r.metrics.get("distinct_shapes"),
            "compiles": r.metrics.get("compiles"),
            "outputs_match": "PASS" if r.status == "ok" else f"{r.status}: {r.reason}",
        }
        for r in records
        if r.case == "shape_change"
    }
    return pd.DataFrame(rows).T


def matmul_precision(target: Target, *, n: int, min_time_s: float = 0.2) -> list[Record]:
    """An fp32 n^3 GEMM at each torch_xla matmul precision (TPUs run 'default' fp32 matmuls in bf16
    passes): time, and max relative error vs float64 (metrics.max_rel_err) at n=256."""
    if n <= 0:
        raise ValueError(f"xla_precision_size={n} must be > 0")
    if not target.present:
        return [target.absent("matmul_precision", p) for p in PRECISIONS]
    import torch_xla.backends

    facts, device = target.facts, target.facts.device
    a, b = torch.randn(n, n).to(device), torch.randn(n, n).to(device)
    before, records = torch_xla.backends.get_mat_mul_precision(), []
    # torch_xla logs a warning each time the precision is set again; this function means to.
    log = logging.getLogger("torch_xla.backends")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        for precision in PRECISIONS:
            torch_xla.backends.set_mat_mul_precision(precision)
            timing = time_fn(lambda: a @ b, device=device, min_time_s=min_time_s)
            records.append(
                measured(
                    TOPIC,
                    "matmul_precision",
                    precision,
                    timing,
                    facts=facts,
                    dtype="float32",
                    shape={"M": n, "N": n, "K": n},
                    flops=2.0 * n**3,
                    metrics={"max_rel_err": gemm_error(256, "float32", device=device)},
                )
            )
    finally:
        torch_xla.backends.set_mat_mul_precision(before)
        log.setLevel(level)
    highest = records[-1]
    return [with_baseline(r, highest) if r is not highest else r for r in records]


def metrics_report() -> str:
    """torch_xla's short metrics report (compile and execution counters since start-up)."""
    import torch_xla.debug.metrics as met

    return met.short_metrics_report()
