"""The weight-only FP8 (W8A16) section: per case (`Fp8BenchConfig.weight_only_cases`: decode and
prefill rows of a Llama-style projection with per-output-channel scales, the first decode row count
of a MoE expert's projection with 128 x 128 block scales) one interleaved `compare` of the bf16
linear (baseline, the same weights rounded to bf16), a copy of the bf16 weight (the copy ceiling:
each record's fraction_of_peak), a read of the FP8 weight's bytes (the read ceiling,
`weight_only_peers`), ATen's int8 weight-only GEMM on an int8 copy of the same weights (the peer a
PyTorch user on a CPU runs: the same bytes), dequantise-then-`F.linear` (the plain comparator:
torchao's `Float8WeightOnlyConfig` path on a CPU), the variants: Inductor's compile of it, the C
conversion then `F.linear`, and the C kernel converting FP8 in registers inside the GEMM, with and
without software prefetch of its weight lines (`weight_only_c.PREFETCH_BYTES`) or with each
thread's weight rows streamed one after another, and the
`fp8.weight_only_linear` plug-ins (`fn(x, weight: Fp8Weight)`, checked as the variants). The
variant used here is chosen by measurement per case (`variants.choose`); the headlines are that
one against bf16 at the first decode row count of the projection, and the same records against
the read ceiling (case `weight_only_vs_read`, one record per variant: the weight's bytes per second
over the read's). Each timed call takes the next of
`weight_copies` equal copies of the weights (twice the device's last-level cache in all: a GPU's
L2, a CPU's largest cache), so that a weight comes from memory, as in decoding, not from a cache
it would fit in (a 4096 x 4096 FP8 weight is 16 MiB); `metrics.weight_copies` says how many."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernel_lib import records as rec
from kernel_lib.checks import against, exact
from kernel_lib.fp8.bench_blocks import NOT_ON_XLA, declare
from kernel_lib.fp8.checks import TOLERANCES
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.shapes import GemmShape
from kernel_lib.fp8.weight_only import (
    FORMAT,
    compiled_dequant_linear,
    dequant_linear,
    dequantize_weight,
    quantize_weight,
    weight_only_reference,
)  # fmt: skip
from kernel_lib.fp8.weight_only_peers import (
    aten_int8_linear,
    int8_reference,
    int8_weight,
    read,
    read_buffer,
)
from kernel_lib.measure import MIN_ROUNDS, Candidate, Case, check_then_time, with_baseline
from kernel_lib.platform import DeviceFacts, last_level_cache_bytes
from kernel_lib.plugins import registered
from kernel_lib.profiling import pending
from kernel_lib.variants import choose

TOPIC = "fp8"
C_PATHS = (  # weight_only_c's functions of these names
    "c_dequant_linear",
    "c_w8a16_linear",
    "c_w8a16_prefetch_linear",
    "c_w8a16_streamed_linear",
)
VARIANTS = ("compiled_dequant_linear", *C_PATHS)
MAX_WEIGHT_COPIES = 64
COPY_BASIS = "copy_ of the bf16 weight into a preallocated tensor, timed in alternation with it"
READ_BASIS = "an int32 amax over the FP8 weight's bytes, timed in alternation with it"
TORCHAO = "torchao Float8WeightOnlyConfig's path on a CPU: dequantise, then F.linear"


def weight_copies(fp8_bytes: float, device: str = "cpu") -> int:
    """How many copies of a layer's weights the timed calls cycle through, so that even the FP8
    ones (the smallest) add up to twice `device`'s last-level cache (a GPU's L2, a CPU's largest;
    256 MiB where it is unknown) and each call reads its weight from memory, as decoding does
    (every layer's weight once per token); at most MAX_WEIGHT_COPIES (tiny shapes stay
    cache-resident: their records say so)."""
    cache = last_level_cache_bytes(device) or 256 * 2**20
    return max(1, min(MAX_WEIGHT_COPIES, math.ceil(2 * cache / fp8_bytes)))


def rotating(call: Callable, items: list) -> Callable:
    """`call(item)` on the next of `items` at each call (the weight copies, in turn)."""
    turn = itertools.cycle(items)
    return lambda: call(next(turn))


def _c_paths(facts: DeviceFacts, x: torch.Tensor, qws: list, w_bf16: torch.Tensor) -> dict:
    """The C kernels' timed calls, or why they cannot run on this device."""
    if facts.backend != "cpu":
        reason = f"a C kernel for CPUs, not {facts.backend}"
        return dict.fromkeys(C_PATHS, reason)
    from kernel_lib.fp8 import weight_only_c  # built lazily

    workspace = torch.empty_like(w_bf16)  # preallocated, as a server keeps its workspace
    paths = {name: functools.partial(getattr(weight_only_c, name), x) for name in C_PATHS}
    paths["c_dequant_linear"] = functools.partial(paths["c_dequant_linear"], workspace=workspace)
    return {name: rotating(path, qws) for name, path in paths.items()}


def _case(
    config: Fp8BenchConfig, facts: DeviceFacts, shape: GemmShape, scaling: str
) -> tuple[Case, list]:
    gen = torch.Generator().manual_seed(config.seed)
    x = torch.randn(shape.m, shape.k, generator=gen).to(facts.device, torch.bfloat16)
    w = torch.randn(shape.n, shape.k, generator=gen) / shape.k**0.5
    qw = quantize_weight(w, scaling)
    qw = qw._replace(data=qw.data.to(facts.device), scale_inv=qw.scale_inv.to(facts.device))
    w_bf16 = dequantize_weight(qw, torch.bfloat16)  # the bf16 model: the same weights
    copy_dst = torch.empty_like(w_bf16)
    # equal values in other memory, cycled by every timed call: each check holds for each copy
    copies = weight_copies(qw.nbytes, facts.device)
    qws = [qw] + [
        qw._replace(data=qw.data.clone(), scale_inv=qw.scale_inv.clone())
        for _ in range(copies - 1)
    ]
    w_bf16s = [w_bf16] + [w_bf16.clone() for _ in range(copies - 1)]
    case = Case(
        TOPIC, "weight_only_linear", shape.as_dict() | {"scaling": scaling}, "bfloat16", "forward"
    )
    act = 2.0 * (shape.m * shape.k + shape.m * shape.n)  # bf16 x read, bf16 out written
    bf16_bytes, fp8_bytes = 2.0 * shape.k * shape.n, float(qw.nbytes)
    bf16 = {"weight_bytes": bf16_bytes, "weight_copies": copies}
    fp8 = bf16 | {"weight_bytes": fp8_bytes, "weight_bytes_vs_bf16": fp8_bytes / bf16_bytes}
    bf16_tol = TOLERANCES["bf16_out"]
    full = lambda: x.double() @ w_bf16.double().t()  # noqa: E731
    candidates = [
        Candidate(
            "bf16_linear",
            rotating(lambda w: F.linear(x, w), w_bf16s),
            check=against(full, reference="fp64 of the bf16 inputs", tolerance=bf16_tol),
            flops=shape.flops,
            bytes=act + bf16_bytes,
            metrics=bf16,
        ),
        Candidate(
            "copy",
            rotating(copy_dst.copy_, w_bf16s),
            check=exact(w_bf16, reference="the source"),
            bytes=2 * bf16_bytes,
            metrics=bf16,
        ),
    ]
    buffers = [read_buffer(q) for q in qws]
    q8, s8 = int8_weight(w.to(facts.device))
    q8s = [q8] + [q8.clone() for _ in range(copies - 1)]
    int8_bytes = float(q8.nbytes + s8.nbytes)
    candidates += [
        Candidate(
            "read",
            rotating(read, buffers),
            check=exact(read(buffers[0]), reference="the first copy's int32 maximum"),
            bytes=float(buffers[0].nbytes),
            dtype=f"float8_{FORMAT}",
            metrics=fp8,
        ),
        Candidate(
            "aten_int8pack_mm",
            rotating(lambda q: aten_int8_linear(x, q, s8), q8s),
            check=against(
                lambda: int8_reference(x, q8, s8),
                reference="fp64 of the int8 weight times its bf16 per-channel scales, and bf16 x",
                tolerance=bf16_tol,
            ),
            flops=shape.flops,
            bytes=act + int8_bytes,
            dtype="int8",
            metrics=bf16
            | {"weight_bytes": int8_bytes, "weight_bytes_vs_bf16": int8_bytes / bf16_bytes},
        ),
    ]
    label = f"fp64 of the {FORMAT} weight times its {scaling} scales, and bf16 x"
    check = against(lambda: weight_only_reference(x, qw), reference=label, tolerance=bf16_tol)
    paths = {
        "dequant_linear": rotating(lambda q: dequant_linear(x, q), qws),
        "compiled_dequant_linear": NOT_ON_XLA
        if facts.backend == "xla"
        else rotating(lambda q: compiled_dequant_linear(x, q), qws),
        **_c_paths(facts, x, qws, w_bf16),
    }
    fp8_dtype = f"float8_{FORMAT}"
    timed = {"check": check, "flops": shape.flops, "bytes": act + fp8_bytes, "dtype": fp8_dtype}
    for name, fn in paths.items():
        if isinstance(fn, str):
            candidates.append(
                rec.skipped(
                    TOPIC,
                    case.case,
                    name,
                    fn,
                    facts=facts,
                    dtype=fp8_dtype,
                    shape=case.shape,
                    mode=case.mode,
                )  # fmt: skip
            )
            continue
        named = fp8 | {"path": TORCHAO} if name == "dequant_linear" else fp8
        candidates.append(Candidate(name, fn, metrics=named, **timed))
    return case, candidates + [
        Candidate(
            p.name,
            rotating(functools.partial(p.fn, x), qws),
            metrics=fp8,
            plugin=p.source,
            **timed,
        )
        for p in registered("fp8.weight_only_linear")
    ]


def _against_read(records: list[rec.Record], implementation: str) -> rec.Record:
    """`implementation`'s record of one compare against its read ceiling: ratio the read's time
    over its own (interleaved rounds, with the interval), fraction_of_peak its weight's bytes
    per second over the read's (case `weight_only_vs_read`, bytes the weight's)."""
    vs_read = {r.implementation: r for r in with_baseline(records, "read")}
    r, ceiling = vs_read[implementation], vs_read["read"]
    r = dataclasses.replace(r, case="weight_only_vs_read", baseline="read", headline=None)
    pending.share(r, vs_read[implementation])  # its profile: the same timed call
    if r.status != "ok" or ceiling.status != "ok":
        return r
    weight = float(r.metrics["weight_bytes"])
    r = dataclasses.replace(r, bytes=weight, gbps=weight / r.median_ms / 1e6)
    return rec.with_peak(r, ceiling.gbps, basis=READ_BASIS, rate="gbps")


def weight_only_speed(config: Fp8BenchConfig, facts: DeviceFacts) -> list[rec.Record]:
    """Every W8A16 case's records (see the module docstring): bytes are the layer's own (x and
    output in bf16, the weight as stored: FP8 and fp32 scales, or bf16), fraction_of_peak their
    GB/s over the copy's; metrics.weight_bytes the weight's bytes (and _vs_bf16)."""
    records, headline, against_read = [], None, []
    first = config.weight_only_cases[0][0]
    for shape, scaling in config.weight_only_cases:
        case, candidates = _case(config, facts, shape, scaling)
        got = check_then_time(  # the fewest rounds that give an interval: the plain path takes ~0.2 s
            case,
            candidates,
            facts=facts,
            baseline="bf16_linear",
            min_time_s=config.min_time_s,
            rounds=MIN_ROUNDS,
        )
        choice, got = choose(
            "fp8_weight_only_linear",
            case,
            got,
            facts=facts,
            among=VARIANTS,
            comparator="dequant_linear",
        )
        if shape == first and scaling == "channel":
            headline = choice
            # every variant's: the ids hold whichever one measurement chooses here
            against_read = [_against_read(got, name) for name in VARIANTS]
        copy = next(r for r in got if r.implementation == "copy")
        records += [
            rec.with_peak(r, copy.gbps, basis=COPY_BASIS, rate="gbps")
            if r is not copy and copy.status == "ok"
            else r
            for r in got
        ]
    if headline is None:
        return records
    at = first.as_dict() | {"scaling": "channel"}
    return declare(records, headline, at, "fp8.weight_only_decode_vs_bf16") + declare(
        against_read, headline, at, "fp8.weight_only_decode_vs_read"
    )
