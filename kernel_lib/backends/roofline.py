"""Roofline measurements: GEMM FLOP rate over a size sweep (each size's dtypes interleaved, fp32
the baseline; each `backend.matmul` plug-in, kernel_lib.plugins, beside them, over torch_mm of
its dtype), memory bandwidth by copy and triad. Every timed output is checked first."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

import torch

from kernel_lib import checks
from kernel_lib.backends import memory, tolerances
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.target import TOPIC, Target, is_lazy
from kernel_lib.checks import Check, Unsupported
from kernel_lib.config import DTYPES
from kernel_lib.measure import Candidate, Case, check_then_time, with_baseline
from kernel_lib.platform import DeviceFacts, datasheet_for
from kernel_lib.plugins import registered
from kernel_lib.records import Record, with_datasheet, with_peak

# A GEMM is checked on a block of its output: every row and column up to these counts, beyond
# them evenly spaced ones (first and last included). Each entry is a full length-K dot product,
# so the block sees the whole reduction while the fp64 reference stays cheap at any n.
CHECK_ROWS, CHECK_COLS = 64, 256
CHECK_ELEMENTS = 2**22  # copy/triad/transfer checks: all elements up to this, else evenly spaced
MM = "torch_mm"
SLOT = "backend.matmul"  # the plug-ins' slot (kernel_lib.plugins.SLOTS)


def spread(n: int, k: int) -> torch.Tensor:
    """min(n, k) evenly spaced indices in [0, n), first and last included."""
    return torch.linspace(0, n - 1, min(n, k), dtype=torch.float64).round().long()


def mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The timed GEMM: out = a @ b into a preallocated output."""
    return torch.mm(a, b, out=out)


def copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """The timed copy: 2 N elements moved."""
    return dst.copy_(src)


def triad(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The timed triad x + 2 y: 3 N elements moved (into `out`, or a fresh tensor where None)."""
    if out is None:
        return torch.add(x, y, alpha=2.0)
    return torch.add(x, y, alpha=2.0, out=out)


def gemm_check(a: torch.Tensor, b: torch.Tensor, tolerance) -> Callable[[torch.Tensor], Check]:
    """check(out) for out = a @ b: a CHECK_ROWS x CHECK_COLS block of out (all of it when smaller)
    against float64 of the same operands, computed on the host."""
    rows, cols = spread(a.shape[0], CHECK_ROWS), spread(b.shape[1], CHECK_COLS)

    def reference() -> torch.Tensor:
        left = a.index_select(0, rows.to(a.device)).cpu().double()
        return left @ b.index_select(1, cols.to(b.device)).cpu().double()

    label = f"float64 of the same operands, {len(rows)} x {len(cols)} output block"
    inner = checks.against(reference, reference=label, tolerance=tolerance)
    return lambda out: inner(
        out.index_select(0, rows.to(out.device)).index_select(1, cols.to(out.device))
    )


def sampled_exact(ref: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], Check]:
    """check(out): out == ref(indices) bit for bit on up to CHECK_ELEMENTS evenly spaced elements
    of the flat output (all of them for small buffers); ref(idx) gives those elements."""

    def check(out: torch.Tensor) -> Check:
        idx = spread(out.numel(), CHECK_ELEMENTS)
        got = out.reshape(-1).index_select(0, idx.to(out.device))
        label = f"exact, {len(idx)} of {out.numel()} elements"
        return checks.check_output(got, ref(idx), reference=label, tolerance=tolerances.EXACT)

    return check


def gemm_operands(n: int, dtype: str, device: str, *, seed: int = 0, outputs: int = 1):
    """Seeded n x n operands a, b (and `outputs` preallocated outputs) on `device`, generated on
    the host so every device sees the same values; Unsupported when they do not fit."""
    dt = DTYPES[dtype]

    def make():
        gen = torch.Generator().manual_seed(seed)
        a, b = (torch.randn(n, n, generator=gen).to(device, dt) for _ in range(2))
        return (a, b, *(torch.empty(n, n, device=device, dtype=dt) for _ in range(outputs)))

    return memory.allocate(make, nbytes=(2 + outputs) * n * n * dt.itemsize, device=device)


def _gemm_candidates(target: Target, n: int, dtype: str) -> tuple[Candidate | Record, list]:
    """(torch_mm of one size and dtype, the plug-ins called eager as fn(a, b) on the same
    operands with the same check); skipped alike where the operands do not fit."""
    shape, plugins = {"M": n, "N": n, "K": n}, registered(SLOT)
    try:
        a, b, c = gemm_operands(n, dtype, target.facts.device)
    except Unsupported as why:
        skip = partial(target.skip, "gemm", reason=str(why), dtype=dtype, shape=shape)
        return skip(MM), [dataclasses.replace(skip(p.name), plugin=p.source) for p in plugins]
    check = gemm_check(a, b, tolerances.GEMM[dtype])  # one cached reference for all
    work = {"flops": 2.0 * n**3, "bytes": 3.0 * n * n * DTYPES[dtype].itemsize, "dtype": dtype}
    theirs = [
        Candidate(p.name, partial(p.fn, a, b), check, plugin=p.source, **work) for p in plugins
    ]
    return Candidate(MM, lambda: mm(a, b, c), check, **work), theirs


def _with_ratios(records: list[Record], baseline: str | None) -> list[Record]:
    """The records of one size: ours with their ratio over `baseline` (None: none), each
    plug-in's over torch_mm of its own dtype (both from the same interleaved rounds)."""
    ours = [r for r in records if r.plugin is None]
    ours = with_baseline(ours, baseline) if baseline else ours
    mm_of = {r.dtype: r for r in ours}
    return ours + [with_baseline([mm_of[r.dtype], r], MM)[1] for r in records if r.plugin]


def gemm_sweep(target: Target, cfg: BackendBenchConfig, *, progress: bool = False) -> list[Record]:
    """Square `torch.mm(a, b, out=c)` per n, all swept dtypes interleaved at each n: FLOPs 2n^3,
    bytes 3n^2 elements (each operand moved once). With float32 swept, the other dtypes get
    ratio_vs_baseline against it; the plug-ins follow in the same compare. A size that does not
    fit is skipped; the sweep goes on."""
    if not target.present:
        return [target.absent("gemm", MM)]
    dtypes = sorted(cfg.gemm_dtypes, key=lambda d: d != "float32")  # the baseline first
    baseline = MM if dtypes[0] == "float32" else None
    records = []
    for n in cfg.gemm_sizes:
        case = Case(TOPIC, "gemm", {"M": n, "N": n, "K": n})
        ours, theirs = zip(*(_gemm_candidates(target, n, d) for d in dtypes))
        timed = check_then_time(
            case,
            [*ours, *(p for plugins in theirs for p in plugins)],
            facts=target.facts,
            min_time_s=cfg.min_time_s,
            progress=f"gemm n={n}" if progress else None,
        )
        records += _with_ratios(timed, baseline)
        del ours, theirs  # free this size's operands before the next size's are sized
    return records


def _vectors(n: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    x, y = (torch.randn(n, generator=gen).to(device) for _ in range(2))
    return x, y, torch.empty(n, device=device)


def bandwidth(target: Target, cfg: BackendBenchConfig, *, progress: bool = False) -> list[Record]:
    """fp32 copy (2 N elements moved) and triad x + 2 y (3 N), into preallocated outputs so
    allocation and page faults are not timed; both checked bit-exact (copies and one IEEE add)."""
    if not target.present:
        return [target.absent("copy", "torch_copy"), target.absent("triad", "torch_add")]
    device, records = target.facts.device, []
    # XLA turns copy_ into an alias and donates out= buffers: time fresh outputs there.
    lazy = is_lazy(device)
    copy_impl = "torch_clone" if lazy else "torch_copy"
    for size in cfg.bandwidth_mib:
        n, shape = size * 2**20 // 4, {"MiB": size}
        copy_case = Case(TOPIC, "copy", shape, dtype="float32")
        triad_case = Case(TOPIC, "triad", shape, dtype="float32")
        try:
            x, y, z = memory.allocate(partial(_vectors, n, device), nbytes=12.0 * n, device=device)
        except Unsupported as why:
            records += [
                target.skip(c.case, impl, str(why), dtype="float32", shape=shape)
                for c, impl in ((copy_case, copy_impl), (triad_case, "torch_add"))
            ]
            continue

        def source(idx, x=x):
            return x.index_select(0, idx.to(x.device)).cpu()

        def twice_plus(idx, x=x, y=y):
            return source(idx, x) + 2 * y.index_select(0, idx.to(y.device)).cpu()

        copy_fn = partial(torch.clone, x) if lazy else partial(copy, z, x)
        triad_fn = partial(triad, x, y, None if lazy else z)
        for case, candidate in (
            (copy_case, Candidate(copy_impl, copy_fn, sampled_exact(source), bytes=8.0 * n)),
            (
                triad_case,
                Candidate("torch_add", triad_fn, sampled_exact(twice_plus), bytes=12.0 * n),
            ),
        ):
            records += check_then_time(
                case,
                [candidate],
                facts=target.facts,
                min_time_s=cfg.min_time_s,
                progress=f"{case.case} {size} MiB" if progress else None,
            )
        del x, y, z, copy_fn, triad_fn, candidate
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
