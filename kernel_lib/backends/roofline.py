"""Roofline measurements: GEMM FLOP rate over a size sweep, memory bandwidth by copy and triad."""

from __future__ import annotations

import torch
from tqdm import tqdm

from kernel_lib.platform import DeviceFacts, datasheet_for
from kernel_lib.records import Record, measured, skipped, with_datasheet, with_peak
from kernel_lib.timing import time_fn

TOPIC = "device"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a parameter-file name; ValueError listing the valid names."""
    if name not in DTYPES:
        raise ValueError(f"dtype={name!r} must be one of {sorted(DTYPES)}")
    return DTYPES[name]


def gemm_error(n: int, dtype: str, *, device: str, seed: int = 0) -> float:
    """Max |mm - fp64 mm| / max |fp64 mm| for one n x n x n product in `dtype`."""
    gen = torch.Generator().manual_seed(seed)
    a64, b64 = torch.randn(n, n, generator=gen, dtype=torch.float64), torch.randn(n, n, generator=gen, dtype=torch.float64)
    ref = a64 @ b64
    out = (a64.to(device, torch_dtype(dtype)) @ b64.to(device, torch_dtype(dtype))).cpu().double()
    return ((out - ref).abs().max() / ref.abs().max()).item()


def gemm_sweep(
    facts: DeviceFacts,
    *,
    sizes: list[int],
    dtypes: list[str],
    min_time_s: float = 0.2,
    progress: bool = False,
) -> list[Record]:
    """Square `torch.mm(a, b, out=c)` per (dtype, n): FLOPs 2n^3, bytes 3 n^2 elements (ideal reuse)."""
    for n in sizes:
        if n <= 0:
            raise ValueError(f"gemm size {n} must be > 0")
    records = []
    for dtype in tqdm([(d, n) for d in dtypes for n in sizes], disable=not progress, desc="gemm"):
        name, n = dtype
        dt = torch_dtype(name)
        shape = {"M": n, "N": n, "K": n}
        try:
            a = torch.randn(n, n, device=facts.device, dtype=dt)
            b = torch.randn(n, n, device=facts.device, dtype=dt)
            c = torch.empty(n, n, device=facts.device, dtype=dt)
            timing = time_fn(lambda: torch.mm(a, b, out=c), device=facts.device, min_time_s=min_time_s)
        except torch.OutOfMemoryError:
            records.append(skipped(TOPIC, "gemm", "torch_mm", "out of memory", facts=facts, dtype=name, shape=shape))
            continue
        finally:
            a = b = c = None
        records.append(
            measured(TOPIC, "gemm", "torch_mm", timing, facts=facts, dtype=name, shape=shape,
                     flops=2.0 * n**3, bytes=3.0 * n * n * dt.itemsize)
        )
    return records


def bandwidth(
    facts: DeviceFacts,
    *,
    mib: list[int],
    min_time_s: float = 0.2,
    progress: bool = False,
) -> list[Record]:
    """fp32 copy (dst.copy_(src): 2 N elements moved) and triad (a = b + s*c: 3 N), into preallocated outputs."""
    records = []
    for size in tqdm(mib, disable=not progress, desc="bandwidth"):
        if size <= 0:
            raise ValueError(f"bandwidth size {size} MiB must be > 0")
        n = size * 2**20 // 4
        shape = {"MiB": size}
        try:
            x = torch.randn(n, device=facts.device)
            y = torch.randn(n, device=facts.device)
            z = torch.empty(n, device=facts.device)
            copy = time_fn(lambda: z.copy_(x), device=facts.device, min_time_s=min_time_s)
            triad = time_fn(lambda: torch.add(x, y, alpha=2.0, out=z), device=facts.device, min_time_s=min_time_s)
        except torch.OutOfMemoryError:
            for case in ("copy", "triad"):
                records.append(skipped(TOPIC, case, "torch", "out of memory", facts=facts, dtype="float32", shape=shape))
            continue
        finally:
            x = y = z = None
        records.append(measured(TOPIC, "copy", "torch_copy", copy, facts=facts, dtype="float32", shape=shape, bytes=8.0 * n))
        records.append(measured(TOPIC, "triad", "torch_add", triad, facts=facts, dtype="float32", shape=shape, bytes=12.0 * n))
    return records


def with_ceilings(records: list[Record], facts: DeviceFacts) -> list[Record]:
    """Each record's fraction of the best rate measured for its case and dtype in this run, and of
    the datasheet peak where one is known (labelled with its source)."""
    best: dict[tuple, float] = {}
    for r in records:
        rate = r.tflops if r.case == "gemm" else r.gbps
        if r.status == "ok" and rate:
            best[(r.case, r.dtype)] = max(best.get((r.case, r.dtype), 0.0), rate)
    sheet = datasheet_for(facts.name)
    out = []
    for r in records:
        if r.status != "ok":
            out.append(r)
            continue
        rate = "tflops" if r.case == "gemm" else "gbps"
        r = with_peak(r, best[(r.case, r.dtype)], basis=f"best {r.case} {r.dtype} measured in this run", rate=rate)
        if sheet:
            peak = sheet.memory_gbps if rate == "gbps" else {"bfloat16": sheet.bf16_tflops, "float16": sheet.bf16_tflops, "float32": sheet.fp32_tflops}.get(r.dtype)
            r = with_datasheet(r, peak, basis=f"datasheet: {sheet.source}", rate=rate)
        out.append(r)
    return out
