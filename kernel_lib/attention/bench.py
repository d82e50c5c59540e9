"""Attention benchmarks: flex's variants tuned on causal forward beside the plain compiled
attention, then every pattern through the chosen compiled flex, each SDPA backend,
FlashAttention-2/3 and the naive reference (candidates.py), all checked then timed in one
interleaved `measure.check_then_time` per case (causal also through flex's FLASH backend,
FlashAttention-4, where it can run), each `attention.forward` plug-in beside them (its call
`fn(q, k, v, pattern)`, `pattern` the case's PatternConfig); forward + backward of causal (the
window and sequence-length sweeps: bench_sweeps.py). Returns records only.

Legend: B batch, H heads, S sequence length, D head dim.
A record's ratio_vs_baseline is over the fastest SDPA backend of the same compare (the variants:
over the plain compiled attention);
`flops` counts the pairs the pattern allows, metrics.dense_* the full S x S work. Each flex
compile (its first call) is a record of mode `first_call` carrying the check of that call's
output; flex records name the variant they ran in `variant`.
"""

from __future__ import annotations

import dataclasses
import subprocess

from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.attention.baselines import SDPA_BACKENDS
from kernel_lib.attention.candidates import (
    FLEX,
    NAIVE,
    PLAIN,
    TOPIC,
    FlexCompile,
    baseline_candidates,
    flash_candidate,
    flex_call,
    flex_grads,
    plain_candidate,
    plugin_candidates,
    variant_name,
)  # fmt: skip
from kernel_lib.attention.checks import backward_check, forward_check
from kernel_lib.attention.cold_compile import cold_compile
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant, block_sparsity
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.shapes import (
    BACKWARD_FLOP_FACTOR,
    AttentionShape,
    attention_flops,
    make_qkv,
)
from kernel_lib.checks import Unsupported
from kernel_lib.headlines import key as headline_key
from kernel_lib.measure import Case, check_then_time, with_baseline
from kernel_lib.platform import DeviceFacts
from kernel_lib.variants import choose

FORWARD, BACKWARD = "forward", "forward_backward"
COLD_COMPILE = "cold_compile"  # a first call in a fresh process with an empty Inductor cache
HEADLINE = "flex.causal_vs_sdpa.{dtype}"  # kernel_lib.headlines


def with_metrics(records: list[rec.Record], **metrics) -> list[rec.Record]:
    """Records with `metrics` added; dense_tflops from metrics.dense_flops and the median."""
    out = []
    for r in records:
        added = {**r.metrics, **metrics}
        if r.median_ms and "dense_flops" in added:
            added["dense_tflops"] = added["dense_flops"] / r.median_ms / 1e9
        out.append(dataclasses.replace(r, metrics=added))
    return out


def with_variant(
    records: list[rec.Record], variant: FlexVariant, implementation: str = FLEX
) -> list[rec.Record]:
    """Records with those of `implementation` naming the flex variant they ran."""
    name = variant_name(variant)
    return [
        dataclasses.replace(r, variant=name) if r.implementation == implementation else r
        for r in records
    ]


def vs_best_sdpa(records: list[rec.Record]) -> list[rec.Record]:
    """Ratios against the fastest SDPA backend that ran and passed (none: left without)."""
    sdpa = [r for r in records if r.implementation in SDPA_BACKENDS and r.status == "ok"]
    if not sdpa:
        return records
    return with_baseline(records, min(sdpa, key=lambda r: r.median_ms).implementation)


def timing_options(cfg: AttentionBenchConfig, progress: bool, case: str) -> dict:
    return {
        "rounds": cfg.reps,
        "min_time_s": cfg.min_time_s,
        "warmup": 1,
        "progress": case if progress else None,
    }


def tune_flex(
    cfg: AttentionBenchConfig,
    *,
    facts: DeviceFacts,
    pattern: str = "causal",
    seq_len: int | None = None,
    progress: bool = False,
) -> tuple[FlexVariant, list[rec.Record]]:
    """(the flex variant to run `pattern` with, its records): forward of `pattern` (causal: the
    variant every other case runs) at the pattern sections' shape (S = `seq_len` if given)
    through each of `cfg.flex_variants()` and the plain comparator (the same attention written
    plainly, through torch.compile), checked then timed interleaved; ratios over the plain one.
    The fastest ok variant is chosen by `variants.choose` (cached per machine; a variant slower
    than the plain comparator is flagged). When none ran, the first variant is returned and
    every flex case records the same reason."""
    shape, config = cfg.shape(seq_len), cfg.pattern(pattern)
    qkv = make_qkv(shape, device=facts.device, seed=0)
    check = forward_check(config, *qkv)
    needed, dense = attention_flops(config, shape)
    flexes = {variant_name(v): FlexCompile(config, qkv[0], v) for v in cfg.flex_variants()}
    candidates = [
        flex.candidate(
            name,
            flex_call(qkv, config, flex.variant),
            check,
            flops=needed,
            metrics=flex.variant._asdict(),
        )
        for name, flex in flexes.items()
    ]
    candidates.append(plain_candidate(qkv, config, check, flops=needed))
    this = Case(TOPIC, pattern, shape.as_dict(), shape.dtype, FORWARD)
    out = check_then_time(
        this,
        candidates,
        facts=facts,
        baseline=PLAIN,
        **timing_options(cfg, progress, f"{pattern} variants"),
    )
    choice, out = choose(
        f"flex_attention_{pattern}", this, out, facts=facts, among=tuple(flexes), comparator=PLAIN
    )
    out = with_metrics(out, section="flex_variants", dense_flops=dense)
    for name, flex in flexes.items():
        out += flex.records(this, facts, name)
    return flexes[choice or next(iter(flexes))].variant, out


def forward_case(
    cfg: AttentionBenchConfig,
    config: PatternConfig,
    shape: AttentionShape,
    *,
    facts: DeviceFacts,
    variant: FlexVariant,
    case: str,
    section: str,
    flex_flash: bool = False,
    progress: bool = False,
) -> list[rec.Record]:
    """Forward of `config`: compiled flex (`variant`), with `flex_flash` flex through its FLASH
    backend too (`variant`'s tile; skipped with the reason where it cannot run), every SDPA
    backend, FlashAttention-2/3, naive and the plug-ins, each checked against the fp64
    reference at this shape, then timed interleaved; ratios over the best SDPA backend. Plus
    flex's first-call record when this case compiled it."""
    qkv = make_qkv(shape, device=facts.device, seed=0)
    check = forward_check(config, *qkv)
    needed, dense = attention_flops(config, shape)
    flex = FlexCompile(config, qkv[0], variant)
    sparsity = block_sparsity(
        config, shape.seq_len, block_size=variant.block_size, device=qkv[0].device
    )
    tiles = {"block_size": variant.block_size, "block_sparsity_%": sparsity}
    candidates = [
        flex.candidate(
            FLEX,
            flex_call(qkv, config, variant),
            check,
            flops=needed,
            metrics={**variant._asdict(), **tiles},
        )
    ]
    if flex_flash:  # FLASH runs in the input dtype: no `upcast` among its metrics
        candidates.append(
            flash_candidate(
                qkv, config, check, block_size=variant.block_size, flops=needed, metrics=tiles
            )
        )
    candidates += baseline_candidates(config, shape, qkv, check, flops=needed)
    candidates += plugin_candidates(qkv, config, check, flops=needed)
    this = Case(TOPIC, case, shape.as_dict(), shape.dtype, FORWARD)
    out = check_then_time(this, candidates, facts=facts, **timing_options(cfg, progress, case))
    out = with_metrics(
        vs_best_sdpa(out), section=section, dense_flops=dense, needed_fraction=needed / dense
    )
    return with_variant(out + flex.records(this, facts), variant)


def backward_case(
    cfg: AttentionBenchConfig,
    config: PatternConfig,
    *,
    facts: DeviceFacts,
    variant: FlexVariant,
    progress: bool = False,
) -> list[rec.Record]:
    """Forward + backward (dq, dk, dv of sum(out * grad_out)) of flex, every SDPA backend, naive
    and the plug-ins registered with backward=True (the others skipped), checked against fp64
    reference gradients; flex has no CPU backward (skipped)."""
    shape = cfg.shape()
    qkv = make_qkv(shape, device=facts.device, seed=0, requires_grad=True)
    grad_out = make_qkv(shape, device=facts.device, seed=1)[0]
    check = backward_check(config, *qkv, grad_out)
    needed, dense = attention_flops(config, shape)
    factor = 1 + BACKWARD_FLOP_FACTOR
    flex = FlexCompile(config, qkv[0], variant)
    grads = flex_grads(qkv, grad_out, config, variant)
    candidates = [flex.candidate(FLEX, grads, check, flops=needed * factor)]
    candidates += baseline_candidates(
        config,
        shape,
        qkv,
        check,
        flops=needed * factor,
        among=(*SDPA_BACKENDS, NAIVE),
        grad_out=grad_out,
    )
    candidates += plugin_candidates(qkv, config, check, grad_out=grad_out, flops=needed * factor)
    this = Case(TOPIC, config.name, shape.as_dict(), shape.dtype, BACKWARD)
    out = check_then_time(
        this, candidates, facts=facts, **timing_options(cfg, progress, f"{config.name} bwd")
    )
    out = with_metrics(vs_best_sdpa(out), section="backward", dense_flops=dense * factor)
    return with_variant(out + flex.records(this, facts), variant)


def time_patterns(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
) -> list[rec.Record]:
    """Forward records of every pattern (causal also through flex's FLASH backend), then forward
    + backward of causal (or of the first pattern when causal is not among them), flex run as
    `variant`. Declares the headline: flex causal forward vs best SDPA backend (<dtype>)."""
    out = []
    for config in tqdm(cfg.pattern_configs(), desc="patterns", disable=not progress):
        out += forward_case(
            cfg,
            config,
            cfg.shape(),
            facts=facts,
            variant=variant,
            case=config.name,
            section="patterns",
            flex_flash=config.name == "causal",
            progress=progress,
        )
    out = [mark_headline(r, headline_key(HEADLINE, dtype=cfg.dtype)) for r in out]
    first = cfg.pattern("causal" if "causal" in cfg.patterns else cfg.patterns[0])
    return out + backward_case(cfg, first, facts=facts, variant=variant, progress=progress)


def time_causal_dtypes(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, progress: bool = False
) -> list[rec.Record]:
    """Causal forward at the pattern shape in each of `cfg.causal_dtypes` but `cfg.dtype` (whose
    case is time_patterns'): flex tuned in that dtype (`tune_flex`), then checked and timed
    against every backend like a pattern, FLASH included (section `causal_dtypes`). Declares a
    headline per dtype: flex causal forward vs best SDPA backend (<dtype>)."""
    out = []
    for dtype in cfg.causal_dtypes:
        if dtype == cfg.dtype:
            continue
        other = dataclasses.replace(cfg, dtype=dtype)
        variant, tuning = tune_flex(other, facts=facts, progress=progress)
        timed = forward_case(
            other,
            other.pattern("causal"),
            other.shape(),
            facts=facts,
            variant=variant,
            case="causal",
            section="causal_dtypes",
            flex_flash=True,
            progress=progress,
        )
        out += tuning + [mark_headline(r, headline_key(HEADLINE, dtype=dtype)) for r in timed]
    return out


def mark_headline(
    record: rec.Record, key: str, *, case: str = "causal", implementation: str = FLEX
) -> rec.Record:
    """`record` declared the headline `title` if it is `implementation`'s forward of `case` with
    a ratio to show (or one that did not run: its reason is the headline), else unchanged."""
    subject = (record.case, record.implementation, record.mode) == (case, implementation, FORWARD)
    if subject and (record.status != "ok" or record.ratio_vs_baseline is not None):
        return rec.as_headline(record, key)
    return record


def cold_compile_case(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, variant: FlexVariant
) -> list[rec.Record]:
    """[] unless cfg.cold_compile, else the record (mode `cold_compile`) of one flex compile of
    causal at the pattern sections' shape in a fresh process with an empty Inductor cache
    (cold_compile.py), that call's output checked against the fp64 reference."""
    if not cfg.cold_compile:
        return []
    shape, causal = cfg.shape(), cfg.pattern("causal")
    common = {"facts": facts, "dtype": shape.dtype, "shape": shape.as_dict(), "mode": COLD_COMPILE}
    try:
        got = cold_compile(causal, shape, variant=variant, device=facts.device)
    except Unsupported as why:
        return [rec.skipped(TOPIC, causal.name, FLEX, str(why), **common)]
    except (RuntimeError, subprocess.TimeoutExpired) as why:
        return [rec.failed(TOPIC, causal.name, FLEX, str(why), **common)]
    check = forward_check(causal, *make_qkv(shape, device=facts.device, seed=0))(got.output)
    if not check.passed:
        return [rec.wrong(TOPIC, causal.name, FLEX, check, **common)]
    metrics = {"section": "compile", "new_graphs": got.new_graphs, **variant._asdict()}
    record = rec.measured(
        TOPIC, causal.name, FLEX, got.timing, check=check, metrics=metrics, **common
    )
    return with_variant([record], variant)
