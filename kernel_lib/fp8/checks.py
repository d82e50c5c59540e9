"""Correctness tables shown before any timing: `_scaled_mm` and the FP8 linear against references."""

from __future__ import annotations

import pandas as pd
import torch

from kernel_lib.fp8.linear import Fp8Linear, Fp8LinearConfig, fp8_linear_reference, scaled_mm, scaled_mm_unsupported
from kernel_lib.fp8.numerics import error_metrics
from kernel_lib.fp8.quantize import dequantize, quantize

# Tolerances with reasons. Against the dequantised-operand fp64 product only accumulation and the
# output rounding differ: fp32 output ~1e-6, bf16 output (rowwise) 2**-9 relative per element.
# Against the unquantised product, e4m3 inputs give ~2.6 % per operand (perf_anchors.md section 2.1).
TOL_VS_DEQUANT = {"tensorwise": 1e-5, "rowwise": 4e-3}
TOL_VS_FULL = 0.08


def _skipped(device: str) -> pd.DataFrame | None:
    """A one-row 'skipped' table where torch._scaled_mm cannot run on `device`, else None."""
    reason = scaled_mm_unsupported(device)
    return None if reason is None else pd.DataFrame([{"check": "skipped", "reason": reason}])


def scaled_mm_check(shapes: list[tuple[int, int, int]], *, granularities: list[str],
                    fmt: str = "e4m3fn", device: str = "cpu", seed: int = 0) -> pd.DataFrame:
    """Per (M, K, N, granularity): relative error of torch._scaled_mm with inverse scales against
    (1) fp64 matmul of the dequantised operands, (2) fp64 of the unquantised inputs and (3) a bf16
    matmul of the unquantised inputs; PASS when (1) and (2) are within tolerance; one 'skipped'
    row where `_scaled_mm` cannot run."""
    if (skip := _skipped(device)) is not None:
        return skip
    rows = []
    for m, k, n in shapes:
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(m, k, generator=gen).to(device)
        b = torch.randn(n, k, generator=gen).to(device)
        full = a.double() @ b.double().t()
        bf16 = (a.bfloat16() @ b.bfloat16().t()).double()
        for gran in granularities:
            qa, qb = quantize(a, fmt=fmt, granularity=gran), quantize(b, fmt=fmt, granularity=gran)
            out = scaled_mm(qa, qb, out_dtype=torch.float32).double()
            dq = dequantize(qa, dtype=torch.float64) @ dequantize(qb, dtype=torch.float64).t()
            e_dq = error_metrics(dq, out)["rel_error"]
            e_full = error_metrics(full, out)["rel_error"]
            ok = e_dq <= TOL_VS_DEQUANT[gran] and e_full <= TOL_VS_FULL
            rows.append({"M": m, "K": k, "N": n, "granularity": gran, "vs_dequant_fp64": e_dq,
                         "vs_fp64": e_full, "bf16_vs_fp64": error_metrics(full, bf16)["rel_error"],
                         "check": "PASS" if ok else "FAIL"})
    return pd.DataFrame(rows)


def linear_check(*, recipes: list[str], batch: int = 3, seq: int = 5, in_features: int = 64,
                 out_features: int = 48, device: str = "cpu", seed: int = 0) -> pd.DataFrame:
    """Fp8Linear on a 3-D input per recipe: forward against its fp64 twin, and forward/backward
    against nn.Linear in fp32 (the FP8 rounding, a few percent); one 'skipped' row where
    `_scaled_mm` cannot run."""
    if (skip := _skipped(device)) is not None:
        return skip
    rows = []
    for name in recipes:
        torch.manual_seed(seed)
        ref = torch.nn.Linear(in_features, out_features, device=device)
        layer = Fp8Linear.from_linear(ref, Fp8LinearConfig.from_recipe_name(name))
        x = torch.randn(batch, seq, in_features, device=device, requires_grad=True)
        out = layer(x)
        twin = fp8_linear_reference(x.detach(), ref.weight.detach(), ref.bias.detach(), layer.config)
        out.square().sum().backward()
        grad_x, grad_w = x.grad.clone(), ref.weight.grad.clone()
        x.grad, ref.weight.grad = None, None
        full = ref(x)
        full.square().sum().backward()
        row = {"recipe": name, "out_vs_twin": error_metrics(twin, out.detach())["rel_error"],
               "out_vs_fp32": error_metrics(full.detach(), out.detach())["rel_error"],
               "grad_x_vs_fp32": error_metrics(x.grad, grad_x)["rel_error"],
               "grad_w_vs_fp32": error_metrics(ref.weight.grad, grad_w)["rel_error"]}
        tol_twin = TOL_VS_DEQUANT[layer.config.recipe.granularity.value]
        ok = row["out_vs_twin"] <= tol_twin and max(row["out_vs_fp32"], row["grad_x_vs_fp32"],
                                                    row["grad_w_vs_fp32"]) <= 2 * TOL_VS_FULL
        rows.append(row | {"check": "PASS" if ok else "FAIL"})
    return pd.DataFrame(rows)
