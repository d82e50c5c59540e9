"""Costs users trip over: launch and sync latency, host<->device transfers (pageable vs pinned),
eager vs torch.compile vs CUDA graphs for a small MLP, and the compiled MLP's cold first call."""

from __future__ import annotations

import copy
import dataclasses

import torch

from kernel_lib import checks
from kernel_lib.backends import memory, tolerances
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.probes import compile_backend
from kernel_lib.backends.roofline import sampled_exact
from kernel_lib.backends.target import TOPIC, Target, is_lazy
from kernel_lib.checks import Unsupported
from kernel_lib.config import DTYPES
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.records import Record
from kernel_lib.timing import synchronize

LAUNCHES = 100  # dependent one-element adds per timed call: launch cost without a sync each
DIRECTIONS = ("host_to_device", "device_to_host")
FIRST_CALL_ROUNDS = 3  # cold compiles are seconds each: 1 checked + 1 sizing + these timed


def add_chain(x: torch.Tensor, launches: int) -> torch.Tensor:
    """x + 1 + 1 ... (`launches` one-element adds, each waiting on the one before)."""
    for _ in range(launches):
        x = x + 1
    return x


def round_trip(x: torch.Tensor, launches: int) -> torch.Tensor:
    """add_chain, then wait for the device: what a host that needs the result pays (a GPU's
    event timing would otherwise see only the adds)."""
    out = add_chain(x, launches)
    synchronize(x.device)
    return out


def _per_launch(records: list[Record], launches: int) -> list[Record]:
    return [
        dataclasses.replace(
            r, metrics={**r.metrics, "us_per_launch": r.median_ms * 1e3 / launches}
        )
        if r.status == "ok"
        else r
        for r in records
    ]


def launch_latency(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """Per-op launch cost (LAUNCHES dependent one-element adds, one sync; us_per_launch in
    metrics) and the round trip of one add plus a device synchronize; both results checked."""
    if not target.present:
        return [
            target.absent("launch_latency", "add_one_element"),
            target.absent("sync_latency", "add_one_element"),
        ]
    device = target.facts.device
    x = torch.zeros(1, device=device)
    records = []
    for case, launches, run in (
        ("launch_latency", LAUNCHES, add_chain),
        ("sync_latency", 1, round_trip),
    ):
        shape = {"launches": launches}
        if case == "launch_latency" and is_lazy(device):
            reason = (
                "ops are traced lazily and run as one compiled graph at the sync: no per-op launch"
            )
            records.append(
                target.skip(case, "add_one_element", reason, dtype="float32", shape=shape)
            )
            continue
        check = checks.exact(
            torch.full((1,), float(launches)), reference=f"{launches} added to zero"
        )
        candidate = Candidate("add_one_element", lambda n=launches, run=run: run(x, n), check)
        records += _per_launch(
            check_then_time(
                Case(TOPIC, case, shape, dtype="float32"),
                [candidate],
                facts=target.facts,
                min_time_s=cfg.min_time_s,
            ),
            launches,
        )
    return records


def _pinned(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, pin_memory=True)


def _pin_error() -> str | None:
    """Why pinned host memory is unavailable here (the runtime's message), or None if it is."""
    try:
        _pinned(1)
    except RuntimeError as err:
        return f"pinned host memory unavailable: {str(err).strip().splitlines()[0][:120]}"
    return None


def _random_bytes(n: int, *, seed: int) -> torch.Tensor:
    return torch.randint(
        0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def _host_buffers(n: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(source filled with seeded bytes, destination) in pageable or pinned host memory."""
    if kind == "pageable":
        return _random_bytes(n, seed=3), torch.empty(n, dtype=torch.uint8)
    src, dst = _pinned(n), _pinned(n)
    return src.copy_(_random_bytes(n, seed=3)), dst


def _transfer_candidates(target: Target, n: int, kind: str, dev_src, dev_dst) -> dict:
    """{direction: Candidate} for one host memory kind, each copy checked bit-exact."""
    device = target.facts.device
    host_src, host_dst = memory.allocate(
        lambda: _host_buffers(n, kind), nbytes=2.0 * n, device="cpu"
    )
    to_host = sampled_exact(lambda idx: dev_src.index_select(0, idx.to(device)).cpu())

    def d2h_check(out):  # a non-blocking copy to host is complete only after the sync
        synchronize(device)
        return to_host(out)

    return {
        "host_to_device": Candidate(
            kind,
            lambda: dev_dst.copy_(host_src, non_blocking=True),
            sampled_exact(lambda idx: host_src[idx]),
            bytes=float(n),
        ),
        "device_to_host": Candidate(
            kind, lambda: host_dst.copy_(dev_src, non_blocking=True), d2h_check, bytes=float(n)
        ),
    }


def transfer(target: Target, cfg: BackendBenchConfig, *, progress: bool = False) -> list[Record]:
    """Host->device and device->host copies into preallocated buffers, pageable (the baseline)
    and pinned interleaved per size and direction. Bytes = the buffer size (each byte crosses
    the link once)."""
    cases = [(d, h) for d in DIRECTIONS for h in ("pageable", "pinned")]
    if not target.present:
        return [target.absent(d, h) for d, h in cases]
    device = target.facts.device
    if torch.device(device).type == "cpu":
        reason = "the CPU's device memory is host memory: nothing to transfer"
        return [target.skip(d, h, reason) for d, h in cases]
    pin_error, records = _pin_error(), []
    for size in cfg.transfer_mib:
        n, shape = size * 2**20, {"MiB": size}
        per_kind = {}
        try:
            dev_src, dev_dst = memory.allocate(
                lambda: (
                    _random_bytes(n, seed=4).to(device),
                    torch.empty(n, dtype=torch.uint8, device=device),
                ),
                nbytes=2.0 * n,
                device=device,
            )
            for kind in ("pageable", "pinned"):
                if kind == "pinned" and pin_error:
                    per_kind[kind] = {
                        d: target.skip(d, kind, pin_error, dtype="uint8", shape=shape)
                        for d in DIRECTIONS
                    }
                else:
                    per_kind[kind] = _transfer_candidates(target, n, kind, dev_src, dev_dst)
        except Unsupported as why:
            records += [target.skip(d, h, str(why), dtype="uint8", shape=shape) for d, h in cases]
            continue
        for direction in DIRECTIONS:
            case = Case(TOPIC, direction, shape, dtype="uint8")
            records += check_then_time(
                case,
                [per_kind[k][direction] for k in ("pageable", "pinned")],
                facts=target.facts,
                baseline="pageable",
                min_time_s=cfg.min_time_s,
                progress=f"{direction} {size} MiB" if progress else None,
            )
        del per_kind, dev_src, dev_dst
    return records


def small_mlp(dim: int, *, device: str, dtype: str, seed: int = 0) -> torch.nn.Module:
    """Linear(dim, 4 dim) -> GELU -> Linear(4 dim, dim), seeded, in eval mode."""
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)
    )
    return mlp.to(device, DTYPES[dtype]).eval()


def mlp_input(batch: int, dim: int, *, device: str, dtype: str) -> torch.Tensor:
    """A seeded (batch, dim) input, generated on the host so every device sees the same values."""
    gen = torch.Generator().manual_seed(1)
    return torch.randn(batch, dim, generator=gen).to(device, DTYPES[dtype])


def mlp_check(mlp: torch.nn.Module, x: torch.Tensor, dtype: str):
    """check(out) of an MLP forward on `x` against the same weights and input in float64 on the
    host."""

    def reference() -> torch.Tensor:
        with torch.no_grad():
            return copy.deepcopy(mlp).cpu().double()(x.cpu().double())

    return checks.against(
        reference,
        reference="float64 MLP on the host, same weights and input",
        tolerance=tolerances.MLP[dtype],
    )


def _cuda_graph(mlp: torch.nn.Module, x: torch.Tensor):
    """A function replaying one forward captured on `x` (after a warm-up) and returning its
    static output."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            mlp(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mlp(x)

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


def _cold_compiled_call(mlp: torch.nn.Module, x: torch.Tensor, backend: str) -> torch.Tensor:
    """A fresh torch.compile of `mlp` and its first call: dynamo trace and code generation, with
    no dynamo cache and no FX graph cache (kernel binaries may still load from the disk cache)."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False):
        return torch.compile(mlp, backend=backend)(x)


def mlp_modes(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """The same MLP forward eager (the baseline), torch.compile'd and replayed from a CUDA graph,
    interleaved (ratio_vs_baseline against eager), then the compiled MLP's cold first call
    (case 'first_call'); every output checked against the float64 MLP."""
    if not target.present:
        return [target.absent("mlp", "eager")]
    device, dtype = target.facts.device, cfg.mlp_dtype
    mlp = small_mlp(cfg.mlp_dim, device=device, dtype=dtype)
    x = mlp_input(cfg.mlp_batch, cfg.mlp_dim, device=device, dtype=dtype)
    shape = {"batch": cfg.mlp_batch, "dim": cfg.mlp_dim}
    flops = 2.0 * cfg.mlp_batch * cfg.mlp_dim * 4 * cfg.mlp_dim * 2
    check, backend = mlp_check(mlp, x, dtype), compile_backend(device)
    name = f"torch_compile_{backend}"
    with torch.no_grad():
        candidates = [Candidate("eager", lambda: mlp(x), check, flops=flops)]
        if cfg.compile_mlp:
            compiled = torch.compile(mlp, backend=backend)
            candidates.append(Candidate(name, lambda: compiled(x), check, flops=flops))
        else:
            candidates.append(
                target.skip("mlp", name, "compile_mlp=False", dtype=dtype, shape=shape)
            )
        if torch.device(device).type == "cuda":
            candidates.append(Candidate("cuda_graph", _cuda_graph(mlp, x), check, flops=flops))
        else:
            candidates.append(
                target.skip(
                    "mlp",
                    "cuda_graph",
                    "CUDA graphs need a CUDA or ROCm device",
                    dtype=dtype,
                    shape=shape,
                )
            )
        records = check_then_time(
            Case(TOPIC, "mlp", shape, dtype=dtype),
            candidates,
            facts=target.facts,
            baseline="eager",
            min_time_s=cfg.min_time_s,
        )
        first = Case(TOPIC, "first_call", shape, dtype=dtype)
        if not cfg.compile_mlp:
            return records + [
                target.skip("first_call", name, "compile_mlp=False", dtype=dtype, shape=shape)
            ]
        cold = Candidate(
            name,
            lambda: _cold_compiled_call(mlp, x, backend),
            check,
            metrics={"note": "fresh torch.compile + first call per timed call"},
        )
        records += check_then_time(
            first, [cold], facts=target.facts, rounds=FIRST_CALL_ROUNDS, warmup=0, min_time_s=0.0
        )
    return records
