"""The attention tolerance table and the checks every timed attention call carries.

Legend: B batch, H heads, S sequence length, D head dim.
Errors are kernel_lib.checks' rel_error: max |out - ref| / max |ref| against the fp64 dense
reference of the same inputs (reference.py), so rounding of the inputs themselves is not counted.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import torch

from kernel_lib import records as rec
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import (
    output_rows,
    reference_grads,
    reference_output,
    reference_rows,
)
from kernel_lib.checks import Check, Tolerance, against

# (mode, dtype) -> bound on rel_error. u = unit roundoff: fp32 6e-8, fp16 4.9e-4, bf16 3.9e-3.
TOLERANCES = {
    ("forward", "float32"): Tolerance(
        1e-5, "fp32 softmax sums and P.V over S <= 16k keys: ~sqrt(S) u = 8e-6 worst case"),
    ("forward", "float16"): Tolerance(
        4e-3, "P rounded to fp16 before P.V (u) plus the output's rounding (u): 8 u with margin"),
    ("forward", "bfloat16"): Tolerance(
        3e-2, "naive bf16 rounds scores |s| <= 8 to 2^-5 before exp: ~1 % per weight, x3 margin"),
    ("forward_backward", "float32"): Tolerance(
        1e-4, "dq, dk, dv sum S products of recomputed P: 10x the forward bound"),
    ("forward_backward", "float16"): Tolerance(
        1e-2, "dP, dS rounded to fp16 (u each) summed over S keys: ~20 u"),
    ("forward_backward", "bfloat16"): Tolerance(
        6e-2, "dP, dS rounded to bf16 (u each) summed over S keys: 2x the forward bound"),
}  # fmt: skip


def tolerance(mode: str, dtype: str) -> Tolerance:
    """The bound of (mode, dtype) from TOLERANCES; ValueError naming the valid pairs."""
    if (mode, dtype) not in TOLERANCES:
        valid = list(TOLERANCES)
        raise ValueError(f"(mode, dtype)={(mode, dtype)!r} has no tolerance; valid: {valid}")
    return TOLERANCES[(mode, dtype)]


def rows_check(
    reference: Callable[[], torch.Tensor], rows: torch.Tensor | None, *, name: str, dtype: str
) -> Callable[[torch.Tensor], Check]:
    """Check of a (B, H, S, ·) output against reference(), the fp64 output on query `rows` only
    (None: all rows), built once, lazily."""
    where = "all rows" if rows is None else f"{len(rows)} sampled rows"
    compare = against(
        reference, reference=f"fp64 dense {name} ({where})", tolerance=tolerance("forward", dtype)
    )
    return lambda out: compare(output_rows(out, rows))


def forward_check(config: PatternConfig, q, k, v) -> Callable[[torch.Tensor], Check]:
    """Check of a (B, H, S, D) output of `config` on q, k, v against the fp64 reference (all
    query rows up to S=1024, a fixed sample of rows above)."""
    rows = reference_rows(q.shape[-2])
    return rows_check(
        lambda: reference_output(q, k, v, config, rows=rows), rows, name=config.name,
        dtype=_dtype(q),
    )  # fmt: skip


def backward_check(config: PatternConfig, q, k, v, grad_out) -> Callable[[tuple], Check]:
    """Check of (dq, dk, dv) of sum(out * grad_out) against fp64 reference gradients."""
    return against(
        lambda: reference_grads(q, k, v, grad_out, config),
        reference=f"fp64 dense {config.name} gradients (all rows)",
        tolerance=tolerance("forward_backward", _dtype(q)),
    )


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


_CHECKED_MODES = ("forward", "forward_backward", "first_call")


def _checked(records: list[rec.Record]) -> pd.DataFrame:
    frame = rec.to_frame(records)
    return frame[frame["status"].isin(("ok", "wrong")) & frame["mode"].isin(_CHECKED_MODES)]


def correctness_table(records: list[rec.Record]) -> pd.DataFrame:
    """PASS/FAIL per case (rows) and implementation (columns) of every checked record; '-' where
    it did not run. Stable across machines (no error digits). A FAIL does not stop the notebook:
    its records are saved, and the runner fails the notebook for every `wrong` one."""
    frame = _checked(records)
    frame = frame.assign(result=frame["check.pass"].map({True: "PASS", False: "FAIL"}))
    table = frame.pivot_table(
        index=["case", "mode"],
        columns="implementation",
        values="result",
        aggfunc="first",
        sort=False,
    )
    return table.fillna("-")


def error_table(records: list[rec.Record]) -> pd.DataFrame:
    """rel_error and its bound of every checked record (digits vary by CPU: not for nbval)."""
    frame = _checked(records)
    columns = [
        "case",
        "mode",
        "implementation",
        "check.rel_error",
        "check.tolerance",
        "check.reference",
    ]
    return frame[columns].reset_index(drop=True)
