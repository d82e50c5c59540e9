"""Costs users trip over: launch and sync latency, host<->device transfers (pageable vs pinned),
eager vs torch.compile vs CUDA graphs for a small MLP, and the first call's compile time."""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch
from tqdm import tqdm

from kernel_lib.backends.probes import compile_backend
from kernel_lib.backends.roofline import torch_dtype
from kernel_lib.backends.target import TOPIC, Target, is_lazy
from kernel_lib.records import Record, measured, skipped, with_baseline
from kernel_lib.timing import time_fn

LAUNCHES = 100  # back-to-back one-element ops per timed call: launch cost without a sync each


def launch_latency(target: Target, *, min_time_s: float = 0.2) -> list[Record]:
    """Per-op launch cost (LAUNCHES one-element adds, one sync; us_per_launch in metrics) and the
    round trip of one op plus a device synchronize."""
    if not target.present:
        return [
            target.absent("launch_latency", "add_one_element"),
            target.absent("sync_latency", "add_one_element"),
        ]
    facts, device = target.facts, target.facts.device
    x = torch.zeros(1, device=device)
    sync = time_fn(lambda: x.add_(1), device=device, min_time_s=min_time_s)
    records = [
        measured(
            TOPIC,
            "sync_latency",
            "add_one_element",
            sync,
            facts=facts,
            dtype="float32",
            shape={"launches": 1},
            metrics={"us_per_launch": sync.median_ms * 1e3},
        )
    ]
    if is_lazy(device):
        reason = (
            "ops are traced lazily and run as one compiled graph at the sync: no per-op launch"
        )
        return [
            skipped(
                TOPIC, "launch_latency", "add_one_element", reason, facts=facts, dtype="float32"
            )
        ] + records
    burst = time_fn(
        lambda: [x.add_(1) for _ in range(LAUNCHES)], device=device, min_time_s=min_time_s
    )
    return [
        measured(
            TOPIC,
            "launch_latency",
            "add_one_element",
            burst,
            facts=facts,
            dtype="float32",
            shape={"launches": LAUNCHES},
            metrics={"us_per_launch": burst.median_ms * 1e3 / LAUNCHES},
        )
    ] + records


def _pinned(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, pin_memory=True)


def _pin_error() -> str | None:
    """Why pinned host memory is unavailable here (the runtime's message), or None if it is."""
    try:
        _pinned(1)
    except RuntimeError as err:
        return f"pinned host memory unavailable: {str(err).strip().splitlines()[0][:120]}"
    return None


def transfer(
    target: Target, *, mib: list[int], min_time_s: float = 0.2, progress: bool = False
) -> list[Record]:
    """Host->device and device->host copies into preallocated buffers, from pageable and pinned
    host memory. Bytes = the buffer size (each byte crosses the link once)."""
    for size in mib:
        if size <= 0:
            raise ValueError(f"transfer_mib: {size} must be > 0")
    cases = [(d, h) for d in ("host_to_device", "device_to_host") for h in ("pageable", "pinned")]
    if not target.present:
        return [target.absent(d, h) for d, h in cases]
    facts, device = target.facts, target.facts.device
    if torch.device(device).type == "cpu":
        reason = "the CPU's device memory is host memory: nothing to transfer"
        return [skipped(TOPIC, d, h, reason, facts=facts) for d, h in cases]
    pin_error, records = _pin_error(), []
    for size in tqdm(mib, disable=not progress, desc="transfer"):
        n, shape = size * 2**20, {"MiB": size}
        for host_kind in ("pageable", "pinned"):
            if host_kind == "pinned" and pin_error:
                records += [
                    skipped(
                        TOPIC, d, host_kind, pin_error, facts=facts, dtype="uint8", shape=shape
                    )
                    for d in ("host_to_device", "device_to_host")
                ]
                continue
            try:
                host = _pinned(n) if host_kind == "pinned" else torch.empty(n, dtype=torch.uint8)
                dev = torch.empty(n, dtype=torch.uint8, device=device)
                timings = {
                    "host_to_device": time_fn(
                        lambda: dev.copy_(host, non_blocking=True),
                        device=device,
                        min_time_s=min_time_s,
                    ),
                    "device_to_host": time_fn(
                        lambda: host.copy_(dev, non_blocking=True),
                        device=device,
                        min_time_s=min_time_s,
                    ),
                }
            except torch.OutOfMemoryError:
                records += [
                    skipped(
                        TOPIC,
                        d,
                        host_kind,
                        "out of memory",
                        facts=facts,
                        dtype="uint8",
                        shape=shape,
                    )
                    for d in ("host_to_device", "device_to_host")
                ]
                continue
            finally:
                host = dev = None
            records += [
                measured(
                    TOPIC, d, host_kind, t, facts=facts, dtype="uint8", shape=shape, bytes=float(n)
                )
                for d, t in timings.items()
            ]
    return records


def small_mlp(dim: int, *, device: str, dtype: str, seed: int = 0) -> torch.nn.Module:
    """Linear(dim, 4 dim) -> GELU -> Linear(4 dim, dim), seeded, in eval mode."""
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)
    )
    return mlp.to(device, torch_dtype(dtype)).eval()


def _cuda_graph(mlp: torch.nn.Module, x: torch.Tensor):
    """Replay function and static output of one forward captured on `x` (after a warm-up)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            mlp(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mlp(x)
    return graph.replay, out


def check_mlp_modes(
    target: Target, *, batch: int, dim: int, dtype: str, compile: bool = True
) -> pd.DataFrame:
    """Compiled (and CUDA graph) MLP outputs against eager on the same seeded input; AssertionError
    if any differs by more than the dtype's rounding."""
    if not target.present:
        return pd.DataFrame({"check": [f"skipped: {target.reason}"]}, index=["mlp"])
    device = target.facts.device
    mlp, x = (
        small_mlp(dim, device=device, dtype=dtype),
        mlp_input(batch, dim, device=device, dtype=dtype),
    )
    tol = 1e-4 if dtype == "float32" else 3e-2
    rows = {}
    with torch.no_grad():
        ref = mlp(x).double().cpu()
        if compile:
            rows[f"torch_compile_{compile_backend(device)}"] = torch.compile(
                mlp, backend=compile_backend(device)
            )(x)
        if torch.device(device).type == "cuda":
            replay, out = _cuda_graph(mlp, x)
            replay()
            rows["cuda_graph"] = out
    errors = {
        k: ((v.double().cpu() - ref).abs().max() / ref.abs().max()).item() for k, v in rows.items()
    }
    bad = {k: e for k, e in errors.items() if e > tol}
    if bad:
        raise AssertionError(f"MLP output differs from eager: {bad} (tolerance {tol})")
    return pd.DataFrame(
        {"tolerance": tol, "check": "PASS"}, index=list(errors) or ["(eager only)"]
    )


def mlp_input(batch: int, dim: int, *, device: str, dtype: str) -> torch.Tensor:
    """A seeded (batch, dim) input, generated on the host so every device sees the same values."""
    gen = torch.Generator().manual_seed(1)
    return torch.randn(batch, dim, generator=gen).to(device, torch_dtype(dtype))


def mlp_modes(
    target: Target,
    *,
    batch: int,
    dim: int,
    dtype: str,
    compile: bool = True,
    min_time_s: float = 0.2,
) -> list[Record]:
    """The same MLP forward eager, torch.compile'd and replayed from a CUDA graph (ratio vs eager),
    plus the compiled function's first call (trace + cold compile + run) as case 'first_call'."""
    if batch <= 0 or dim <= 0:
        raise ValueError(f"mlp_batch={batch} and mlp_dim={dim} must be > 0")
    torch_dtype(dtype)
    if not target.present:
        return [target.absent("mlp", "eager")]
    facts, device = target.facts, target.facts.device
    mlp, x = (
        small_mlp(dim, device=device, dtype=dtype),
        mlp_input(batch, dim, device=device, dtype=dtype),
    )
    shape = {"batch": batch, "dim": dim}
    flops = 2.0 * batch * dim * 4 * dim * 2

    def record(case: str, impl: str, timing) -> Record:
        work = flops if case == "mlp" else None  # a first call's time is mostly compiling
        return measured(
            TOPIC, case, impl, timing, facts=facts, dtype=dtype, shape=shape, flops=work
        )

    with torch.no_grad():
        eager = record(
            "mlp",
            "eager",
            time_fn(lambda: mlp(x), device=device, min_time_s=min_time_s),
        )
        records = [eager]
        name = f"torch_compile_{compile_backend(device)}"
        if compile:
            # A cold first call: no dynamo cache from an earlier cell, no FX graph cache hit.
            torch._dynamo.reset()
            compiled = torch.compile(mlp, backend=compile_backend(device))
            with torch._inductor.config.patch(fx_graph_cache=False):
                first = time_fn(lambda: compiled(x), device=device, warmup=0, reps=1)
            note = (
                "dynamo trace + Inductor codegen without the FX graph cache; compiled kernel "
                "binaries may still load from TORCHINDUCTOR_CACHE_DIR"
            )
            records.append(
                dataclasses.replace(record("first_call", name, first), metrics={"note": note})
            )
            records.append(
                record(
                    "mlp",
                    name,
                    time_fn(
                        lambda: compiled(x), device=device, min_time_s=min_time_s
                    ),
                )
            )
        else:
            records += [
                skipped(
                    TOPIC, case, name, "compile_mlp=False", facts=facts, dtype=dtype, shape=shape
                )
                for case in ("first_call", "mlp")
            ]
        if torch.device(device).type == "cuda":
            replay, _ = _cuda_graph(mlp, x)
            records.append(
                record("mlp", "cuda_graph", time_fn(replay, device=device, min_time_s=min_time_s))
            )
        else:
            records.append(
                skipped(
                    TOPIC,
                    "mlp",
                    "cuda_graph",
                    "CUDA graphs need a CUDA or ROCm device",
                    facts=facts,
                    dtype=dtype,
                    shape=shape,
                )
            )
    return [
        with_baseline(r, eager) if r.case == "mlp" and r.status == "ok" and r is not eager else r
        for r in records
    ]
