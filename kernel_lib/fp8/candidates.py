"""The fp8 sections' candidates: each timed path with its check at the timed shape and dtype. The
baselines (an fp32 `copy_`, bf16 `F.linear` against fp64), the quantisers (bit-exact against the
fp64 quantisation reference) and the FP8 linear paths (against the fp64 FP8 reference), each beside
the plug-ins of its slot (`fp8.quantize`, `fp8.linear`) checked alike; bench.py's sections compare
them."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernel_lib.checks import Check, against, exact
from kernel_lib.fp8.bench_blocks import NOT_ON_XLA
from kernel_lib.fp8.checks import TOLERANCES, out_tolerance
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.linear import Fp8Linear, Fp8LinearConfig, dynamic_quantize, scaled_mm
from kernel_lib.fp8.quantize import Fp8Tensor, quantize
from kernel_lib.fp8.reference import fp8_linear_reference, quantize_reference
from kernel_lib.fp8.scaling import Granularity, ScalingMode, scale_shape
from kernel_lib.fp8.shapes import GemmShape
from kernel_lib.measure import Candidate
from kernel_lib.platform import DeviceFacts
from kernel_lib.plugins import registered

GPU = ("nvidia", "amd")


def host(t: torch.Tensor) -> torch.Tensor:
    """t where fp64 runs well (CPU, CUDA/ROCm, XPU), else on the CPU (XLA, MPS): for references."""
    return t if t.device.type in ("cpu", "cuda", "xpu") else t.cpu()


def copy_candidate(x: torch.Tensor, dst: torch.Tensor) -> Candidate:
    """The bandwidth baseline: x copied into a preallocated `dst` (read once, written once)."""
    return Candidate(
        "copy", lambda: dst.copy_(x), check=exact(x, reference="the source"), bytes=8.0 * x.numel()
    )


def bf16_candidate(x: torch.Tensor, w: torch.Tensor, full: Callable, flops: float) -> Candidate:
    """The linear baseline: bf16 `F.linear(x, w)`, checked against `full()` (fp64 of x @ w.T)."""
    return Candidate(
        "bf16_linear",
        lambda: F.linear(x, w),
        flops=flops,
        check=against(full, reference="fp64 of the bf16 inputs", tolerance=TOLERANCES["bf16_out"]),
    )


def _codes(q: Fp8Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return q.data.view(torch.uint8), q.scale


def _plugin_codes(out) -> tuple[torch.Tensor, torch.Tensor]:
    """A plug-in quantiser's output, (data, scale) or an Fp8Tensor, as (bytes, scales)."""
    data, scale = (out.data, out.scale) if isinstance(out, Fp8Tensor) else out
    if data.element_size() != 1:
        raise TypeError(f"a quantiser's data must be float8 (a byte a value), not {data.dtype}")
    return data.view(torch.uint8), scale


def _exact_codes(reference, codes: Callable = _codes) -> Callable[[object], Check]:
    """A check of a quantiser's output: its bytes and scales (`codes`) identical to those of
    `reference()`."""
    check = exact(
        lambda: _codes(reference()), reference="fp64 quantisation reference (bytes, scales)"
    )
    return lambda q: check(codes(q))


def _quantizers(
    facts: DeviceFacts, gran: str, fmt: str, x: torch.Tensor, out: torch.Tensor
) -> dict:
    """implementation -> the timed call, or why it cannot run here. compiled_quantize (bit
    arithmetic), row_fused_quantize (the same, one pass per row: rowwise only), fused_quantize
    (Triton), c_quantize (the same bit arithmetic in C built for this CPU) and
    plain_compiled_quantize (`quantize` as plain ops through torch.compile, the comparator) are
    the variants; `quantize` is eager."""
    from kernel_lib.fp8.quantize_c import c_quantize  # compiled C: built on first use
    from kernel_lib.fp8.quantize_compiled import compiled_quantize  # Inductor, on first use

    def compiled(cast: str, fuse_rows: bool = False):
        if facts.backend == "xla":
            return NOT_ON_XLA
        if gran not in ("tensorwise", "rowwise"):
            return f"not built for {gran}"
        return lambda: compiled_quantize(
            x, fmt=fmt, granularity=gran, out=out, cast=cast, fuse_rows=fuse_rows
        )

    if facts.backend not in GPU:
        fused = (
            f"the Triton kernel is built for NVIDIA/AMD GPUs, not {facts.backend} "
            "(TRITON_INTERPRET=1 tests it in numpy, for correctness only)"
        )
    elif gran not in ("tensorwise", "rowwise"):
        fused = f"not built for {gran}"
    else:
        from kernel_lib.fp8.quantize_triton import fused_quantize  # Triton: optional

        fused = lambda: fused_quantize(x, fmt=fmt, granularity=gran)  # noqa: E731
    row_fused = (
        {"row_fused_quantize": compiled("bits", fuse_rows=True)} if gran == "rowwise" else {}
    )
    c_kernel = (
        f"a C kernel for CPUs, not {facts.backend}"
        if facts.backend != "cpu"
        else lambda: c_quantize(x, fmt=fmt, granularity=gran, out=out)
    )
    return {
        "quantize": lambda: quantize(x, fmt=fmt, granularity=gran, nonfinite="nan"),
        "compiled_quantize": compiled("bits"),
        **row_fused,
        "fused_quantize": fused,
        "c_quantize": c_kernel,
        "plain_compiled_quantize": compiled("plain"),
    }


VARIANTS = (
    "compiled_quantize",
    "row_fused_quantize",
    "fused_quantize",
    "c_quantize",
    "plain_compiled_quantize",
)


def quantize_candidates(
    facts: DeviceFacts, gran: str, fmt: str, x: torch.Tensor, out: torch.Tensor
) -> list[tuple[str, Candidate | str]]:
    """(`<quantiser>_<gran>`, its candidate or why it cannot run here), then each `fp8.quantize`
    plug-in's as `<name>_<gran>` (one case holds every granularity): fp32 x -> `fmt` checked
    bit-exact (bytes and scales) against the one fp64 reference; bytes: x read once + FP8
    written once + scales. A plug-in is called `fn(x, fmt, gran)`, both names as strings."""
    reference = functools.cache(lambda: quantize_reference(host(x), fmt=fmt, granularity=gran))
    written = 5.0 * x.numel() + 4.0 * math.prod(scale_shape(tuple(x.shape), Granularity(gran)))
    ours = {
        f"{name}_{gran}": fn
        if isinstance(fn, str)
        else Candidate(f"{name}_{gran}", fn, check=_exact_codes(reference), bytes=written)
        for name, fn in _quantizers(facts, gran, fmt, x, out).items()
    }
    check = _exact_codes(reference, _plugin_codes)
    theirs = [
        Candidate(
            f"{p.name}_{gran}",
            functools.partial(p.fn, x, fmt, gran),
            check=check,
            bytes=written,
            plugin=p.source,
        )
        for p in registered("fp8.quantize")
    ]
    return [*ours.items(), *((c.implementation, c) for c in theirs)]


def fp8_check(
    config: Fp8BenchConfig, recipe: str, x: torch.Tensor, w: torch.Tensor
) -> Callable[[object], Check]:
    """The check of every FP8 forward of x @ w.T in `recipe`, ours and the plug-ins': against
    the fp64 FP8 reference of its granularity (computed once, at the first check) at its output
    tolerance."""
    fmt, shape = config.linear_format, GemmShape(x.shape[0], x.shape[1], w.shape[0])
    gran = Fp8LinearConfig.from_recipe_name(recipe).recipe.granularity.value
    reference = functools.cache(
        lambda: fp8_linear_reference(host(x), host(w), fmt=fmt, granularity=gran)
    )
    label = f"fp64 FP8 reference ({fmt} {gran}) at M={shape.m} K={shape.k} N={shape.n}"
    return against(reference, reference=label, tolerance=out_tolerance(gran, torch.bfloat16))


def fp8_candidates(
    config: Fp8BenchConfig,
    recipe: str,
    x: torch.Tensor,
    w: torch.Tensor,
    facts: DeviceFacts,
    check: Callable[[object], Check],
) -> list[Candidate]:
    """The FP8 forward of x @ w.T (bf16 out), checked by `check` (`fp8_check`): the GEMM
    alone on pre-quantised operands (fp32 accumulation, and `use_fast_accum=True` as a named
    twin), x quantised per call with W stored in FP8 (inference), and both quantised per call by
    Fp8Linear (training). The operands are quantised at the first call of a candidate, so a
    quantiser that fails to build costs only the FP8 records (`failed`), never the baseline's.
    metrics.use_fast_accum says which accumulation each ran."""
    fmt, shape = config.linear_format, GemmShape(x.shape[0], x.shape[1], w.shape[0])
    dynamic = Fp8LinearConfig.from_recipe_name(recipe).recipe.mode is ScalingMode.DYNAMIC
    quantizer = "triton" if facts.backend in GPU and dynamic else "torch"
    lin = Fp8LinearConfig.from_recipe_name(recipe, fmt=fmt, quantizer=quantizer)
    layer = Fp8Linear(
        shape.k, shape.n, bias=False, config=lin, device=x.device, dtype=torch.bfloat16
    )
    with torch.no_grad():
        layer.weight.copy_(w)
    layer.weight.requires_grad_(False)  # forward only: no autograd graph in the timed call
    operands = functools.cache(lambda: (dynamic_quantize(x, lin), dynamic_quantize(w, lin)))
    paths = {
        "scaled_mm": lambda: scaled_mm(*operands(), out_dtype=torch.bfloat16),
        "scaled_mm_fast_accum": lambda: scaled_mm(
            *operands(), out_dtype=torch.bfloat16, use_fast_accum=True
        ),
        "fp8_inference_linear": lambda: scaled_mm(
            dynamic_quantize(x, lin), operands()[1], out_dtype=torch.bfloat16
        ),
        "fp8_linear": lambda: layer(x),
    }
    return [
        Candidate(
            f"{name}_{recipe}",
            fn,
            dtype=f"float8_{fmt}",
            flops=shape.flops,
            check=check,
            metrics={"use_fast_accum": name == "scaled_mm_fast_accum"},
        )
        for name, fn in paths.items()
    ]


def linear_plugins(
    config: Fp8BenchConfig,
    recipe: str,
    x: torch.Tensor,
    w: torch.Tensor,
    check: Callable[[object], Check],
) -> list[Candidate]:
    """Each `fp8.linear` plug-in as `<name>_<recipe>` (one case holds every recipe):
    `fn(x, w, recipe)` -> x @ w.T in bf16, both quantised per call, checked as our FP8 paths of
    `recipe` (`check`), whether or not `_scaled_mm` runs here."""
    shape = GemmShape(x.shape[0], x.shape[1], w.shape[0])
    return [
        Candidate(
            f"{p.name}_{recipe}",
            functools.partial(p.fn, x, w, recipe),
            check=check,
            dtype=f"float8_{config.linear_format}",
            flops=shape.flops,
            plugin=p.source,
        )
        for p in registered("fp8.linear")
    ]


FP8_PATHS = ("scaled_mm", "scaled_mm_fast_accum", "fp8_inference_linear", "fp8_linear")
