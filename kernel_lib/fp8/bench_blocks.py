"""Records of the block-scaled and grouped FP8 sections: per-recipe quantisation error, the
block-scaled GEMM and grouped GEMM check tables (their records: `fp8.suite.check_records`), and
their speed against bf16 wherever `_scaled_mm` runs them (sections of `kernel_lib.fp8.suite`).
The speed sections declare their headline (FP8 vs bf16) and carry fraction_of_datasheet where the
device's datasheet has the figure; the error and check tables carry no subject-vs-baseline figure,
so they declare none."""

from __future__ import annotations

import dataclasses
import functools

import pandas as pd
import torch
import torch.nn.functional as F

from kernel_lib import records as rec
from kernel_lib.checks import against
from kernel_lib.fp8.block_scaled import (
    block_linear,
    quantize_operands,
    recipe_granularities,
    split_k_scaled_mm,
)  # fmt: skip
from kernel_lib.fp8.checks import (
    TOLERANCES,
    block_gemm_check,
    block_tolerances,
    grouped_gemm_check,
)  # fmt: skip
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.grouped import (
    bf16_grouped_mm,
    looped_scaled_mm,
    quantize_experts,
    scaled_grouped_mm,
    skewed_counts,
)  # fmt: skip
from kernel_lib.fp8.linear import scaled_mm_unsupported
from kernel_lib.fp8.numerics import KINDS, recipe_error_table, sample_tensor
from kernel_lib.fp8.reference import fp8_linear_reference, grouped_linear_reference
from kernel_lib.fp8.shapes import GemmShape, bf16_operands
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.platform import DeviceFacts, datasheet_for

TOPIC = "fp8"
NOT_ON_XLA = "torch.compile's Inductor does not target XLA devices"  # a compiled path's skip


def error_tensors(config: Fp8BenchConfig) -> dict[str, torch.Tensor]:
    """The seeded (error_rows, error_rows) sample of every kind in `numerics.KINDS`."""
    shape = (config.error_rows, config.error_rows)
    return {kind: sample_tensor(kind, shape, seed=config.seed) for kind in KINDS}


def recipe_errors(config: Fp8BenchConfig) -> pd.DataFrame:
    """`recipe_error_table` of `error_tensors` in `error_format`."""
    return recipe_error_table(error_tensors(config), fmt=config.error_format)


def recipe_error_records(
    table: pd.DataFrame, facts: DeviceFacts, config: Fp8BenchConfig
) -> list[rec.Record]:
    """One metrics-only record per row of `recipe_errors` (quantisation runs on the CPU)."""
    n = config.error_rows
    return [
        rec.info(
            TOPIC,
            "recipe_error",
            row.granularity,
            facts=facts,
            dtype=f"float8_{config.error_format}",
            shape={"tensor": row.tensor, "rows": n, "cols": n},
            metrics={
                "sqnr_db": row.sqnr_db,
                "max_rel_error": row.max_rel_error,
                "median_row_sqnr_db": row.median_row_sqnr_db,
            },
        )
        for row in table.itertuples()
    ]


def block_checks(config: Fp8BenchConfig, *, device: str) -> pd.DataFrame:
    return block_gemm_check(
        [GemmShape.ragged(n) for n in config.block_check_sizes],
        recipes=list(config.block_recipes),
        fmt=config.linear_format,
        device=device,
        seed=config.seed,
    )


def grouped_counts(config: Fp8BenchConfig) -> list[int]:
    return skewed_counts(config.grouped_tokens, config.grouped_experts, seed=config.seed)


def grouped_checks(config: Fp8BenchConfig, *, device: str) -> pd.DataFrame:
    return grouped_gemm_check(
        grouped_counts(config),
        dim=config.grouped_dim,
        ffn=config.grouped_ffn,
        fmt=config.linear_format,
        device=device,
        seed=config.seed,
    )


def declare(
    records: list[rec.Record], implementation: str, shape: dict, key: str
) -> list[rec.Record]:
    """`records` with the one whose implementation is `implementation` at `shape` (a subset of
    its shape) declared the headline `key`; where it ran but its baseline did not (no ratio to
    show), it is flagged instead."""

    def match(r):
        return r.implementation == implementation and all(
            r.shape.get(k) == v for k, v in shape.items()
        )

    def declared(r):
        if r.status == "ok" and r.ratio_vs_baseline is None and r.fraction_of_peak is None:
            why = f"headline {key} has no figure: its baseline was not timed ok"
            return dataclasses.replace(r, flags=r.flags + (why,))
        return rec.as_headline(r, key)

    return [declared(r) if match(r) else r for r in records]


def with_datasheets(records: list[rec.Record], facts: DeviceFacts) -> list[rec.Record]:
    """`records` with fraction_of_datasheet: TFLOP/s over the device's dense datasheet peak for
    their dtype (FP8 for float8*, bf16 for bfloat16), where `platform.DATASHEETS` lists one
    (none for a CPU). Untimed records and other dtypes stay as they are."""
    sheet = datasheet_for(facts.name)
    if sheet is None:
        return records
    peaks = {"FP8": sheet.fp8_tflops, "bf16": sheet.bf16_tflops}
    out = []
    for r in records:
        dtype = r.dtype or ""
        kind = "FP8" if dtype.startswith("float8") else "bf16" if dtype == "bfloat16" else None
        basis = f"datasheet: {sheet.source}, {kind} {peaks.get(kind)} TFLOP/s"
        out.append(rec.with_datasheet(r, peaks.get(kind), basis=basis))
    return out


def _skip(case: Case, name: str, reason: str, facts: DeviceFacts, fmt: str) -> rec.Record:
    return rec.skipped(
        TOPIC,
        case.case,
        name,
        reason,
        facts=facts,
        dtype=f"float8_{fmt}",
        shape=case.shape,
        mode=case.mode,
    )


def block_linear_speed(config: Fp8BenchConfig, facts: DeviceFacts) -> list[rec.Record]:
    """Forward of an n x n x n linear per n of block_sizes in one interleaved `compare`: bf16
    `F.linear` (baseline) and per block recipe `block_linear_<recipe>` (both operands quantised
    per call, one block-scaled `_scaled_mm`; skipped where the device refuses the layout) and
    `split_k_scaled_mm_<recipe>` on pre-quantised operands (timed wherever `_scaled_mm` runs).
    Headline: block_linear of the first recipe against bf16 at the largest n (on a device that
    refuses the layout, its record says why)."""
    fmt, refused, records = config.linear_format, scaled_mm_unsupported(facts.device), []
    for n in config.block_sizes:
        shape = GemmShape.square(n)
        x, w = bf16_operands(shape, device=facts.device, seed=config.seed)
        case = Case(TOPIC, "block_linear", shape.as_dict(), "bfloat16", "forward")
        full = functools.cache(lambda x=x, w=w: x.double() @ w.double().t())
        flops = shape.flops
        candidates = [
            Candidate(
                "bf16_linear",
                lambda x=x, w=w: F.linear(x, w),
                flops=flops,
                check=against(
                    full, reference="fp64 of the bf16 inputs", tolerance=TOLERANCES["bf16_out"]
                ),
            )
        ]
        for recipe in config.block_recipes:
            gran_x, gran_w = (g.value for g in recipe_granularities(recipe))
            reference = functools.cache(
                lambda x=x, w=w, gx=gran_x, gw=gran_w: fp8_linear_reference(
                    x, w, fmt=fmt, granularity=gx, weight_granularity=gw
                )
            )
            label = f"fp64 FP8 reference ({fmt} {recipe}) at M=K=N={n}"
            native_tol, _ = block_tolerances(recipe, torch.bfloat16, x.device)
            candidates.append(
                Candidate(
                    f"block_linear_{recipe}",
                    # nonfinite="nan": no host sync in the timed call; the check sees any NaN
                    lambda x=x, w=w, r=recipe: block_linear(
                        x, w, recipe=r, fmt=fmt, nonfinite="nan"
                    ),
                    dtype=f"float8_{fmt}",
                    flops=flops,
                    check=against(reference, reference=label, tolerance=native_tol),
                )
            )
            name = f"split_k_scaled_mm_{recipe}"
            if refused:
                candidates.append(_skip(case, name, refused, facts, fmt))
                continue
            qx, qw = quantize_operands(x, w, recipe=recipe, fmt=fmt)
            split_tol, _ = block_tolerances(recipe, torch.float32, x.device)
            candidates.append(
                Candidate(
                    name,
                    lambda qx=qx, qw=qw: split_k_scaled_mm(qx, qw),
                    dtype=f"float8_{fmt}",
                    flops=flops,
                    check=against(reference, reference=label, tolerance=split_tol),
                )
            )
        records += check_then_time(
            case, candidates, facts=facts, baseline="bf16_linear", min_time_s=config.min_time_s
        )
    records = with_datasheets(records, facts)
    headline, largest = f"block_linear_{config.block_recipes[0]}", max(config.block_sizes)
    return declare(
        records, headline, GemmShape.square(largest).as_dict(), "fp8.block_linear_vs_bf16"
    )


def grouped_gemm_speed(config: Fp8BenchConfig, facts: DeviceFacts) -> list[rec.Record]:
    """The grouped expert GEMM (T x K by E experts' (N, K) weights, skewed counts, one empty
    expert) in one interleaved `compare`: bf16 `torch._grouped_mm` (baseline, against the fp64
    loop over experts), `scaled_grouped_mm` (rowwise FP8, one `_scaled_grouped_mm`; skipped
    where the device has no kernel) and `looped_scaled_mm` (timed wherever `_scaled_mm` runs);
    FP8 operands quantised beforehand (the GEMM alone). Headline: scaled_grouped_mm against bf16
    (skipped with the reason where the device has no kernel)."""
    fmt, counts, shape = config.linear_format, grouped_counts(config), config.grouped_shape
    gen = torch.Generator().manual_seed(config.seed)
    x = torch.randn(shape.tokens, shape.dim, generator=gen).to(facts.device, torch.bfloat16)
    w = torch.randn(shape.experts, shape.ffn, shape.dim, generator=gen) / shape.dim**0.5
    w = w.to(facts.device, torch.bfloat16)
    case = Case(TOPIC, "grouped_gemm", shape.as_dict(), "bfloat16", "forward")
    full = functools.cache(lambda: grouped_linear_reference(x, w, counts, fmt=None))
    fp8_ref = functools.cache(lambda: grouped_linear_reference(x, w, counts, fmt=fmt))
    qx, qw = quantize_experts(x, w, fmt=fmt)
    flops = shape.flops
    label = f"fp64 FP8 reference loop over experts ({fmt} rowwise), counts={counts}"
    fp8_check = against(fp8_ref, reference=label, tolerance=TOLERANCES["bf16_out"])
    candidates = [
        Candidate(
            "bf16_grouped_mm",
            lambda: bf16_grouped_mm(x, w, counts),
            flops=flops,
            check=against(
                full, reference="fp64 loop over experts", tolerance=TOLERANCES["bf16_out"]
            ),
        ),
        Candidate(
            "scaled_grouped_mm",
            lambda: scaled_grouped_mm(qx, qw, counts),
            dtype=f"float8_{fmt}",
            flops=flops,
            check=fp8_check,
        ),
    ]
    if reason := scaled_mm_unsupported(facts.device):
        candidates.append(_skip(case, "looped_scaled_mm", reason, facts, fmt))
    else:
        candidates.append(
            Candidate(
                "looped_scaled_mm",
                lambda: looped_scaled_mm(qx, qw, counts),
                dtype=f"float8_{fmt}",
                flops=flops,
                check=fp8_check,
            )
        )
    records = check_then_time(
        case, candidates, facts=facts, baseline="bf16_grouped_mm", min_time_s=config.min_time_s
    )
    records = with_datasheets(records, facts)
    return declare(records, "scaled_grouped_mm", {}, "fp8.grouped_gemm_vs_bf16")
