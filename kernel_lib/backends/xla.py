"""torch_xla specifics: trace vs compile vs execute, recompiles on shape changes and how bucketing
avoids them, matmul precision, and the XLA metrics report. torch_xla is imported lazily: it lives
only in the XLA environment (requirements-tpu.txt)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import itertools
import logging
import math
import os
import statistics
from functools import partial

import pandas as pd
import torch

from kernel_lib import checks
from kernel_lib.backends import tolerances
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.costs import mlp_check, mlp_input, small_mlp
from kernel_lib.backends.roofline import gemm_check, gemm_operands
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.records import Record

PRECISIONS = ("default", "high", "highest")  # torch_xla.backends.set_mat_mul_precision values
PHASE_ROUNDS = 6  # each first_call compiles: the fewest rounds that give a 95 % interval
SPARE_ROWS = 64  # new row counts for the first calls (PHASE_ROUNDS + 2 of them are used)


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


def _compile_ms() -> float | None:
    """Median of torch_xla's CompileTime samples since the metrics were last cleared (ms)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return statistics.median(v / 1e6 for _, v in data[2]) if data else None


def compile_phases(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """One MLP forward split into: trace (building the lazy graph on the host, never synced: the
    check forces it once), first_call (trace + compile + execute: every call at a new row count,
    mlp_batch + 1, + 2, ..., so each compiles; the first is the one checked) against cached_call
    (trace + execute of a graph compiled before), interleaved with ratio first/cached.
    first_call.metrics: compiles during that comparison and XLA's median CompileTime."""
    phases = ("trace", "first_call", "cached_call")
    if not target.present:
        return [target.absent("xla_phase", phase) for phase in phases]
    import torch_xla
    import torch_xla.debug.metrics as met

    device, dtype, batch, dim = target.facts.device, cfg.mlp_dtype, cfg.mlp_batch, cfg.mlp_dim
    mlp = small_mlp(dim, device=device, dtype=dtype)
    spare = mlp_input(batch + SPARE_ROWS, dim, device=device, dtype=dtype)
    x = mlp_input(batch, dim, device=device, dtype=dtype)
    torch_xla.sync()
    rows = itertools.count(batch + 1)
    case = Case(TOPIC, "xla_phase", {"batch": batch, "dim": dim}, dtype=dtype)
    with torch.no_grad():
        host_only = dataclasses.replace(target.facts, device="cpu")  # nothing synced: host time
        records = check_then_time(
            case,
            [Candidate("trace", lambda: mlp(x), mlp_check(mlp, x, dtype))],
            facts=host_only,
            min_time_s=cfg.min_time_s,
        )
        met.clear_metrics()
        before = compile_count()
        first = Candidate(
            "first_call",
            lambda: mlp(spare[: next(rows)]),
            mlp_check(mlp, spare[: batch + 1], dtype),
        )
        timed = check_then_time(
            case,
            [first, Candidate("cached_call", lambda: mlp(x), mlp_check(mlp, x, dtype))],
            facts=target.facts,
            baseline="first_call",
            rounds=PHASE_ROUNDS,
            warmup=0,
            min_time_s=cfg.min_time_s,
        )
    metrics = {"compiles": compile_count() - before, "xla_compile_ms_median": _compile_ms()}
    return records + [
        dataclasses.replace(r, metrics={**r.metrics, **metrics})
        if r.implementation == "first_call"
        else r
        for r in timed
    ]


def bucket_length(length: int, bucket: int) -> int:
    """`length` rounded up to a multiple of `bucket`: the shape the compiler sees after padding."""
    return math.ceil(length / bucket) * bucket


def forward(
    mlp: torch.nn.Module, host: torch.Tensor, *, device: str, bucket: int | None
) -> torch.Tensor:
    """mlp over host (1, L, D) on the device; with `bucket`, padded on the host to bucket length
    and sliced back on the host, so the device graph only ever sees bucket shapes."""
    length = host.shape[1]
    if bucket:
        host = torch.nn.functional.pad(host, (0, 0, 0, bucket_length(length, bucket) - length))
    with torch.no_grad():
        return mlp(host.to(device)).cpu()[:, :length]


def _inputs(seq_lens, dim: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [torch.randn(1, n, dim, generator=gen) for n in seq_lens]


def recompiles(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """Passes over inputs of lengths xla_seq_lens (width mlp_dim), unpadded (the baseline) and
    bucketed to multiples of xla_bucket. metrics.compiles: graphs XLA compiled in a first pass of
    each (bucketed first; a shape compiled before in this process is a cache hit). Then both
    passes, checked against the float64 MLP, are timed interleaved once every shape is cached."""
    impls = {"unpadded": None, "bucketed": cfg.xla_bucket}
    if not target.present:
        return [target.absent("shape_change", impl) for impl in impls]
    device, dim = target.facts.device, cfg.mlp_dim
    mlp, inputs = small_mlp(dim, device=device, dtype="float32"), _inputs(cfg.xla_seq_lens, dim)
    passes = {impl: partial(_pass, mlp, inputs, device, bucket) for impl, bucket in impls.items()}
    compiles = {}
    for impl in ("bucketed", "unpadded"):
        before = compile_count()
        passes[impl]()
        compiles[impl] = compile_count() - before

    def reference() -> list[torch.Tensor]:
        mlp64 = small_mlp(dim, device="cpu", dtype="float64")
        with torch.no_grad():
            return [mlp64(h.double()) for h in inputs]

    check = checks.against(
        reference,
        reference="float64 MLP on the host, unpadded",
        tolerance=tolerances.MLP["float32"],
    )
    case = Case(TOPIC, "shape_change", {"passes": len(inputs), "dim": dim}, dtype="float32")
    records = check_then_time(
        case,
        [Candidate(impl, fn, check) for impl, fn in passes.items()],
        facts=target.facts,
        baseline="unpadded",
        min_time_s=cfg.min_time_s,
    )
    shapes = {
        impl: len({bucket_length(n, b) if b else n for n in cfg.xla_seq_lens})
        for impl, b in impls.items()
    }
    return [
        dataclasses.replace(
            r,
            metrics={
                **r.metrics,
                "compiles": compiles[r.implementation],
                "distinct_shapes": shapes[r.implementation],
            },
        )
        for r in records
    ]


def _pass(mlp, inputs, device, bucket) -> list[torch.Tensor]:
    return [forward(mlp, h, device=device, bucket=bucket) for h in inputs]


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


def mm_at_precision(precision: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b traced at torch_xla matmul precision `precision` (left set: the caller restores)."""
    import torch_xla.backends

    torch_xla.backends.set_mat_mul_precision(precision)
    return a @ b


def matmul_precision(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """An fp32 n^3 GEMM (n = xla_precision_size) at each torch_xla matmul precision, interleaved,
    'highest' the baseline (TPUs run 'default' fp32 matmuls in bf16 passes); each output checked
    against float64 with its precision's bound."""
    if not target.present:
        return [target.absent("matmul_precision", p) for p in PRECISIONS]
    import torch_xla.backends

    n, device = cfg.xla_precision_size, target.facts.device
    case = Case(TOPIC, "matmul_precision", {"M": n, "N": n, "K": n}, dtype="float32")
    a, b = gemm_operands(n, "float32", device, outputs=0)
    candidates = [
        Candidate(
            p,
            partial(mm_at_precision, p, a, b),
            gemm_check(a, b, tolerances.XLA_PRECISION[p]),
            flops=2.0 * n**3,
        )
        for p in PRECISIONS
    ]
    before = torch_xla.backends.get_mat_mul_precision()
    # torch_xla logs a warning each time the precision is set again; this function means to.
    log = logging.getLogger("torch_xla.backends")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return check_then_time(
            case, candidates, facts=target.facts, baseline="highest", min_time_s=cfg.min_time_s
        )
    finally:
        torch_xla.backends.set_mat_mul_precision(before)
        log.setLevel(level)


def metrics_report() -> str:
    """torch_xla's short metrics report (compile and execution counters since start-up)."""
    import torch_xla.debug.metrics as met

    return met.short_metrics_report()
