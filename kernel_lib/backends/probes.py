"""Capability probes: each feature is decided by running a tiny op on the device and checking its
answer against float64, never by a table of what a device "should" support."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pandas as pd
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.records import Record, info, skipped

FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
SDPA_BACKENDS = {
    "sdpa_math": "MATH",
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
}
COMPILE_PROBES = ("torch_compile", "flex_attention")
# (device type, probe) pairs that kill the process instead of raising: answered without running.
CRASHES = {
    ("xla", "_grouped_mm"): "not run: torch._grouped_mm segfaults torch_xla 2.9 (exit 139 here)"
}
# What a probe may raise when the feature is missing: the message is the finding. Dynamo, Inductor
# and Triton driver errors are RuntimeError subclasses; a missing module is an ImportError.
EXPECTED = (RuntimeError, NotImplementedError, TypeError, ValueError, ImportError)


def compile_backend(device: str) -> str:
    """torch.compile's backend for a device: OpenXLA for torch_xla devices, else Inductor."""
    return "openxla" if torch.device(device).type == "xla" else "inductor"


def _seeded(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (
        torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        * scale
    )


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.cpu().double() - ref).abs().max() / ref.abs().max()).item()


def _verdict(err: float, tol: float) -> tuple[bool, str]:
    return (
        (True, f"max rel err {err:.1e}")
        if err <= tol
        else (False, f"wrong result: rel err {err:.1e} > {tol}")
    )


def _matmul(device: str, dtype: torch.dtype, tol: float) -> tuple[bool, str]:
    a, b = _seeded(64, 64), _seeded(64, 64).T
    return _verdict(_rel_err(a.to(device, dtype) @ b.to(device, dtype), a @ b), tol)


def _tf32(device: str) -> tuple[bool, str]:
    """fp32 matmul at precision 'high' gives other bits than 'highest' only if a reduced-precision
    path (TF32 on NVIDIA, bf16 passes elsewhere) really ran."""
    a, b = _seeded(256, 256).float().to(device), _seeded(256, 256).T.float().to(device)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        exact = (a @ b).cpu()
        torch.set_float32_matmul_precision("high")
        fast = (a @ b).cpu()
    finally:
        torch.set_float32_matmul_precision(before)
    if torch.equal(exact, fast):
        return False, "precision 'high' gave the fp32 result bit for bit: no TF32 path"
    return True, f"precision 'high' differs from fp32 by {_rel_err(fast, exact.double()):.1e}"


def _fp8_cast(device: str, dtype: torch.dtype) -> tuple[bool, str]:
    x = _seeded(256, scale=4.0)
    ok, detail = _verdict(_rel_err(x.float().to(device).to(dtype).float(), x), 0.13)
    return ok, f"cast round trip, {detail} (GEMMs need _scaled_mm)"


def _scaled_mm(device: str, dtype: torch.dtype) -> tuple[bool, str]:
    a8 = _seeded(16, 32).float().to(device).to(dtype)
    b8 = _seeded(16, 32).float().to(device).to(dtype).t()  # column-major, as _scaled_mm requires
    one = torch.tensor(1.0, device=device)
    out = torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return _verdict(_rel_err(out, a8.cpu().double() @ b8.cpu().double()), 1e-2)


def _grouped_mm(device: str) -> tuple[bool, str]:
    a, b = _seeded(32, 16), _seeded(2, 16, 16)
    offs = torch.tensor([16, 32], dtype=torch.int32, device=device)
    # Each expert's weight column-major, as MoE layers pass it (w.transpose(-2, -1)).
    b_cm = b.transpose(-2, -1).contiguous().transpose(-2, -1).to(device, torch.bfloat16)
    out = torch._grouped_mm(a.to(device, torch.bfloat16), b_cm, offs=offs)
    ref = torch.cat([a[:16] @ b[0], a[16:] @ b[1]])
    return _verdict(_rel_err(out, ref), 2e-2)


def _sdpa(device: str, backend: str) -> tuple[bool, str]:
    if torch.device(device).type == "xla" and backend != "MATH":
        # sdpa_kernel picks among CUDA/CPU/XPU kernels; torch_xla lowers attention through XLA
        # whatever is selected, so running it would report a kernel that never ran.
        return (
            False,
            f"sdpa_kernel({backend}) is not honoured on xla: XLA compiles attention itself",
        )
    q, k, v = (
        _seeded(1, 2, 128, 64),
        _seeded(1, 2, 128, 64, scale=0.5),
        _seeded(1, 2, 128, 64, scale=2.0),
    )
    with sdpa_kernel(getattr(SDPBackend, backend)):
        out = F.scaled_dot_product_attention(*(t.to(device, torch.bfloat16) for t in (q, k, v)))
    return _verdict(_rel_err(out, F.scaled_dot_product_attention(q, k, v)), 2e-2)


def _torch_compile(device: str) -> tuple[bool, str]:
    fn = torch.compile(
        lambda x: torch.sin(x) * 2 + 1, backend=compile_backend(device), fullgraph=True
    )
    x = _seeded(64)
    return _verdict(_rel_err(fn(x.float().to(device)), torch.sin(x) * 2 + 1), 1e-5)


def _triton(device: str) -> tuple[bool, str]:
    from kernel_lib.backends.probes_triton import fill  # Triton: optional

    out = fill(torch.zeros(300, device=device), 3.0)
    return _verdict(_rel_err(out, torch.full((300,), 3.0, dtype=torch.float64)), 0.0)


def _flex_attention(device: str) -> tuple[bool, str]:
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = (
        _seeded(1, 2, 128, 64),
        _seeded(1, 2, 128, 64, scale=0.5),
        _seeded(1, 2, 128, 64, scale=2.0),
    )
    fn = torch.compile(flex_attention, backend=compile_backend(device))
    out = fn(*(t.float().to(device) for t in (q, k, v)))
    return _verdict(_rel_err(out, F.scaled_dot_product_attention(q, k, v)), 1e-4)


def _probes(device: str) -> list[tuple[str, str | None, Callable[[], tuple[bool, str]]]]:
    """(name, dtype, probe) in table order."""
    probes = [
        ("matmul", "float32", lambda: _matmul(device, torch.float32, 1e-5)),
        ("matmul", "tfloat32", lambda: _tf32(device)),
        ("matmul", "bfloat16", lambda: _matmul(device, torch.bfloat16, 2e-2)),
        ("matmul", "float16", lambda: _matmul(device, torch.float16, 5e-3)),
    ]
    probes += [
        ("cast", name, lambda n=name: _fp8_cast(device, getattr(torch, n))) for name in FP8_DTYPES
    ]
    probes += [
        ("_scaled_mm", name, lambda n=name: _scaled_mm(device, getattr(torch, n)))
        for name in ("float8_e4m3fn", "float8_e4m3fnuz")
    ]
    probes.append(("_grouped_mm", "bfloat16", lambda: _grouped_mm(device)))
    probes += [
        (name, "bfloat16", lambda b=b: _sdpa(device, b)) for name, b in SDPA_BACKENDS.items()
    ]
    probes += [
        ("torch_compile", "float32", lambda: _torch_compile(device)),
        ("triton", "float32", lambda: _triton(device)),
        ("flex_attention", "float32", lambda: _flex_attention(device)),
    ]
    return probes


def _run(probe: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    """The probe's verdict; an expected error is a 'no' whose message is the detail. Warnings the
    runtime emits are kept in the detail instead of reaching stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ok, detail = probe()
        except EXPECTED as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            ok, detail = False, f"{type(err).__name__}: {first[:160]}"
    # Runtime messages (e.g. why a fused kernel was not used), not library deprecation notices.
    notes = [w for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    if notes:
        detail += f" [warning: {str(notes[0].message).strip().splitlines()[0][:120]}]"
    return ok, detail


def probe(target: Target, *, compile: bool = True) -> list[Record]:
    """One record per capability (case 'probe'; metrics: supported yes/no and the detail).
    `compile=False` skips the probes that compile (torch.compile, flex_attention)."""
    if not target.present:
        return [target.absent("probe", "all")]
    facts, records = target.facts, []
    for name, dtype, fn in _probes(facts.device):
        if name in COMPILE_PROBES and not compile:
            records.append(
                skipped(
                    TOPIC,
                    "probe",
                    name,
                    "not tried: probe_compile=False",
                    facts=facts,
                    dtype=dtype,
                )
            )
            continue
        crash = CRASHES.get((torch.device(facts.device).type, name))
        ok, detail = (False, crash) if crash else _run(fn)
        records.append(
            info(
                TOPIC,
                "probe",
                name,
                facts=facts,
                dtype=dtype,
                metrics={"supported": "yes" if ok else "no", "detail": detail},
            )
        )
    return records


def probe_table(records: list[Record]) -> pd.DataFrame:
    """The probe records as a yes/no/detail table (the skip reason when nothing was probed)."""
    rows = [
        {
            "capability": r.implementation,
            "dtype": r.dtype,
            "supported": r.metrics.get("supported", r.status),
            "detail": r.metrics.get("detail", r.reason),
        }
        for r in records
        if r.case == "probe"
    ]
    return pd.DataFrame(rows, columns=["capability", "dtype", "supported", "detail"])
