"""Roofline measurements: GEMM FLOP rate over a size sweep, memory bandwidth by copy and triad."""

from __future__ import annotations

import pandas as pd
import torch
from tqdm import tqdm

from kernel_lib.backends.target import TOPIC, Target, is_lazy
from kernel_lib.platform import DeviceFacts, datasheet_for
from kernel_lib.records import Record, measured, skipped, with_datasheet, with_peak
from kernel_lib.timing import time_fn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Max relative error of an n=256 GEMM vs float64: each dtype's rounding scale, with headroom.
TOLERANCES = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 5e-3}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a parameter-file name; ValueError listing the valid names."""
    if name not in DTYPES:
        raise ValueError(f"dtype={name!r} must be one of {sorted(DTYPES)}")
    return DTYPES[name]


def gemm_error(n: int, dtype: str, *, device: str, seed: int = 0) -> float:
    """Max |mm - fp64 mm| / max |fp64 mm| for one n x n x n product in `dtype`."""
    gen = torch.Generator().manual_seed(seed)
    a64 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    b64 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    ref = a64 @ b64
    dt = torch_dtype(dtype)
    out = (a64.to(device, dt) @ b64.to(device, dt)).cpu().double()
    return ((out - ref).abs().max() / ref.abs().max()).item()


def check_gemm(
    target: Target, dtypes: list[str], *, n: int = 256, tolerances: dict | None = None
) -> pd.DataFrame:
    """Each dtype's GEMM error against float64; AssertionError if any is above its tolerance."""
    tolerances = {**TOLERANCES, **(tolerances or {})}
    for name in dtypes:
        torch_dtype(name)
    if not target.present:
        return pd.DataFrame({"check": [f"skipped: {target.reason}"]}, index=["gemm"])
    errors = {d: gemm_error(n, d, device=target.facts.device) for d in dtypes}
    bad = {d: e for d, e in errors.items() if e > tolerances[d]}
    if bad:
        raise AssertionError(f"GEMM error above tolerance: {bad} (tolerances {tolerances})")
    return pd.DataFrame(
        {"tolerance": [tolerances[d] for d in dtypes], "check": "PASS"}, index=dtypes
    )


def gemm_sweep(
    target: Target,
    *,
    sizes: list[int],
    dtypes: list[str],
    min_time_s: float = 0.2,
    progress: bool = False,
) -> list[Record]:
    """Square `torch.mm(a, b, out=c)` per (dtype, n): FLOPs 2n^3, bytes 3n^2 elements (each
    operand moved once). A size that does not fit records `skipped: out of memory`; the sweep
    goes on."""
    for n in sizes:
        if n <= 0:
            raise ValueError(f"gemm_sizes: {n} must be > 0")
    for name in dtypes:
        torch_dtype(name)
    if not target.present:
        return [target.absent("gemm", "torch_mm")]
    facts, records = target.facts, []
    for name, n in tqdm(
        [(d, n) for d in dtypes for n in sizes], disable=not progress, desc="gemm"
    ):
        dt, shape = torch_dtype(name), {"M": n, "N": n, "K": n}
        try:
            a = torch.randn(n, n, device=facts.device, dtype=dt)
            b = torch.randn(n, n, device=facts.device, dtype=dt)
            c = torch.empty(n, n, device=facts.device, dtype=dt)
            timing = time_fn(
                lambda: torch.mm(a, b, out=c), device=facts.device, min_time_s=min_time_s
            )
        except torch.OutOfMemoryError:
            records.append(
                skipped(
                    TOPIC,
                    "gemm",
                    "torch_mm",
                    "out of memory",
                    facts=facts,
                    dtype=name,
                    shape=shape,
                )
            )
            continue
        finally:
            a = b = c = None
        records.append(
            measured(
                TOPIC,
                "gemm",
                "torch_mm",
                timing,
                facts=facts,
                dtype=name,
                shape=shape,
                flops=2.0 * n**3,
                bytes=3.0 * n * n * dt.itemsize,
            )
        )
    return records


def bandwidth(
    target: Target,
    *,
    mib: list[int],
    min_time_s: float = 0.2,
    progress: bool = False,
) -> list[Record]:
    """fp32 copy (dst.copy_(src): 2 N elements moved) and triad (a = b + 2c: 3 N), into
    preallocated outputs so allocation and page faults are not timed."""
    for size in mib:
        if size <= 0:
            raise ValueError(f"bandwidth_mib: {size} must be > 0")
    if not target.present:
        return [target.absent("copy", "torch_copy"), target.absent("triad", "torch_add")]
    facts, records = target.facts, []
    for size in tqdm(mib, disable=not progress, desc="bandwidth"):
        n, shape = size * 2**20 // 4, {"MiB": size}
        try:
            x = torch.randn(n, device=facts.device)
            y = torch.randn(n, device=facts.device)
            z = torch.empty(n, device=facts.device)
            if is_lazy(facts.device):
                # XLA turns copy_ into an alias and donates out= buffers: time fresh outputs.
                copy_fn, triad_fn = (
                    lambda: x.clone(),
                    lambda: torch.add(x, y, alpha=2.0),
                )
            else:
                copy_fn, triad_fn = (
                    (lambda: z.copy_(x)),
                    (lambda: torch.add(x, y, alpha=2.0, out=z)),
                )
            copy = time_fn(copy_fn, device=facts.device, min_time_s=min_time_s)
            triad = time_fn(triad_fn, device=facts.device, min_time_s=min_time_s)
        except torch.OutOfMemoryError:
            for case, impl in (("copy", "torch_copy"), ("triad", "torch_add")):
                records.append(
                    skipped(
                        TOPIC,
                        case,
                        impl,
                        "out of memory",
                        facts=facts,
                        dtype="float32",
                        shape=shape,
                    )
                )
            continue
        finally:
            x = y = z = None
        copy_impl = "torch_clone" if is_lazy(facts.device) else "torch_copy"
        records.append(
            measured(
                TOPIC,
                "copy",
                copy_impl,
                copy,
                facts=facts,
                dtype="float32",
                shape=shape,
                bytes=8.0 * n,
            )
        )
        records.append(
            measured(
                TOPIC,
                "triad",
                "torch_add",
                triad,
                facts=facts,
                dtype="float32",
                shape=shape,
                bytes=12.0 * n,
            )
        )
    return records


def with_ceilings(records: list[Record], facts: DeviceFacts) -> list[Record]:
    """Each GEMM/bandwidth record's fraction of the best rate measured for its case and dtype in
    this run, and of the datasheet peak where one is known (labelled with its source)."""

    def on_roof(r: Record) -> bool:
        return r.case in ("gemm", "copy", "triad") and r.status == "ok"

    best: dict[tuple, float] = {}
    for r in filter(on_roof, records):
        rate = r.tflops if r.case == "gemm" else r.gbps
        best[(r.case, r.dtype)] = max(best.get((r.case, r.dtype), 0.0), rate or 0.0)
    sheet = datasheet_for(facts.name)
    out = []
    for r in records:
        if not on_roof(r):
            out.append(r)
            continue
        rate = "tflops" if r.case == "gemm" else "gbps"
        r = with_peak(
            r,
            best[(r.case, r.dtype)],
            basis=f"best {r.case} {r.dtype} measured in this run",
            rate=rate,
        )
        if sheet:
            peaks = {
                "bfloat16": sheet.bf16_tflops,
                "float16": sheet.bf16_tflops,
                "float32": sheet.fp32_tflops,
            }
            peak = sheet.memory_gbps if rate == "gbps" else peaks.get(r.dtype)
            r = with_datasheet(r, peak, basis=f"datasheet: {sheet.source}", rate=rate)
        out.append(r)
    return out
