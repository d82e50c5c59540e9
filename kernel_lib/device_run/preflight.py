"""What a fresh GPU host can run, in under a minute, one line per item (ok, skipped or the error):
the carried packages, what the image must provide, versions, the device, the compiler config keys
the code patches and which spelling of the exact-division key this torch has; then what the
notebooks run at a tiny shape, cheapest and most wanted first: _scaled_mm tensorwise and rowwise,
the Triton quantiser tensorwise and rowwise from fp32 and bf16, a blockwise _scaled_mm, a
_scaled_grouped_mm with an empty group, and last the slowest, a cold flex_attention compile. An
item that fails costs its own line only; one that leaves the CUDA context unusable (a sticky fault,
such as an illegal address) also skips the items after it, saying so.
`python -m kernel_lib.device_run.preflight`: exit 1 when an item failed, 130 at Ctrl-C (one line)."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import sys
import time

import torch

from kernel_lib.checks import relative_error
from kernel_lib.device_run import wheels
from kernel_lib.locks import canonical
from kernel_lib.platform import detect_platform, device_facts

# The topics' modules are imported inside the items that use them: one that fails to import on
# this torch is that item's error line, not the end of the preflight.
TINY_TOLERANCE = 2e-2  # bf16 outputs of the tiny checks: a few ulps of 2**-8 relative
# What the notebooks import from the host's image (locks/device.txt carries the rest).
IMAGE_MODULES = ("pandas", "matplotlib", "numpy", "yaml", "psutil", "jinja2", "tqdm", "tabulate")
# Inductor's switch for correctly rounded division in Triton, as torch versions spell it.
DIVISION_KEYS = ("eager_numerics.division_rounding", "emulate_divison_rounding")
GRANULARITIES = ("tensorwise", "rowwise")
GROUP_SIZES = [16, 0, 16]  # rows per group of the grouped GEMM, the middle one empty


class Skip(Exception):
    """The item does not apply here: 'skipped: <reason>'."""


@functools.cache
def _facts():
    return device_facts()


def packages() -> str:
    """Every pinned package importable at its pinned version, their requirements met."""
    pinned = wheels.pins()
    found = {}
    for dist in importlib.metadata.distributions():  # sys.path order: the first one imports
        if dist.metadata["Name"]:  # a broken install's folder has none
            found.setdefault(canonical(dist.metadata["Name"]), dist)
    missing = [n for n in pinned if n not in found]
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)}")
    problems = [
        f"{n} {found[n].version} (pinned {v})" for n, v in pinned.items() if found[n].version != v
    ]
    versions = {name: dist.version for name, dist in found.items()}
    problems += wheels.unmet({n: found[n].requires or [] for n in pinned}, versions)
    if problems:
        raise RuntimeError("; ".join(problems))
    return f"{len(pinned)} pinned packages, their requirements met"


def image() -> str:
    """Each of IMAGE_MODULES imports: their versions on one line."""
    found, missing = {}, []
    for name in IMAGE_MODULES:
        try:
            found[name] = getattr(importlib.import_module(name), "__version__", "?")
        except ImportError as err:
            missing.append(f"{name} ({type(err).__name__})")
    if missing:
        raise RuntimeError(f"the image lacks {', '.join(missing)}")
    return ", ".join(f"{name} {version}" for name, version in found.items())


def versions() -> str:
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = "not installed"
    return (
        f"python {platform.python_version()}, torch {torch.__version__}, triton {triton}, "
        f"cuda {torch.version.cuda or 'none'}"
    )


def device() -> str:
    facts = _facts()
    try:
        matched = detect_platform(facts)
    except ValueError:
        matched = "none matches"
    memory = f"{facts.memory_bytes / 2**30:.1f} GiB" if facts.memory_bytes else "memory unknown"
    return (
        f"{facts.name} ({facts.arch}, {memory}, {facts.compute_units} {facts.compute_unit_kind})"
        f"; platform file: {matched}"
    )


def scaled_mm() -> str:
    """torch._scaled_mm of e4m3fn operands, tensorwise and rowwise, against the product of the
    dequantised operands."""
    # torch-side modules: imported once the plan's wheels are in place
    from kernel_lib.fp8.linear import fp8_matmul_support, scaled_mm, scaled_mm_unsupported
    from kernel_lib.fp8.quantize import quantize  # torch-side: after the wheels

    where = _facts().device
    if reason := scaled_mm_unsupported(where):
        raise Skip(reason)
    errors = {}
    for gran in GRANULARITIES:
        a, b = (quantize(torch.randn(n, 64, device=where), granularity=gran) for n in (32, 48))
        out = scaled_mm(a, b, out_dtype=torch.bfloat16).float()
        errors[gran] = relative_error(out, a.dequantize() @ b.dequantize().T)
        if not errors[gran] <= TINY_TOLERANCE:
            raise AssertionError(f"{gran}: relative error {errors[gran]:.2g} > {TINY_TOLERANCE}")
    said = ", ".join(f"{gran} {error:.1e}" for gran, error in errors.items())
    return f"{fp8_matmul_support(where)}, 32x64 @ 64x48 relative error: {said}"


def flex_compile() -> str:
    """Causal flex_attention compiled at S=128 against SDPA's causal attention."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    where = _facts().device
    dtype = torch.float32 if where == "cpu" else torch.bfloat16
    q, k, v = (torch.randn(1, 2, 128, 64, device=where, dtype=dtype) for _ in range(3))
    mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, 128, 128, device=where)
    started = time.perf_counter()
    out = torch.compile(flex_attention)(q, k, v, block_mask=mask)
    seconds = time.perf_counter() - started
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    error = relative_error(out.float(), ref.float())
    if not error <= TINY_TOLERANCE:
        raise AssertionError(f"relative error {error:.2g} vs SDPA > {TINY_TOLERANCE}")
    return f"causal S=128 {str(dtype)[6:]}: compiled in {seconds:.1f} s, error vs SDPA {error:.1e}"


def triton_quantize() -> str:
    """The Triton quantiser, tensorwise and rowwise, from fp32 and bf16 (what the FP8 linear
    headline feeds it), bit for bit against the fp64 reference."""
    where = _facts().device
    if not where.startswith("cuda"):
        raise Skip("no GPU")
    from kernel_lib.fp8.quantize_triton import fused_quantize  # Triton: imported on demand
    from kernel_lib.fp8.reference import quantize_reference  # torch-side: after the wheels

    for gran in GRANULARITIES:
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(64, 256, device=where, dtype=dtype)
            got, want = (
                fused_quantize(x, granularity=gran),
                quantize_reference(x, granularity=gran),
            )
            differ = int((got.data.view(torch.uint8) != want.data.view(torch.uint8)).sum())
            if differ or not torch.equal(got.scale, want.scale.float()):
                what = f"{gran} from {str(dtype)[6:]}"
                raise AssertionError(
                    f"{what}: {differ} of {x.numel()} codes (or the scales) differ"
                )
    return "tensorwise and rowwise from float32 and bfloat16, 64x256 e4m3fn: bit-exact vs fp64"


def checked_row(table, implementation: str) -> str:
    """The row of `implementation` in an fp8 check table as the item's line: Skip where it was
    skipped, an error where it raised or its check failed."""
    row = table.set_index("implementation").loc[implementation]
    if row["check"] == "skipped":
        raise Skip(row["reason"])
    if row["check"] == "failed":
        raise RuntimeError(row["reason"])
    error = f"relative error vs the fp64 FP8 reference {row['vs_fp8_reference']:.1e}"
    if row["check"] != "PASS":
        raise AssertionError(f"{error} > {row['tolerance']:.2g}")
    return error


def block_scaled_mm() -> str:
    """A blockwise `_scaled_mm` (x per 1x128, W per 128x128 block) through the notebook's check,
    at the quick plans' check shape (M odd, K two blocks)."""
    from kernel_lib.fp8.checks import block_gemm_check  # torch-side: after the wheels
    from kernel_lib.fp8.shapes import GemmShape  # torch-side: after the wheels

    shape = GemmShape.ragged(128)
    table = block_gemm_check([shape], recipes=["blockwise"], device=_facts().device)
    return f"{shape.m}x{shape.k} @ {shape.k}x{shape.n}: {checked_row(table, 'block_scaled_mm')}"


def grouped_mm() -> str:
    """`_scaled_grouped_mm` through the notebook's check at GROUP_SIZES: with an empty group, as
    the notebook's last expert always is (the probe that gates it has two equal groups)."""
    from kernel_lib.fp8.checks import grouped_gemm_check  # torch-side: after the wheels

    table = grouped_gemm_check(GROUP_SIZES, dim=64, ffn=32, device=_facts().device)
    return f"groups {GROUP_SIZES}, K=64, N=32: {checked_row(table, 'scaled_grouped_mm')}"


def patched_keys() -> dict[str, tuple[str, ...]]:
    """Every compiler config key kernel_lib patches by name, per config module (a test finds each
    `config.patch(` in kernel_lib): where torch lacks one, the section using it is skipped. The
    exact-division key has two spellings: `division_rounding`."""
    return {
        "torch._inductor.config": ("fx_graph_cache",),
        "torch._dynamo.config": ("recompile_limit", "fail_on_recompile_limit_hit"),
    }


def config_keys() -> str:
    """Each of `patched_keys` exists in the running torch."""
    import torch._dynamo.config  # noqa: F401 - registers torch._dynamo.config
    import torch._inductor.config  # noqa: F401 - registers torch._inductor.config

    keys, missing = patched_keys(), []
    for module, names in keys.items():
        config = sys.modules[module]
        for key in names:
            try:
                functools.reduce(getattr, key.split("."), config)
            except AttributeError:
                missing.append(f"{module}.{key}")
    if missing:
        raise RuntimeError(f"torch {torch.__version__} lacks {', '.join(missing)}")
    return f"{sum(map(len, keys.values()))} keys present"


def division_rounding() -> str:
    """Which spelling of Inductor's exact-division key this torch has (DIVISION_KEYS): without
    either, the compiled quantisers and their plain comparator are skipped on a GPU."""
    import torch._inductor.config as config

    for key in DIVISION_KEYS:
        try:
            functools.reduce(getattr, key.split("."), config)
        except AttributeError:
            continue
        return f"torch._inductor.config.{key} is the one used"
    raise RuntimeError(
        f"torch {torch.__version__} has neither {' nor '.join(DIVISION_KEYS)}: "
        "the compiled quantisers are skipped"
    )


# Cheap first, then the kernels most wanted first; the slowest (a cold compile) last, so that a cap
# on the preflight (kernel_lib.device_run.cli) cuts only it.
ITEMS = {
    "packages": packages,
    "image": image,
    "versions": versions,
    "device": device,
    "config_keys": config_keys,
    "division_key": division_rounding,
    "scaled_mm": scaled_mm,
    "triton_quantize": triton_quantize,
    "block_scaled_mm": block_scaled_mm,
    "grouped_mm": grouped_mm,
    "flex_attention": flex_compile,
}


def context_lost() -> bool:
    """Whether a CUDA error left this process's context unusable: a sticky one (an illegal
    address) fails every later call, synchronising included."""
    if not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
    except RuntimeError:
        return True
    return False


def _line(item) -> tuple[str, bool]:
    """The item's line, and whether it failed."""
    try:
        return f"ok: {item()}", False
    except Skip as reason:
        return f"skipped: {reason}", False
    except Exception as err:  # noqa: BLE001 - an item's failure is its line; the next runs
        return f"error: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}", True


def run_items(items: dict = ITEMS) -> int:
    """Print one line per item; return how many failed. After an item whose error lost the CUDA
    context the later items are skipped, saying so: they would fail with its error."""
    failed, lost = 0, ""
    for name, item in items.items():
        started = time.perf_counter()
        line, bad = (f"skipped: {lost}", False) if lost else _line(item)
        failed += bad
        if bad and context_lost():
            lost = f"the CUDA context is lost since {name}'s error"
        print(f"{name:16s} {line} ({time.perf_counter() - started:.1f} s)", flush=True)
    return failed


if __name__ == "__main__":
    try:
        sys.exit(1 if run_items() else 0)
    except KeyboardInterrupt:
        print("preflight: stopped (Ctrl-C)", flush=True)
        sys.exit(130)
