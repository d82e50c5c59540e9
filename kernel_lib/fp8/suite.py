"""The fp8 topic's suite: its sections in the notebook's order. Each notebook cell runs one by name
(`SUITE.run("linear_speed", ctx)`); `python -m kernel_lib bench fp8` runs them all (`run_suite`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pandas as pd

from kernel_lib import records as rec
from kernel_lib.checks import Unsupported
from kernel_lib.fp8 import bench, bench_blocks, bench_weight_only, checks
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.inference import InferenceComparison
from kernel_lib.fp8.linear import scaled_mm_unsupported
from kernel_lib.fp8.shapes import GemmShape
from kernel_lib.fp8.training import loss_checks
from kernel_lib.measure import Case, check_table_records
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.suite import Context, Section, Suite, Table

TOPIC = "fp8"
MM_CHECK_GRANULARITIES = ["tensorwise", "rowwise"]  # the scale layouts _scaled_mm is checked in
LINEAR_CHECK_RECIPES = ["tensorwise_dynamic", "rowwise_dynamic", "tensorwise_delayed"]
# Fp8Linear's check input: (batch, seq, in_features) -> out_features, 3-D as a model feeds it
LINEAR_CHECK_SHAPE = {"batch": 3, "seq": 5, "in_features": 64, "out_features": 48}


class Inference(NamedTuple):
    """The converted model's comparison, its records, and why it was skipped (None where it ran;
    then the comparison is None)."""

    comparison: InferenceComparison | None
    records: list[rec.Record]
    skipped: str | None = None


class Training(NamedTuple):
    """The training runs' losses and their `loss_checks` table, their records, and why they were
    skipped (None where they ran; then both tables are None)."""

    losses: pd.DataFrame | None
    checks: pd.DataFrame | None
    records: list[rec.Record]
    skipped: str | None = None


class CheckTable(NamedTuple):
    """How the rows of one correctness table become records (`check_table_records`)."""

    implementation: Callable[[dict], str]  # a row's implementation name
    shape_columns: tuple[str, ...]
    error: str  # the column of its relative error against the fp64 FP8 reference
    reference: str
    metrics: tuple[str, ...]


def _joined(row: dict) -> str:
    """`<implementation>_<recipe>`, or `<implementation>` where the table has no recipe."""
    return "_".join(str(row[c]) for c in ("implementation", "recipe") if c in row)


GEMM = "fp64 FP8 reference (and fp64 of the unquantised inputs)"
ERRORS = ("vs_fp8_reference", "vs_fp64")
CHECK_TABLES = {
    "scaled_mm_check": CheckTable(
        lambda row: f"scaled_mm_{row['granularity']}",
        GemmShape.KEYS,
        "vs_fp8_reference",
        GEMM,
        (*ERRORS, "bf16_vs_fp64"),
    ),
    "linear_check": CheckTable(
        lambda row: f"fp8_linear_{row['recipe']}",
        (),
        "out_vs_fp8_reference",
        "fp64 FP8 reference (and nn.Linear in fp32: output, input and weight gradients)",
        ("out_vs_fp8_reference", "out_vs_fp32", "grad_x_vs_fp32", "grad_w_vs_fp32"),
    ),
    "block_gemm_check": CheckTable(_joined, GemmShape.KEYS, "vs_fp8_reference", GEMM, ERRORS),
    "grouped_gemm_check": CheckTable(_joined, ("T", "E"), "vs_fp8_reference", GEMM, ERRORS),
}


def check_records(
    table: pd.DataFrame, facts: DeviceFacts, config: Fp8BenchConfig, *, case: str
) -> list[rec.Record]:
    """One record per row of the correctness table `case` (a key of CHECK_TABLES): `skipped` or
    `failed` with its reason, `wrong` where its check failed, else untimed with its check
    (error against the fp64 FP8 reference) carried."""
    spec, shape = CHECK_TABLES[case], {}
    if case == "linear_check":  # no shape columns: the shape it was called with
        shape = LINEAR_CHECK_SHAPE | {"grad_format": config.grad_format}
    return check_table_records(
        table,
        Case(TOPIC, case, shape, f"float8_{config.linear_format}"),
        facts=facts,
        implementation=spec.implementation,
        reference=spec.reference,
        error=spec.error,
        shape_columns=spec.shape_columns,
        metrics=spec.metrics,
    )


def _checked(ctx: Context[Fp8BenchConfig], case: str, table: pd.DataFrame) -> Table:
    return Table(table, check_records(table, ctx.facts, ctx.config, case=case))


def recipe_errors(ctx: Context[Fp8BenchConfig]) -> Table:
    table = bench_blocks.recipe_errors(ctx.config)
    return Table(table, bench_blocks.recipe_error_records(table, ctx.facts, ctx.config))


def scaled_mm_check(ctx: Context[Fp8BenchConfig]) -> Table:
    config = ctx.config
    table = checks.scaled_mm_check(
        [GemmShape.ragged(n) for n in config.check_sizes],
        granularities=MM_CHECK_GRANULARITIES,
        fmt=config.linear_format,
        device=ctx.facts.device,
        seed=config.seed,
    )
    return _checked(ctx, "scaled_mm_check", table)


def linear_check(ctx: Context[Fp8BenchConfig]) -> Table:
    config = ctx.config
    table = checks.linear_check(
        recipes=LINEAR_CHECK_RECIPES,
        fmt=config.linear_format,
        grad_dtype=config.grad_format,
        device=ctx.facts.device,
        seed=config.seed,
        **LINEAR_CHECK_SHAPE,
    )
    return _checked(ctx, "linear_check", table)


def block_gemm_check(ctx: Context[Fp8BenchConfig]) -> Table:
    table = bench_blocks.block_checks(ctx.config, device=ctx.facts.device)
    return _checked(ctx, "block_gemm_check", table)


def grouped_gemm_check(ctx: Context[Fp8BenchConfig]) -> Table:
    table = bench_blocks.grouped_checks(ctx.config, device=ctx.facts.device)
    return _checked(ctx, "grouped_gemm_check", table)


def quantize_bandwidth(ctx: Context[Fp8BenchConfig]) -> list[rec.Record]:
    return bench.quantize_bandwidth(ctx.config, ctx.facts, progress=ctx.progress)


def linear_speed(ctx: Context[Fp8BenchConfig]) -> list[rec.Record]:
    return bench.linear_speed(ctx.config, ctx.facts, progress=ctx.progress)


def block_linear_speed(ctx: Context[Fp8BenchConfig]) -> list[rec.Record]:
    return bench_blocks.block_linear_speed(ctx.config, ctx.facts)


def grouped_gemm_speed(ctx: Context[Fp8BenchConfig]) -> list[rec.Record]:
    return bench_blocks.grouped_gemm_speed(ctx.config, ctx.facts)


def weight_only_speed(ctx: Context[Fp8BenchConfig]) -> list[rec.Record]:
    return bench_weight_only.weight_only_speed(ctx.config, ctx.facts)


def _with_fp8_linears(facts: DeviceFacts, run: Callable):
    """(run(), None) where FP8 linears run on the device, else (None, the reason): the probe's,
    or that of a call oneDNN refused on the way (`Unsupported`)."""
    try:
        if reason := scaled_mm_unsupported(facts.device):
            raise Unsupported(reason)
        return run(), None
    except Unsupported as why:
        return None, str(why)


def inference(ctx: Context[Fp8BenchConfig]) -> Inference:
    config, facts = ctx.config, ctx.facts
    comparison, reason = _with_fp8_linears(
        facts, lambda: bench.inference_comparison(config, device=facts.device)
    )
    if reason:
        return Inference(None, bench.skipped_section(config, facts, "inference", reason), reason)
    return Inference(comparison, bench.inference_records(comparison, facts, config))


def training(ctx: Context[Fp8BenchConfig]) -> Training:
    config, facts = ctx.config, ctx.facts
    losses, reason = _with_fp8_linears(
        facts, lambda: bench.training_losses(config, device=facts.device, progress=ctx.progress)
    )
    if reason:
        return Training(
            None, None, bench.skipped_section(config, facts, "training", reason), reason
        )
    table = loss_checks(losses)
    return Training(losses, table, bench.training_records(table, facts, config))


# The headline (linear_speed) right after the checks of the kernels it times, before the sections
# that first call other kernels (block-scaled and grouped `_scaled_mm`): a sticky CUDA fault in one
# of those (an illegal address poisons the context) fails every section after it.
SUITE = Suite(TOPIC, (
    Section("recipe_errors", recipe_errors, "SQNR and max error per scaling recipe and tensor"),
    Section("scaled_mm_check", scaled_mm_check, "_scaled_mm per shape and granularity: checks"),
    Section("linear_check", linear_check, "Fp8Linear per recipe, forward and grads: checks"),
    Section("linear_speed", linear_speed, "bf16 and FP8 linear forward per n, comparators"),
    Section("quantize_bandwidth", quantize_bandwidth, "quantisers' GB/s vs an fp32 copy"),
    Section("block_gemm_check", block_gemm_check, "block-scaled GEMMs, split-K twins: checks"),
    Section("grouped_gemm_check", grouped_gemm_check, "grouped GEMM, per-expert loop: checks"),
    Section("block_linear_speed", block_linear_speed, "block-scaled linear vs bf16 per n"),
    Section("grouped_gemm_speed", grouped_gemm_speed, "FP8 grouped GEMM vs bf16 grouped_mm"),
    Section("weight_only_speed", weight_only_speed, "W8A16 linear vs bf16, decode and prefill"),
    Section("inference", inference, "weight bytes and output error, bf16 and FP8 model"),
    Section("training", training, "per seed and run: losses, learned and tracks bf16"),
))  # fmt: skip


def run_suite(params: dict, *, progress: bool = False) -> list[rec.Record]:
    """Every fp8 record on the detected device: the notebook's sections, in its order."""
    config = Fp8BenchConfig.from_params(params)
    return SUITE.run_all(Context(config, device_facts(), progress=progress))
