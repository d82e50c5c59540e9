"""The fp8 tolerance table, and the correctness tables shown before any timing: `_scaled_mm`, the
FP8 linear, the block-scaled GEMMs and the grouped GEMM against the independent fp64 references
of `kernel_lib.fp8.reference`."""

from __future__ import annotations

import pandas as pd
import torch

from kernel_lib.checks import Tolerance, Unsupported, error_line, errors, relative_error
from kernel_lib.fp8.block_scaled import (
    block_scaled_mm,
    quantize_operands,
    recipe_granularities,
    split_k_scaled_mm,
)  # fmt: skip
from kernel_lib.fp8.grouped import looped_scaled_mm, quantize_experts, scaled_grouped_mm
from kernel_lib.fp8.linear import Fp8Linear, Fp8LinearConfig, scaled_mm, scaled_mm_unsupported
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.reference import fp8_linear_reference, grouped_linear_reference
from kernel_lib.fp8.shapes import GemmShape

# relative_error = max |out - ref| / max |ref|. Against the fp64 product of the reference's own FP8
# operands only accumulation and output rounding remain, so a wrong format (e5m2 for e4m3: 8-13 %
# measured), a dropped or inverted scale (orders of magnitude) fails these bounds.
TOLERANCES = {
    "fp32_out": Tolerance(
        2**-16,
        "fp32 accumulation over K: ~sqrt(K) * 2^-24 of the output scale, "
        "<= 2^-17 for K <= 2^14, doubled",
    ),
    "tensor_core_out": Tolerance(
        2**-10,
        "fp32 output of an FP8 tensor-core GEMM: Hopper's FP8 MMA keeps ~14 bits while it "
        "accumulates (DeepSeek-V3 report, 3.3.2) until cuBLAS promotes to fp32, ~sqrt(128) x "
        "2^-14 = 2^-10.5; H100 measured 1.7e-4 to 2.8e-4",
    ),
    "bf16_out": Tolerance(
        2**-7,
        "two bf16 roundings (2 x 2^-9: rowwise kernels round the product "
        "and the scaled output) + fp32 accumulation over K, < 2^-7",
    ),
    "vs_unquantised": Tolerance(
        2**-4,
        "FP8 forward vs fp64 of unquantised inputs: e4m3 rounds each "
        "operand within 2^-4 relative, random signs: 3.4-4.7 % "
        "measured (e5m2: 7-10 %)",
    ),
    "mx_vs_unquantised": Tolerance(
        2**-3,
        "MXFP8 forward vs fp64 of unquantised inputs: the power-of-two scale "
        "2^(floor(log2 amax) - 8) lets a block's largest values reach 2x "
        "e4m3's max and saturate there (up to 12.5 % each): 5-7 % measured",
    ),
    "grad_vs_fp32": Tolerance(
        2**-3,
        "backward GEMMs on e5m2 gradients (half-ulp 2^-3) and e4m3 "
        "operands vs fp32 autograd: <= 9 % measured",
    ),
    "learned": Tolerance(
        0.5,
        "final loss over first loss: a student that learns nothing stays "
        "near the teacher's unit variance (1.0); 20 steps reach ~0.3",
    ),
    "tracks_bf16": Tolerance(
        0.05,
        "|final FP8 loss - final bf16 loss| over bf16's first loss: "
        "FP8 rounding perturbs each step by a few %, <= 0.005 measured",
    ),
}


def output_bound(out_dtype: torch.dtype, device="cpu") -> Tolerance:
    """The bound against the FP8 reference of a GEMM with `out_dtype` output on `device`: a GPU's
    FP8 tensor cores accumulate in less than fp32, a CPU's oneDNN in fp32."""
    if out_dtype == torch.bfloat16:
        return TOLERANCES["bf16_out"]
    return TOLERANCES["fp32_out" if torch.device(device).type == "cpu" else "tensor_core_out"]


def out_tolerance(granularity: str, out_dtype: torch.dtype, device="cpu") -> Tolerance:
    """output_bound, where rowwise `_scaled_mm` always produces bf16 first."""
    return output_bound(torch.bfloat16 if granularity == "rowwise" else out_dtype, device)


def _skipped_cases(cases: list[dict], reason: str) -> pd.DataFrame:
    """A check table whose every case is 'skipped' with `reason`: its records keep the ids
    they have where the check runs."""
    return pd.DataFrame([case | {"check": "skipped", "reason": reason} for case in cases])


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _row(run) -> dict:
    """run()'s row; a 'skipped' row with the reason where it cannot run here (a device without
    FP8 matrix units, a CPU's oneDNN without an FP8 matmul for that call, a refused scale
    layout), a 'failed' row with the error's last line where it raised anything else (that row
    only: the table goes on)."""
    try:
        return run()
    except Unsupported as why:
        return {"check": "skipped", "reason": str(why)}
    except Exception as err:  # noqa: BLE001 - one failing kernel costs only its own row
        return {"check": "failed", "reason": error_line(err)}


def scaled_mm_check(
    shapes: list[GemmShape],
    *,
    granularities: list[str],
    fmt: str = "e4m3fn",
    device: str = "cpu",
    seed: int = 0,
) -> pd.DataFrame:
    """Per (shape, granularity): relative error of torch._scaled_mm (fp32 out) with inverse
    scales against (1) the fp64 FP8 reference (and its max_abs_error and tolerance) and (2)
    fp64 of the unquantised inputs, and of a bf16 matmul against (2) for scale; PASS when (1)
    and (2) are within TOLERANCES; every case 'skipped' where `_scaled_mm` cannot run."""
    if reason := scaled_mm_unsupported(device):
        cases = [
            shape.as_dict() | {"granularity": gran} for shape in shapes for gran in granularities
        ]
        return _skipped_cases(cases, reason)
    rows = []
    for shape in shapes:
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(shape.m, shape.k, generator=gen).to(device)
        b = torch.randn(shape.n, shape.k, generator=gen).to(device)
        full = a.double() @ b.double().t()
        bf16 = a.bfloat16() @ b.bfloat16().t()
        for gran in granularities:

            def checked(gran=gran) -> dict:
                qa, qb = (
                    quantize(a, fmt=fmt, granularity=gran),
                    quantize(b, fmt=fmt, granularity=gran),
                )
                out = scaled_mm(qa, qb, out_dtype=torch.float32)
                abs_ref, e_ref = errors(out, fp8_linear_reference(a, b, fmt=fmt, granularity=gran))
                e_full = relative_error(out, full)
                tolerance = out_tolerance(gran, torch.float32, device).value
                ok = e_ref <= tolerance and e_full <= TOLERANCES["vs_unquantised"].value
                return {
                    "vs_fp8_reference": e_ref,
                    "vs_fp64": e_full,
                    "bf16_vs_fp64": relative_error(bf16, full),
                    "max_abs_error": abs_ref,
                    "tolerance": tolerance,
                    "check": _verdict(ok),
                }

            rows.append(shape.as_dict() | {"granularity": gran} | _row(checked))
    return pd.DataFrame(rows)


def linear_check(
    *,
    recipes: list[str],
    fmt: str = "e4m3fn",
    grad_dtype: str = "e5m2",
    batch: int = 3,
    seq: int = 5,
    in_features: int = 64,
    out_features: int = 48,
    device: str = "cpu",
    seed: int = 0,
) -> pd.DataFrame:
    """Fp8Linear on a 3-D fp32 input per recipe: forward against the fp64 FP8 reference (and
    its max_abs_error and tolerance), and forward, input and weight gradients against nn.Linear
    in fp32 (the FP8 rounding itself); every recipe 'skipped' where `_scaled_mm` cannot run."""
    if reason := scaled_mm_unsupported(device):
        return _skipped_cases([{"recipe": name} for name in recipes], reason)
    rows = []
    for name in recipes:

        def checked(name=name) -> dict:
            torch.manual_seed(seed)
            ref = torch.nn.Linear(in_features, out_features, device=device)
            config = Fp8LinearConfig.from_recipe_name(name, fmt=fmt, grad_dtype=grad_dtype)
            layer = Fp8Linear.from_linear(ref, config)
            gran = config.recipe.granularity.value
            x = torch.randn(batch, seq, in_features, device=device, requires_grad=True)
            out = layer(x)
            fp8_ref = fp8_linear_reference(x, ref.weight, ref.bias, fmt=fmt, granularity=gran)
            out.square().sum().backward()
            grad_x, grad_w = x.grad.clone(), ref.weight.grad.clone()
            x.grad, ref.weight.grad = None, None
            full = ref(x)
            full.square().sum().backward()
            abs_ref, e_ref = errors(out, fp8_ref)
            row = {
                "out_vs_fp8_reference": e_ref,
                "out_vs_fp32": relative_error(out, full),
                "grad_x_vs_fp32": relative_error(grad_x, x.grad),
                "grad_w_vs_fp32": relative_error(grad_w, ref.weight.grad),
                "max_abs_error": abs_ref,
                "tolerance": out_tolerance(gran, torch.float32, device).value,
            }
            grad_tol = TOLERANCES["grad_vs_fp32"].value
            ok = (
                e_ref <= row["tolerance"]
                and row["out_vs_fp32"] <= TOLERANCES["vs_unquantised"].value
                and max(row["grad_x_vs_fp32"], row["grad_w_vs_fp32"]) <= grad_tol
            )
            return row | {"check": _verdict(ok)}

        rows.append({"recipe": name} | _row(checked))
    return pd.DataFrame(rows)


def block_tolerances(
    recipe: str, out_dtype: torch.dtype, device="cpu"
) -> tuple[Tolerance, Tolerance]:
    """(bound against the fp64 FP8 reference, bound against fp64 of the unquantised inputs)."""
    full = TOLERANCES["mx_vs_unquantised" if recipe == "mxfp8" else "vs_unquantised"]
    return output_bound(out_dtype, device), full


BLOCK_PATHS = {  # implementation -> (the call on quantised operands, its output dtype)
    "block_scaled_mm": (block_scaled_mm, torch.bfloat16),
    "split_k_scaled_mm": (split_k_scaled_mm, torch.float32),
}


def _errors_row(run, reference, full, tolerances) -> dict:
    """{vs_fp8_reference, vs_fp64, check} of `run()` (as `_row` makes it)."""

    def checked() -> dict:
        out = run()
        abs_ref, e_ref = errors(out, reference)
        e_full = relative_error(out, full)
        ok = e_ref <= tolerances[0].value and e_full <= tolerances[1].value
        return {
            "vs_fp8_reference": e_ref,
            "vs_fp64": e_full,
            "max_abs_error": abs_ref,
            "tolerance": tolerances[0].value,
            "check": _verdict(ok),
        }

    return _row(checked)


def block_gemm_check(
    shapes: list[GemmShape],
    *,
    recipes: list[str],
    fmt: str = "e4m3fn",
    device: str = "cpu",
    seed: int = 0,
) -> pd.DataFrame:
    """Per (shape, recipe, implementation): relative error of `block_scaled_mm` (bf16 out) and
    its split-K twin (fp32 out) against the fp64 FP8 reference with the recipe's block scales
    and against fp64 of the unquantised inputs; 'skipped' with the reason where a path cannot
    run (a device without FP8 matrix units, or one that refuses the scale layout), 'failed'
    with the error where it raised anything else."""
    if reason := scaled_mm_unsupported(device):
        cases = [
            shape.as_dict() | {"recipe": recipe, "implementation": name}
            for shape in shapes
            for recipe in recipes
            for name in BLOCK_PATHS
        ]
        return _skipped_cases(cases, reason)
    rows = []
    for shape in shapes:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(shape.m, shape.k, generator=gen).to(device)
        w = torch.randn(shape.n, shape.k, generator=gen).to(device)
        full = x.double() @ w.double().t()
        for recipe in recipes:
            gran_x, gran_w = (g.value for g in recipe_granularities(recipe))
            reference = fp8_linear_reference(
                x, w, fmt=fmt, granularity=gran_x, weight_granularity=gran_w
            )
            qx, qw = quantize_operands(x, w, recipe=recipe, fmt=fmt)
            for name, (path, out_dtype) in BLOCK_PATHS.items():
                row = _errors_row(
                    lambda: path(qx, qw, out_dtype=out_dtype),  # noqa: B023 (called at once)
                    reference,
                    full,
                    block_tolerances(recipe, out_dtype, device),
                )
                rows.append(shape.as_dict() | {"recipe": recipe, "implementation": name} | row)
    return pd.DataFrame(rows)


GROUPED_PATHS = {"scaled_grouped_mm": scaled_grouped_mm, "looped_scaled_mm": looped_scaled_mm}


def grouped_gemm_check(
    counts: list[int],
    *,
    dim: int,
    ffn: int,
    fmt: str = "e4m3fn",
    device: str = "cpu",
    seed: int = 0,
) -> pd.DataFrame:
    """Per implementation: relative error of the rowwise FP8 grouped GEMM (bf16 out) of
    x (sum(counts), dim) by expert weights (E, ffn, dim) against the fp64 FP8 reference loop
    over experts and fp64 of the unquantised inputs; 'skipped' with the reason where a path
    cannot run, 'failed' with the error where it raised anything else (e.g. at this shape)."""
    if reason := scaled_mm_unsupported(device):
        case = {"T": sum(counts), "E": len(counts)}
        return _skipped_cases([case | {"implementation": n} for n in GROUPED_PATHS], reason)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(counts), dim, generator=gen).to(device)
    w = (torch.randn(len(counts), ffn, dim, generator=gen) / dim**0.5).to(device)
    reference = grouped_linear_reference(x, w, counts, fmt=fmt)
    full = grouped_linear_reference(x, w, counts, fmt=None)
    qx, qw = quantize_experts(x, w, fmt=fmt)
    tolerances = (TOLERANCES["bf16_out"], TOLERANCES["vs_unquantised"])
    rows = []
    for name, path in GROUPED_PATHS.items():
        row = _errors_row(lambda: path(qx, qw, counts), reference, full, tolerances)  # noqa: B023
        rows.append({"T": sum(counts), "E": len(counts), "implementation": name} | row)
    return pd.DataFrame(rows)
