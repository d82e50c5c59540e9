"""`python -m kernel_lib bench fp8`: quantisation bandwidth, FP8 vs bf16 linear speed, inference
memory/error and training losses, as records. The notebook calls these same functions in order."""

from __future__ import annotations

import functools

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm import tqdm

from kernel_lib.fp8.comparators import comparator_records
from kernel_lib.fp8.formats import fp8_dtype
from kernel_lib.fp8.inference import InferenceComparison, compare_inference
from kernel_lib.fp8.linear import (
    Fp8Linear, Fp8LinearConfig, dynamic_quantize, fp8_matmul_support, scaled_mm, scaled_mm_unsupported,
)  # fmt: skip
from kernel_lib.fp8.numerics import error_metrics
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.training import TrainConfig, make_model, training_runs
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.records import Record, failed, measured, skipped, with_baseline, with_peak
from kernel_lib.timing import time_fn, time_interleaved

TOPIC = "fp8"
QUANT_K = 4096  # row length of the bandwidth inputs
LINEAR_TOL = 0.08  # FP8 vs bf16 output, relative: ~2.6 % per e4m3 operand (perf_anchors.md 2.1)


def _info_record(facts: DeviceFacts, case: str, implementation: str, **fields) -> Record:
    """A result that is not a timing (errors, memory, losses): metrics only."""
    return Record(topic=TOPIC, case=case, implementation=implementation, device=facts.name,
                  backend=facts.backend, **fields)


def _quantizers(facts: DeviceFacts, gran: str, fmt: str) -> dict:
    """implementation name -> (callable(x, out) or None, skip reason)."""
    from kernel_lib.fp8.quantize_compiled import compiled_quantize

    built = gran in ("tensorwise", "rowwise")
    gpu = facts.backend in ("nvidia", "amd")
    if gpu:
        triton_reason = "not built for blockwise"
    elif facts.backend == "cpu":
        triton_reason = "Triton kernels need a GPU here; TRITON_INTERPRET=1 runs them in numpy, for correctness only"
    else:
        triton_reason = f"the Triton kernel is built and tested for NVIDIA/AMD GPUs, not {facts.backend}"
    compiled_reason = "not built for blockwise"
    if facts.backend == "xla":
        built, compiled_reason = False, "torch.compile's Inductor does not target XLA devices"
    fused = None
    if gpu and built:
        from kernel_lib.fp8.quantize_triton import fused_quantize

        fused = lambda x, out: fused_quantize(x, fmt=fmt, granularity=gran)  # noqa: E731
    return {
        "quantize": (lambda x, out: quantize(x, fmt=fmt, granularity=gran, nonfinite="nan"), ""),
        "compiled_quantize": ((lambda x, out: compiled_quantize(x, fmt=fmt, granularity=gran, out=out)) if built
                              else None, compiled_reason),
        "fused_quantize": (fused, triton_reason),
    }


def quantize_bandwidth(facts: DeviceFacts, *, mib: list[int], granularities: list[str], fmt: str = "e4m3fn",
                       min_time_s: float = 0.2, progress: bool = False) -> list[Record]:
    """fp32 (rows, 4096) -> `fmt` per granularity and implementation, and fp32 `copy_` of the
    same tensor into a preallocated one, all timed in alternation (`time_interleaved`) so the
    fractions hold on a shared machine. Bytes: x read once + FP8 written once + scales (a
    two-pass kernel's re-read is not counted: it shows as lower GB/s). fraction_of_peak is GB/s
    over the copy's GB/s. Every output is first checked bit-exact against `quantize`."""
    records = []
    for size in tqdm(mib, disable=not progress, desc="quantize bandwidth"):
        if size <= 0:
            raise ValueError(f"mib={size} must be > 0")
        rows = max(1, size * 2**20 // 4 // QUANT_K)
        x = torch.randn(rows, QUANT_K, device=facts.device)
        n = x.numel()
        dst = torch.empty_like(x)
        out = torch.empty(x.shape, dtype=fp8_dtype(fmt), device=facts.device)
        shape = {"MiB": size, "rows": rows, "K": QUANT_K}
        timed = {("copy", "torch_copy"): lambda: dst.copy_(x)}
        results = []  # (case, implementation, record or None until timed), in report order
        scale_bytes = {}
        for gran in granularities:
            case = f"quantize_{gran}"
            reference = quantize(x, fmt=fmt, granularity=gran, nonfinite="nan")
            expected, scale_bytes[case] = reference.data.view(torch.uint8), 4.0 * reference.scale.numel()
            for name, (fn, reason) in _quantizers(facts, gran, fmt).items():
                result = None
                if fn is None:
                    result = skipped(TOPIC, case, name, reason, facts=facts, dtype="float32", shape=shape)
                elif not torch.equal(got := fn(x, out).data.view(torch.uint8), expected):
                    result = failed(TOPIC, case, name, f"{int((got != expected).sum())} bytes differ from quantize",
                                    facts=facts, dtype="float32", shape=shape)
                else:
                    timed[case, name] = functools.partial(fn, x, out)
                results.append((case, name, result))
        timings = time_interleaved(timed, device=facts.device, min_time_s=min_time_s)
        copy = measured(TOPIC, "copy", "torch_copy", timings["copy", "torch_copy"], facts=facts,
                        dtype="float32", shape={"MiB": size}, bytes=8.0 * n)
        records.append(copy)
        for case, name, result in results:
            if result is None:
                result = with_peak(measured(TOPIC, case, name, timings[case, name], facts=facts, dtype="float32",
                                            shape=shape, bytes=5.0 * n + scale_bytes[case]),
                                   copy.gbps, rate="gbps", basis="fp32 copy_ into a preallocated tensor, "
                                   "timed alternately with it")
            records.append(result)
    return records


def skipped_section(facts: DeviceFacts, case: str, reason: str) -> list[Record]:
    """The record of a notebook section that needs FP8 linears, on a device that has none."""
    return [skipped(TOPIC, case, "fp8_model", reason, facts=facts)]


def _emulated_reason(facts: DeviceFacts) -> str | None:
    support = fp8_matmul_support(facts.device)
    if support == "native":
        return None
    if support == "emulated":
        return ("emulated: no FP8 matrix units on this device (torch._scaled_mm runs a reference "
                "emulation, orders of magnitude slower than bf16 mm); checked for correctness, never timed")
    return scaled_mm_unsupported(facts.device)


def linear_speed(facts: DeviceFacts, *, sizes: list[int], recipes: list[str], fmt: str = "e4m3fn",
                 min_time_s: float = 0.2, progress: bool = False) -> list[Record]:
    """Forward of an n x n x n linear (x: (n, n) bf16, W: (n, n)): bf16 `F.linear` (baseline), and
    per recipe the FP8 GEMM alone on pre-quantised operands (`scaled_mm`), with x quantised per
    call and W stored in FP8 (`fp8_inference_linear`), and with both quantised per call as in
    training (`fp8_linear`). FP8 records are `skipped` on devices without FP8 matrix units."""
    reason = _emulated_reason(facts)
    gpu = facts.backend in ("nvidia", "amd")
    records = []
    for n in tqdm(sizes, disable=not progress, desc="linear speed"):
        if n <= 0 or n % 16:
            raise ValueError(f"size n={n} must be a positive multiple of 16")
        shape = {"M": n, "K": n, "N": n}
        x = torch.randn(n, n, device=facts.device, dtype=torch.bfloat16)
        w = torch.randn(n, n, device=facts.device, dtype=torch.bfloat16) / n**0.5
        base = measured(TOPIC, "linear_forward", "bf16_linear", time_fn(lambda: F.linear(x, w), device=facts.device,
                        min_time_s=min_time_s), facts=facts, dtype="bfloat16", shape=shape, flops=2.0 * n**3)
        records.append(base)
        for recipe in recipes:
            names = ("scaled_mm", "fp8_inference_linear", "fp8_linear")
            if reason:
                records += [skipped(TOPIC, "linear_forward", f"{nm}_{recipe}", reason, facts=facts,
                                    dtype=f"float8_{fmt}", shape=shape) for nm in names]
                continue
            config = Fp8LinearConfig.from_recipe_name(recipe, fmt=fmt, quantizer="triton" if gpu else "torch")
            layer = Fp8Linear(n, n, bias=False, config=config, device=facts.device, dtype=torch.bfloat16)
            with torch.no_grad():
                layer.weight.copy_(w)
            qx, qw = dynamic_quantize(x, config), dynamic_quantize(w, config)
            paths = {"scaled_mm": lambda: scaled_mm(qx, qw, out_dtype=torch.bfloat16),
                     "fp8_inference_linear": lambda: scaled_mm(dynamic_quantize(x, config), qw, out_dtype=torch.bfloat16),
                     "fp8_linear": lambda: layer(x)}
            expected = F.linear(x, w)
            for nm, fn in paths.items():
                with torch.no_grad():
                    try:  # cuBLAS/CUTLASS reject some layouts per arch (e.g. rowwise on sm_89, #130359)
                        err = error_metrics(expected, fn())["rel_error"]
                    except RuntimeError as exc:
                        records.append(failed(TOPIC, "linear_forward", f"{nm}_{recipe}", str(exc).splitlines()[0],
                                              facts=facts, dtype=f"float8_{fmt}", shape=shape))
                        continue
                    if not err <= LINEAR_TOL:
                        records.append(failed(TOPIC, "linear_forward", f"{nm}_{recipe}", f"rel error {err:.3g} vs bf16",
                                              facts=facts, dtype=f"float8_{fmt}", shape=shape))
                        continue
                    timing = time_fn(fn, device=facts.device, min_time_s=min_time_s)
                record = measured(TOPIC, "linear_forward", f"{nm}_{recipe}", timing, facts=facts, dtype=f"float8_{fmt}",
                                  shape=shape, flops=2.0 * n**3, metrics={"rel_error_vs_bf16": err})
                records.append(with_baseline(record, base))
    return records


def inference_records(comparison: InferenceComparison, facts: DeviceFacts) -> list[Record]:
    """Weight memory (from tensor storage) and output error of the bf16 and FP8-converted model."""
    c = comparison
    common = {"converted": len(c.report.converted), "not_converted": len(c.report.not_converted)}
    return [
        _info_record(facts, "inference", "bf16_model", dtype="bfloat16",
                     metrics={"weight_bytes": c.bf16_weight_bytes, **c.bf16_error_vs_fp32, **common}),
        _info_record(facts, "inference", "fp8_model", dtype="float8",
                     metrics={"weight_bytes": c.fp8_weight_bytes, "weight_bytes_vs_bf16": c.fp8_weight_bytes / c.bf16_weight_bytes,
                              **{f"{k}_vs_bf16": v for k, v in c.error_vs_bf16.items()},
                              **c.error_vs_fp32, **common}),
    ]


def training_records(frame: pd.DataFrame, facts: DeviceFacts) -> list[Record]:
    """First and last loss (mean of the last 10 steps) per run, and the last as a ratio of bf16's."""
    tail = frame.groupby("run")["loss"].apply(lambda s: s.tail(10).mean())
    records = []
    for run, group in frame.groupby("run", sort=False):
        metrics = {"first_loss": float(group["loss"].iloc[0]), "final_loss": float(tail[run]),
                   "final_vs_bf16": float(tail[run] / tail["bf16"]) if "bf16" in tail else None}
        records.append(_info_record(facts, "training", run, metrics=metrics))
    return records


def train_config(params: dict) -> TrainConfig:
    """The notebook's fp8_model_* / fp8_train_* parameters as a TrainConfig."""
    return TrainConfig(steps=params["fp8_train_steps"], batch=params["fp8_train_batch"], seq=params["fp8_model_seq"],
                       dim=params["fp8_model_dim"], ffn=params["fp8_model_ffn"], layers=params["fp8_model_layers"],
                       seed=params["fp8_seed"])


def inference_comparison(params: dict, *, device: str) -> InferenceComparison:
    """The training model (untrained, seeded) converted for inference on one seeded batch."""
    cfg = train_config(params)
    model, _ = make_model(cfg, device=device)
    tokens = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=torch.Generator().manual_seed(cfg.seed)).to(device)
    config = Fp8LinearConfig.from_recipe_name(params["fp8_recipes"][0], fmt=params["fp8_linear_format"])
    return compare_inference(model, tokens, config=config)


def suite(params: dict, *, progress: bool = False) -> list[Record]:
    """All fp8 records on the detected device (the notebook's timing, inference and training cells)."""
    facts = device_facts()
    records = quantize_bandwidth(facts, mib=params["fp8_quant_mib"], granularities=params["fp8_quant_granularities"],
                                 fmt=params["fp8_linear_format"], min_time_s=params["fp8_min_time_s"], progress=progress)
    speed = linear_speed(facts, sizes=params["fp8_gemm_sizes"], recipes=params["fp8_recipes"],
                         fmt=params["fp8_linear_format"], min_time_s=params["fp8_min_time_s"], progress=progress)
    records += speed
    records += comparator_records(facts, sizes=params["fp8_gemm_sizes"], baselines=speed,
                                  min_time_s=params["fp8_min_time_s"])
    if reason := scaled_mm_unsupported(facts.device):
        return records + skipped_section(facts, "inference", reason) + skipped_section(facts, "training", reason)
    records += inference_records(inference_comparison(params, device=facts.device), facts)
    losses = training_runs(train_config(params), recipes=params["fp8_train_recipes"], fmt=params["fp8_linear_format"],
                           grad_dtype=params["fp8_grad_format"], device=facts.device, progress=progress)
    return records + training_records(losses, facts)
