"""Attention benchmarks: every pattern through compiled flex, each SDPA backend, FlashAttention-2/3
and the naive reference; a window sweep and a sequence-length sweep. Returns records only.

Legend: B batch, H heads, S sequence length, D head dim.
A flex record's ratio_vs_baseline is over the fastest SDPA backend that ran the same case in
the same run; `flops` counts the pairs the pattern allows, metrics.dense_* the full S x S work.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable

import torch
from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.attention.baselines import (
    SDPA_BACKENDS,
    BackendUnavailable,
    attention_naive,
    flash_attention,
    flash_attn_function,
    flash_attn_kwargs,
    sdpa_attention,
    sdpa_inputs,
)
from kernel_lib.attention.checks import (
    TOLERANCE,
    check_patterns,
    max_error,
    output_rows,
    reference_output,
    reference_rows,
)
from kernel_lib.attention.flex import (
    block_sparsity,
    first_call,
    first_calls,
    flex_attention_compiled,
)
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.shapes import (
    BACKWARD_FLOP_FACTOR,
    AttentionShape,
    attention_flops,
    make_qkv,
)
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.timing import time_fn

TOPIC = "attention"
FLEX = "flex_attention_compiled"
# The naive baseline materialises B*H*S*S scores (several copies): skip it above this many bytes.
NAIVE_MAX_SCORE_BYTES = 2 * 2**30
ALL_IMPLEMENTATIONS = ("flex", "sdpa", "flash_attn", "naive")
SHAPE_KEYS = ("batch", "heads", "seq_len", "head_dim")


def shape_from_params(params: dict, *, seq_len: int | None = None) -> AttentionShape:
    return AttentionShape(
        batch=params["attn_batch"],
        heads=params["attn_heads"],
        seq_len=seq_len or params["attn_seq_len"],
        head_dim=params["attn_head_dim"],
        dtype=params["attn_dtype"],
    )


def pattern_config(name: str, params: dict, **overrides) -> PatternConfig:
    """PatternConfig of `name` from the notebook's attn_* parameters."""
    fields = {
        "window": params["attn_window"],
        "prefix_len": params["attn_prefix_len"],
        "num_docs": params["attn_num_docs"],
        "dilation": params["attn_dilation"],
        "num_global": params["attn_num_global"],
        "softcap": params["attn_softcap"],
    }
    return PatternConfig(name, **{**fields, **overrides})


def pattern_configs(params: dict) -> list[PatternConfig]:
    return [pattern_config(name, params) for name in params["attn_patterns"]]


def _implementations(config: PatternConfig, shape: AttentionShape, q, wanted) -> dict:
    """implementation name -> call(q, k, v), or the BackendUnavailable saying why not."""
    calls: dict[str, Callable | BackendUnavailable] = {}
    S, H = shape.seq_len, shape.heads
    if "sdpa" in wanted:
        try:
            kwargs = sdpa_inputs(config, S, H, dtype=q.dtype, device=q.device)
            for name in SDPA_BACKENDS:
                calls[name] = partial(sdpa_attention, backend=name, sdpa_kwargs=kwargs)
        except BackendUnavailable as why:
            calls.update(dict.fromkeys(SDPA_BACKENDS, why))
    if "flash_attn" in wanted:
        for version in ("flash_attn_2", "flash_attn_3"):
            try:
                flash_attn_function(version)  # "not installed" comes before "cannot express"
                kwargs = flash_attn_kwargs(config, H, q.device)
                calls[version] = partial(flash_attention, version=version, fa_kwargs=kwargs)
            except BackendUnavailable as why:
                calls[version] = why
    if "naive" in wanted:
        score_bytes = 3 * shape.batch * H * S * S * q.element_size()
        calls["attention_naive"] = (
            BackendUnavailable(f"would materialise {score_bytes / 2**30:.1f} GiB of scores")
            if score_bytes > NAIVE_MAX_SCORE_BYTES
            else partial(attention_naive, config=config)
        )
    return calls


def time_case(
    case: str,
    config: PatternConfig,
    shape: AttentionShape,
    *,
    facts: DeviceFacts,
    block_size: int,
    reps: int,
    implementations=ALL_IMPLEMENTATIONS,
    section: str = "patterns",
) -> list[rec.Record]:
    """Forward records of one case: flex (compile timed apart), the baselines, ratios.

    Each output is checked against the fp64 reference (sampled query rows above S=1024) before
    it is timed; a wrong answer gives a `failed` record, running out of memory a `skipped` one.
    Flex's compile time (first call, logged by flex.py, minus a steady call) goes in
    metrics.compile_s with the graphs it added (0 = an existing kernel was reused).
    """
    device = facts.device
    qkv = make_qkv(shape, device=device, seed=0)
    rows = reference_rows(shape.seq_len)
    ref = reference_output(*qkv, config, rows=rows)
    needed, dense = attention_flops(config, shape)
    common = {
        "facts": facts,
        "dtype": shape.dtype,
        "shape": {**shape.as_dict(), "window": config.window},
    }
    calls = _implementations(config, shape, qkv[0], implementations)
    out = []
    if "flex" in implementations:
        flex = partial(flex_attention_compiled, config=config, block_size=block_size)
        calls = {FLEX: flex, **calls}
    for name, call in calls.items():
        if isinstance(call, BackendUnavailable):
            out.append(rec.skipped(TOPIC, case, name, str(call), **common))
            continue
        try:
            error = max_error(output_rows(call(*qkv), rows), ref)
        except (BackendUnavailable, torch.OutOfMemoryError) as why:
            reason = str(why).split("\n")[0][:300]
            if isinstance(why, torch.OutOfMemoryError):
                reason = f"out of memory: {reason}"
                torch.cuda.empty_cache()
            out.append(rec.skipped(TOPIC, case, name, reason, **common))
            continue
        if error > TOLERANCE[shape.dtype]:
            out.append(rec.failed(TOPIC, case, name, f"max error {error:.2e} vs fp64", **common))
            continue
        timing = time_fn(partial(call, *qkv), device=device, warmup=1, reps=reps)
        metrics = {
            "section": section,
            "max_error": error,
            "dense_flops": dense,
            "dense_tflops": dense / timing.median_ms / 1e9,
            "needed_fraction": needed / dense,
        }
        if name == FLEX:
            metrics.update(_flex_metrics(config, qkv[0], block_size, timing))
        out.append(
            rec.measured(TOPIC, case, name, timing, flops=needed, metrics=metrics, **common)
        )
    return _with_best_sdpa(out)


def _flex_metrics(config: PatternConfig, q, block_size: int, timing) -> dict:
    """Block sparsity, and compile time = first call (logged by flex) minus a steady call."""
    first = first_call(config, q, block_size=block_size)
    return {
        "block_size": block_size,
        "block_sparsity_%": block_sparsity(
            config, q.shape[-2], block_size=block_size, device=q.device
        ),
        "first_call_s": first.timing.median_ms / 1e3,
        "compile_s": max(first.timing.median_ms - timing.median_ms, 0.0) / 1e3,
        "new_graphs": first.new_graphs,
    }


def compile_records(facts: DeviceFacts) -> list[rec.Record]:
    """One record per flex first call of this process: compile + one run, timed alone."""
    return [
        rec.measured(
            TOPIC,
            f"{call.pattern}_first_call",
            FLEX,
            call.timing,
            facts=facts,
            dtype=call.dtype,
            shape=dict(zip(SHAPE_KEYS, call.shape)),
            metrics={
                "section": "compile",
                "new_graphs": call.new_graphs,
                "block_size": call.block_size,
            },
        )
        for call in first_calls()
    ]


def _with_best_sdpa(records: list[rec.Record]) -> list[rec.Record]:
    """ratio_vs_baseline over the fastest SDPA backend that ran (none ran: left empty)."""
    sdpa = [r for r in records if r.implementation in SDPA_BACKENDS and r.status == "ok"]
    if not sdpa:
        return records
    best = min(sdpa, key=lambda r: r.median_ms)
    return [
        r if r.implementation in SDPA_BACKENDS else rec.with_baseline(r, best) for r in records
    ]


def time_backward(
    case: str,
    config: PatternConfig,
    shape: AttentionShape,
    *,
    facts: DeviceFacts,
    block_size: int,
    reps: int,
) -> list[rec.Record]:
    """Forward + backward of compiled flex and each SDPA backend (GPU; CPU flex gives skipped)."""
    common = {"facts": facts, "dtype": shape.dtype, "shape": shape.as_dict()}
    qkv = make_qkv(shape, device=facts.device, seed=0, requires_grad=True)
    needed, dense = attention_flops(config, shape)
    factor = 1 + BACKWARD_FLOP_FACTOR
    calls = {FLEX: partial(flex_attention_compiled, config=config, block_size=block_size)}
    calls.update(_implementations(config, shape, qkv[0], ("sdpa",)))
    out = []
    for name, call in calls.items():
        try:
            if isinstance(call, BackendUnavailable):
                raise call
            call(*qkv).sum().backward()  # compiles / checks availability before timing
        except (BackendUnavailable, NotImplementedError) as why:
            out.append(rec.skipped(TOPIC, case, name, str(why), **common))
            continue
        timing = time_fn(
            lambda c=call: c(*qkv).sum().backward(), device=facts.device, warmup=1, reps=reps
        )
        metrics = {
            "section": "backward",
            "dense_flops": dense * factor,
            "dense_tflops": dense * factor / timing.median_ms / 1e9,
        }
        out.append(
            rec.measured(
                TOPIC, case, name, timing, flops=needed * factor, metrics=metrics, **common
            )
        )
    return _with_best_sdpa(out)


def time_patterns(
    shape: AttentionShape,
    configs: list[PatternConfig],
    *,
    facts: DeviceFacts,
    block_size: int,
    reps: int,
    progress: bool = False,
) -> list[rec.Record]:
    """Forward records of every pattern (all implementations), then forward + backward of
    causal (or of the first pattern when causal is not among them)."""
    out = []
    for config in tqdm(configs, desc="patterns", disable=not progress):
        out += time_case(config.name, config, shape, facts=facts, block_size=block_size, reps=reps)
    if configs:
        first = next((c for c in configs if c.name == "causal"), configs[0])
        out += time_backward(
            f"{first.name}_backward", first, shape, facts=facts, block_size=block_size, reps=reps
        )
    return out


def window_sweep(
    shape: AttentionShape,
    base: PatternConfig,
    windows: list[int],
    *,
    facts: DeviceFacts,
    block_size: int,
    reps: int,
    progress: bool = False,
) -> list[rec.Record]:
    """Causal flex vs causal sliding window flex at each window: measured and ideal speedup.

    metrics.speedup_vs_causal = causal flex time / window flex time; metrics.ideal_speedup = the
    ratio of needed FLOPs. Windows are captured as tensors, so the sweep adds no compiles.
    """
    causal = dataclasses.replace(base, name="causal")
    (causal_flex,) = time_case(
        "causal_window_sweep_base",
        causal,
        shape,
        facts=facts,
        block_size=block_size,
        reps=reps,
        implementations=("flex",),
        section="window_sweep",
    )
    out = [causal_flex]
    for window in tqdm(windows, desc="windows", disable=not progress):
        config = dataclasses.replace(base, name="causal_sliding_window", window=window)
        out += [
            _with_speedup(r, causal_flex, window)
            for r in time_case(
                f"causal_sliding_window_w{window}",
                config,
                shape,
                facts=facts,
                block_size=block_size,
                reps=reps,
                implementations=("flex", "sdpa"),
                section="window_sweep",
            )
        ]
    return out


def _with_speedup(record: rec.Record, causal: rec.Record, window: int) -> rec.Record:
    """Add window, speedup_vs_causal and ideal_speedup to a flex record of the window sweep."""
    if record.implementation != FLEX or record.status != "ok" or causal.status != "ok":
        return record
    metrics = {
        **record.metrics,
        "window": window,
        "speedup_vs_causal": causal.median_ms / record.median_ms,
        "ideal_speedup": causal.flops / record.flops,
    }
    return dataclasses.replace(record, metrics=metrics)


def seq_sweep(
    shape: AttentionShape,
    config: PatternConfig,
    seq_lens: list[int],
    *,
    facts: DeviceFacts,
    block_size: int,
    reps: int,
    progress: bool = False,
) -> list[rec.Record]:
    """`config` at each sequence length: flex, every SDPA backend, FlashAttention, naive."""
    out = []
    for seq_len in tqdm(seq_lens, desc="seq lens", disable=not progress):
        sized = dataclasses.replace(shape, seq_len=seq_len)
        out += time_case(
            f"{config.name}_s{seq_len}",
            config,
            sized,
            facts=facts,
            block_size=block_size,
            reps=reps,
            section="seq_sweep",
        )
    return out


def suite(params: dict, *, progress: bool = False) -> list[rec.Record]:
    """The notebook's measurements in its order: check, patterns, windows, lengths, compiles."""
    facts = device_facts()
    shape = shape_from_params(params)
    configs = pattern_configs(params)
    timing = {"facts": facts, "block_size": params["attn_block_size"], "reps": params["attn_reps"]}
    check_patterns(shape, configs, device=facts.device, block_size=params["attn_block_size"])
    out = time_patterns(shape, configs, progress=progress, **timing)
    base = pattern_config("causal_sliding_window", params)
    out += window_sweep(shape, base, params["attn_windows"], progress=progress, **timing)
    causal = pattern_config("causal", params)
    out += seq_sweep(shape, causal, params["attn_seq_lens"], progress=progress, **timing)
    return out + compile_records(facts)
