"""The fp8 sections' measurements: quantisation bandwidth against copy, FP8 against bf16 linear
speed, inference memory/error and the training check, as records, each from the
`Fp8BenchConfig` (the candidates they time: candidates.py). `kernel_lib.fp8.suite` runs them in
the notebook's order (its cells, and `python -m kernel_lib bench fp8`)."""

from __future__ import annotations

import functools

import pandas as pd
import torch
from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.checks import Check
from kernel_lib.fp8.bench_blocks import declare, with_datasheets
from kernel_lib.fp8.candidates import (
    FP8_PATHS,
    VARIANTS,
    bf16_candidate,
    copy_candidate,
    fp8_candidates,
    fp8_check,
    host,
    linear_plugins,
    quantize_candidates,
)  # fmt: skip
from kernel_lib.fp8.checks import TOLERANCES
from kernel_lib.fp8.comparators import comparator_candidates
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.formats import fp8_dtype
from kernel_lib.fp8.inference import InferenceComparison, compare_inference
from kernel_lib.fp8.linear import Fp8LinearConfig, scaled_mm_unsupported
from kernel_lib.fp8.shapes import GemmShape, bf16_operands
from kernel_lib.fp8.training import make_model, run_names, training_runs
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.platform import DeviceFacts
from kernel_lib.variants import choose

TOPIC = "fp8"
QUANT_K = 4096  # row length of the bandwidth inputs


def _skip(
    case: Case, implementation: str, reason: str, facts: DeviceFacts, dtype: str | None = None
) -> rec.Record:
    return rec.skipped(
        TOPIC,
        case.case,
        implementation,
        reason,
        facts=facts,
        dtype=dtype or case.dtype,
        shape=case.shape,
        mode=case.mode,
    )


def quantize_bandwidth(
    config: Fp8BenchConfig, facts: DeviceFacts, *, progress: bool = False
) -> list[rec.Record]:
    """Per size, one interleaved `compare`: fp32 `copy_` into a preallocated tensor (baseline,
    checked dst == src) and every quantiser per granularity of fp32 (rows, 4096) -> linear_format,
    the `fp8.quantize` plug-ins' too (checked bit-exact, bytes and scales, against the fp64
    reference). Bytes: x read once + FP8 written once + scales (a two-pass kernel's re-read shows
    as lower GB/s); fraction_of_peak is GB/s over the copy's GB/s. The variants (VARIANTS) are
    timed side by side and the one to use here is chosen by measurement (`variants.choose`,
    cached per machine; never a plug-in): the headline is that one over copy at the largest
    size, for the first granularity."""
    fmt, records, headline = config.linear_format, [], None
    torch.manual_seed(config.seed)
    for size in tqdm(config.quant_mib, disable=not progress, desc="quantize bandwidth"):
        rows = max(1, int(size * 2**20) // 4 // QUANT_K)  # a size may be a fraction
        x = torch.randn(rows, QUANT_K, device=facts.device)
        dst, out = (
            torch.empty_like(x),
            torch.empty(x.shape, dtype=fp8_dtype(fmt), device=facts.device),
        )
        case = Case(TOPIC, "quantize", {"MiB": size, "rows": rows, "K": QUANT_K}, dtype="float32")
        candidates = [copy_candidate(x, dst)]
        for gran in config.quant_granularities:
            for name, c in quantize_candidates(facts, gran, fmt, x, out):
                candidates.append(_skip(case, name, c, facts) if isinstance(c, str) else c)
        got = check_then_time(
            case,
            candidates,
            facts=facts,
            baseline="copy",
            min_time_s=config.min_time_s,
            progress="quantize" if progress else None,
        )
        for gran in config.quant_granularities:
            among = tuple(f"{v}_{gran}" for v in VARIANTS)
            choice, got = choose(
                f"fp8_quantize_{gran}",
                case,
                got,
                facts=facts,
                among=among,
                comparator=f"plain_compiled_quantize_{gran}",
            )
            if size == max(config.quant_mib) and gran == config.quant_granularities[0]:
                headline = choice
        copy = got[0]
        basis = "fp32 copy_ into a preallocated tensor, timed in alternation with it"
        records += [
            rec.with_peak(r, copy.gbps, basis=basis, rate="gbps") if r is not copy else r
            for r in got
        ]
    if headline is None:
        return records
    return declare(
        records,
        headline,
        {"MiB": max(config.quant_mib)},
        "fp8.quantize_vs_copy",
    )


def linear_speed(
    config: Fp8BenchConfig, facts: DeviceFacts, *, progress: bool = False
) -> list[rec.Record]:
    """Forward of an n x n x n linear per n (x: (n, n) bf16, W: (n, n)) in one interleaved
    `compare`: bf16 `F.linear` (baseline, against fp64), per recipe the FP8 paths of
    `fp8_candidates` and the `fp8.linear` plug-ins (`linear_plugins`, checked alike), and the
    comparators. FP8 paths are timed wherever `_scaled_mm` runs (a CPU's oneDNN included:
    measured, whatever the device); where its probe raised ours are `skipped` with that reason.
    Timed records carry fraction_of_datasheet where the device has a datasheet figure for their
    dtype (`bench_blocks.with_datasheets`). Headline: fp8_linear of the first recipe (fp32
    accumulation, no use_fast_accum) against bf16 at the largest n."""
    reason = scaled_mm_unsupported(facts.device)
    records = []
    for n in tqdm(config.gemm_sizes, disable=not progress, desc="linear speed"):
        shape = GemmShape.square(n)
        x, w = bf16_operands(shape, device=facts.device, seed=config.seed)
        case = Case(TOPIC, "linear_forward", shape.as_dict(), dtype="bfloat16", mode="forward")
        full = functools.cache(lambda x=x, w=w: host(x).double() @ host(w).double().t())
        candidates = [bf16_candidate(x, w, full, shape.flops)]
        fp8 = f"float8_{config.linear_format}"
        for recipe in config.recipes:
            check = fp8_check(config, recipe, x, w)
            if reason is None:
                candidates += fp8_candidates(config, recipe, x, w, facts, check)
            else:
                candidates += [
                    _skip(case, f"{path}_{recipe}", reason, facts, dtype=fp8) for path in FP8_PATHS
                ]
            candidates += linear_plugins(config, recipe, x, w, check)
        for name, c in comparator_candidates(x, w, full).items():
            candidates.append(
                c if isinstance(c, Candidate) else _skip(case, name, c, facts, dtype="float8")
            )
        records += check_then_time(
            case,
            candidates,
            facts=facts,
            baseline="bf16_linear",
            min_time_s=config.min_time_s,
            progress=f"linear n={n}" if progress else None,
        )
    headline = f"fp8_linear_{config.recipes[0]}"
    largest = GemmShape.square(max(config.gemm_sizes)).as_dict()
    return declare(with_datasheets(records, facts), headline, largest, "fp8.linear_vs_bf16")


def section_fields(config: Fp8BenchConfig, case: str) -> list[tuple[str, dict]]:
    """(implementation, dtype and shape) of each record of the 'inference' or 'training' section:
    the same whether it ran or was skipped, so `compare` matches them across runs and devices."""
    shape = {
        "D": config.model_dim,
        "F": config.model_ffn,
        "layers": config.model_layers,
        "rows": config.train_batch * config.model_seq,
    }
    fp8 = f"float8_{config.linear_format}"
    if case == "inference":
        return [
            ("bf16_model", {"dtype": "bfloat16", "shape": dict(shape)}),
            ("fp8_model", {"dtype": fp8, "shape": dict(shape)}),
        ]
    trained = shape | {"steps": config.train_steps}
    grads = {"grad_format": config.grad_format}
    return [
        (run, {"dtype": "bfloat16", "shape": trained | {"seed": seed}})
        if run == "bf16"
        else (run, {"dtype": fp8, "shape": trained | {"seed": seed} | grads})
        for seed in config.seeds
        for run in run_names(config.train_recipes)
    ]


def training_text(config: Fp8BenchConfig) -> str:
    """The training section's model and run sizes at the first seed, as its record_id gives
    them: the training curves' title."""
    (_, first), *_ = section_fields(config, "training")
    return rec.shape_key(first["shape"])


def skipped_section(
    config: Fp8BenchConfig, facts: DeviceFacts, case: str, reason: str
) -> list[rec.Record]:
    """Every record of a notebook section that needs FP8 linears, on a device that has none."""
    return [
        rec.skipped(TOPIC, case, implementation, reason, facts=facts, **fields)
        for implementation, fields in section_fields(config, case)
    ]


def inference_comparison(config: Fp8BenchConfig, *, device: str) -> InferenceComparison:
    """The student MLP of the training check (untrained, seeded) converted for inference with
    the first speed recipe, on one seeded batch."""
    cfg = config.train_config()
    model, _ = make_model(cfg, device=device)
    inputs = torch.randn(cfg.rows, cfg.dim, generator=torch.Generator().manual_seed(cfg.seed)).to(
        device
    )
    lin = Fp8LinearConfig.from_recipe_name(config.recipes[0], fmt=config.linear_format)
    return compare_inference(model, inputs, config=lin)


def inference_records(
    comparison: InferenceComparison, facts: DeviceFacts, config: Fp8BenchConfig
) -> list[rec.Record]:
    """Weight memory (from tensor storage) and output error of the bf16 and FP8-converted model."""
    c = comparison
    fields = dict(section_fields(config, "inference"))
    common = {"converted": len(c.report.converted), "not_converted": len(c.report.not_converted)}
    fp8 = {
        "weight_bytes": c.fp8_weight_bytes,
        "weight_bytes_vs_bf16": c.fp8_weight_bytes / c.bf16_weight_bytes,
        **{f"{k}_vs_bf16": v for k, v in c.error_vs_bf16.items()},
        **c.error_vs_fp32,
        **common,
    }
    return [
        rec.info(
            TOPIC,
            "inference",
            "bf16_model",
            facts=facts,
            metrics={"weight_bytes": c.bf16_weight_bytes, **c.bf16_error_vs_fp32, **common},
            **fields["bf16_model"],
        ),
        rec.info(TOPIC, "inference", "fp8_model", facts=facts, metrics=fp8, **fields["fp8_model"]),
    ]


def training_losses(
    config: Fp8BenchConfig, *, device: str, progress: bool = False
) -> pd.DataFrame:
    """The teacher-student losses of bf16 and each training recipe, per seed (training_runs)."""
    return training_runs(
        config.train_config(),
        recipes=list(config.train_recipes),
        seeds=config.seeds,
        fmt=config.linear_format,
        grad_dtype=config.grad_format,
        device=device,
        progress=progress,
    )


def training_records(
    table: pd.DataFrame, facts: DeviceFacts, config: Fp8BenchConfig
) -> list[rec.Record]:
    """One record per (seed, run) of `loss_checks`: its losses as metrics and its check; `wrong`
    where the run did not learn or did not track bf16."""
    learned, tracks = TOLERANCES["learned"], TOLERANCES["tracks_bf16"]
    fields = {(f["shape"]["seed"], run): f for run, f in section_fields(config, "training")}
    records = []
    for row in table.itertuples():
        checks = [
            Check(
                "its own first loss",
                row.final_loss,
                row.final_over_first,
                learned.value,
                "rel_error",
                row.final_over_first <= learned.value,
            ),
            Check(
                "the bf16 run of this seed",
                abs(row.final_loss - row.bf16_final_loss),
                row.gap_vs_bf16,
                tracks.value,
                "rel_error",
                row.gap_vs_bf16 <= tracks.value,
            ),
        ]
        failed = next((c for c in checks if not c.passed), None)
        known = fields[(row.seed, row.run)]
        if failed is not None:
            records.append(rec.wrong(TOPIC, "training", row.run, failed, facts=facts, **known))
            continue
        metrics = {
            "first_loss": row.first_loss,
            "final_loss": row.final_loss,
            "final_over_first": row.final_over_first,
            "gap_vs_bf16": row.gap_vs_bf16,
        }
        records.append(
            rec.info(
                TOPIC,
                "training",
                row.run,
                facts=facts,
                metrics=metrics,
                check=checks[1].as_dict(),
                **known,
            )
        )
    return records
