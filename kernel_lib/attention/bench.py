"""Attention benchmarks: flex's variants tuned on causal forward beside the plain compiled
attention, then every pattern through the chosen compiled flex, each SDPA backend,
FlashAttention-2/3 and the naive reference, all checked then timed in one interleaved
`measure.compare` per case (causal also through flex's FLASH backend, FlashAttention-4, where it
can run); forward + backward of causal; a window sweep and a sequence-length sweep. Returns
records only.

Legend: B batch, H heads, S sequence length, D head dim.
A record's ratio_vs_baseline is over the fastest SDPA backend of the same compare (the window
sweep: over causal flex, the sweep's question; the variants: over the plain compiled attention);
`flops` counts the pairs the pattern allows, metrics.dense_* the full S x S work. Each flex
compile (its first call) is a record of mode `first_call` carrying the check of that call's
output; flex records name the variant they ran in `variant`.
"""

from __future__ import annotations

import dataclasses
import subprocess
from functools import partial

import torch
from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.attention.baselines import (
    SDPA_BACKENDS,
    attention_naive,
    flash_attention,
    flash_attn_function,
    flash_attn_kwargs,
    sdpa_attention,
    sdpa_inputs,
)
from kernel_lib.attention.checks import backward_check, forward_check
from kernel_lib.attention.cold_compile import cold_compile
from kernel_lib.attention.config import AttentionConfig
from kernel_lib.attention.flex import (
    FlexVariant,
    block_sparsity,
    first_call,
    flex_attention_compiled,
    flex_attention_flash,
)
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.plain import attention_naive_compiled, check_score_memory
from kernel_lib.attention.shapes import (
    BACKWARD_FLOP_FACTOR,
    AttentionShape,
    attention_flops,
    make_qkv,
)
from kernel_lib.checks import Unsupported
from kernel_lib.headlines import key as headline_key
from kernel_lib.measure import Candidate, Case, compare, with_baseline
from kernel_lib.platform import DeviceFacts
from kernel_lib.variants import choose

TOPIC = "attention"
FLEX = "flex_attention_compiled"
FLEX_CAUSAL = "flex_attention_compiled_causal"  # the window sweep's baseline
FLEX_FLASH = "flex_attention_compiled_flash"  # flex through its FLASH backend (causal forward)
FLASH_VERSIONS = ("flash_attn_2", "flash_attn_3")
NAIVE = "attention_naive"
PLAIN = "attention_naive_compiled"  # the plain comparator of the tuned flex
FORWARD, BACKWARD, FIRST_CALL = "forward", "forward_backward", "first_call"
COLD_COMPILE = "cold_compile"  # a first call in a fresh process with an empty Inductor cache
HEADLINE = "flex.causal_vs_sdpa.{dtype}"  # kernel_lib.headlines


def raise_unsupported(reason: str):
    """The timed call of a path that cannot run here: its record becomes `skipped: reason`."""
    raise Unsupported(reason)


def _flash(q, k, v, *, version: str, config: PatternConfig):
    flash_attn_function(version)  # "not installed" comes before "cannot express"
    return flash_attention(q, k, v, version=version, fa_kwargs=flash_attn_kwargs(config))


def _sdpa_math(q, k, v, *, sdpa_kwargs: dict):
    """SDPA's math backend, refused in fp32 past the naive's score memory (check_score_memory):
    it materialises the same fp32 scores (16 GiB at B=4, H=16, S=8192), and the fused backends
    that run give the ratio."""
    if q.dtype == torch.float32:
        check_score_memory(q)
    return sdpa_attention(q, k, v, backend="sdpa_math", sdpa_kwargs=sdpa_kwargs)


def _naive(q, k, v, *, config: PatternConfig):
    check_score_memory(q)
    return attention_naive(q, k, v, config)


def variant_name(variant: FlexVariant) -> str:
    """The implementation name of one flex variant in the tuning records (and in `variant`)."""
    return f"{FLEX}_{variant.name}"


def _flex(qkv, config: PatternConfig, variant: FlexVariant):
    return partial(flex_attention_compiled, *qkv, config, **variant._asdict())


def _baselines(config: PatternConfig, shape: AttentionShape, q) -> dict:
    """Implementation name -> call(q, k, v) of every non-flex path (raising Unsupported where
    it cannot run the case)."""
    try:
        kwargs = sdpa_inputs(config, shape.seq_len, shape.heads, dtype=q.dtype, device=q.device)
        calls = {b: partial(sdpa_attention, backend=b, sdpa_kwargs=kwargs) for b in SDPA_BACKENDS}
        calls["sdpa_math"] = partial(_sdpa_math, sdpa_kwargs=kwargs)
    except Unsupported as why:
        calls = {b: lambda *qkv, why=str(why): raise_unsupported(why) for b in SDPA_BACKENDS}
    calls.update({v: partial(_flash, version=v, config=config) for v in FLASH_VERSIONS})
    calls[NAIVE] = partial(_naive, config=config)
    return calls


def _keep_first(check, kept: list):
    """`check`, remembering its first result (compare checks the first call's output)."""

    def checked(out):
        kept.append(check(out))
        return kept[-1]

    return checked


class _FlexCompile:
    """The flex candidate of one case, and the record of its first call when that call compiled
    during this case (its check is the check of that very output)."""

    def __init__(self, config: PatternConfig, q, variant: FlexVariant):
        self.config, self.q, self.variant = config, q, variant
        self.new = first_call(config, q, **variant._asdict()) is None
        self.checks: list = []

    def candidate(self, name: str, fn, check, **fields) -> Candidate:
        return Candidate(name, fn, _keep_first(check, self.checks), **fields)

    def records(self, case: Case, facts: DeviceFacts, name: str = FLEX) -> list[rec.Record]:
        call = first_call(self.config, self.q, **self.variant._asdict())
        if not (self.new and call is not None and self.checks):
            return []
        common = {"facts": facts, "dtype": case.dtype, "shape": case.shape, "mode": FIRST_CALL}
        check = self.checks[0]
        if not check.passed:
            return [rec.wrong(TOPIC, case.case, name, check, **common)]
        metrics = {"section": "compile", "new_graphs": call.new_graphs, **self.variant._asdict()}
        return [
            rec.measured(
                TOPIC, case.case, name, call.timing, check=check, metrics=metrics, **common
            )
        ]


def with_metrics(records: list[rec.Record], **metrics) -> list[rec.Record]:
    """Records with `metrics` added; dense_tflops from metrics.dense_flops and the median."""
    out = []
    for r in records:
        added = {**r.metrics, **metrics}
        if r.median_ms and "dense_flops" in added:
            added["dense_tflops"] = added["dense_flops"] / r.median_ms / 1e9
        out.append(dataclasses.replace(r, metrics=added))
    return out


def _ran(
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


def timing_options(cfg: AttentionConfig, progress: bool, case: str) -> dict:
    return {
        "rounds": cfg.reps,
        "min_time_s": cfg.min_time_s,
        "warmup": 1,
        "progress": case if progress else None,
    }


def tune_flex(
    cfg: AttentionConfig,
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
    flexes = {variant_name(v): _FlexCompile(config, qkv[0], v) for v in cfg.flex_variants()}
    candidates = [
        flex.candidate(
            name,
            _flex(qkv, config, flex.variant),
            check,
            flops=needed,
            metrics=flex.variant._asdict(),
        )
        for name, flex in flexes.items()
    ]
    candidates.append(
        Candidate(PLAIN, partial(attention_naive_compiled, *qkv, config), check, flops=needed)
    )
    this = Case(TOPIC, pattern, shape.as_dict(), shape.dtype, FORWARD)
    out = compare(
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
    cfg: AttentionConfig,
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
    backend, FlashAttention-2/3 and naive, each checked against the fp64 reference at this
    shape, then timed interleaved; ratios over the best SDPA backend. Plus flex's first-call
    record when this case compiled it."""
    qkv = make_qkv(shape, device=facts.device, seed=0)
    check = forward_check(config, *qkv)
    needed, dense = attention_flops(config, shape)
    flex = _FlexCompile(config, qkv[0], variant)
    sparsity = block_sparsity(
        config, shape.seq_len, block_size=variant.block_size, device=qkv[0].device
    )
    tiles = {"block_size": variant.block_size, "block_sparsity_%": sparsity}
    candidates = [
        flex.candidate(
            FLEX,
            _flex(qkv, config, variant),
            check,
            flops=needed,
            metrics={**variant._asdict(), **tiles},
        )
    ]
    if flex_flash:  # FLASH runs in the input dtype: no `upcast` among its metrics
        flash = partial(flex_attention_flash, *qkv, config, block_size=variant.block_size)
        candidates.append(Candidate(FLEX_FLASH, flash, check, flops=needed, metrics=tiles))
    candidates += [
        Candidate(name, partial(call, *qkv), check, flops=needed)
        for name, call in _baselines(config, shape, qkv[0]).items()
    ]
    this = Case(TOPIC, case, shape.as_dict(), shape.dtype, FORWARD)
    out = compare(this, candidates, facts=facts, **timing_options(cfg, progress, case))
    out = with_metrics(
        vs_best_sdpa(out), section=section, dense_flops=dense, needed_fraction=needed / dense
    )
    return _ran(out + flex.records(this, facts), variant)


def backward_case(
    cfg: AttentionConfig,
    config: PatternConfig,
    *,
    facts: DeviceFacts,
    variant: FlexVariant,
    progress: bool = False,
) -> list[rec.Record]:
    """Forward + backward (dq, dk, dv of sum(out * grad_out)) of flex, every SDPA backend and
    naive, checked against fp64 reference gradients; flex has no CPU backward (skipped)."""
    shape = cfg.shape()
    qkv = make_qkv(shape, device=facts.device, seed=0, requires_grad=True)
    grad_out = make_qkv(shape, device=facts.device, seed=1)[0]
    check = backward_check(config, *qkv, grad_out)
    needed, dense = attention_flops(config, shape)
    factor = 1 + BACKWARD_FLOP_FACTOR
    flex = _FlexCompile(config, qkv[0], variant)
    flex_call = partial(flex_attention_compiled, config=config, **variant._asdict())
    candidates = [
        flex.candidate(
            FLEX, partial(_grads, flex_call, qkv, grad_out), check, flops=needed * factor
        )
    ]
    candidates += [
        Candidate(name, partial(_grads, call, qkv, grad_out), check, flops=needed * factor)
        for name, call in _baselines(config, shape, qkv[0]).items()
        if name in SDPA_BACKENDS or name == NAIVE
    ]
    this = Case(TOPIC, config.name, shape.as_dict(), shape.dtype, BACKWARD)
    out = compare(
        this, candidates, facts=facts, **timing_options(cfg, progress, f"{config.name} bwd")
    )
    out = with_metrics(vs_best_sdpa(out), section="backward", dense_flops=dense * factor)
    return _ran(out + flex.records(this, facts), variant)


def _grads(call, qkv, grad_out):
    return torch.autograd.grad(call(*qkv), qkv, grad_out)


def time_patterns(
    cfg: AttentionConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
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
    cfg: AttentionConfig, *, facts: DeviceFacts, progress: bool = False
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


def window_sweep(
    cfg: AttentionConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
) -> list[rec.Record]:
    """Causal sliding window at each window, at S = cfg.windows_seq_len: flex and every SDPA
    backend, with causal flex (`variant`) on the same inputs as the baseline (ratio = speedup the
    window buys, with its interval); metrics.ideal_speedup = causal needed FLOPs / window needed
    FLOPs. Where cfg.flex_variants() offers a choice, the window's own flex variant is tuned
    first at cfg.window (a narrow band favours small tiles: fewer masked keys per query),
    records included; with one variant the band runs `variant` (no compile per tile, nothing
    to choose). Windows are captured as tensors, so the sweep adds no compiles after the
    first window (none at all where S is the pattern sections' and the band's variant theirs)."""
    shape = cfg.shape(cfg.windows_seq_len)
    banded, tuning = variant, []
    if len(cfg.flex_variants()) > 1:
        banded, tuning = tune_flex(
            cfg,
            facts=facts,
            pattern="causal_sliding_window",
            seq_len=shape.seq_len,
            progress=progress,
        )
    qkv = make_qkv(shape, device=facts.device, seed=0)
    causal = cfg.pattern("causal")
    causal_check = forward_check(causal, *qkv)  # its reference is built once for all windows
    causal_flops, dense = attention_flops(causal, shape)
    flex_causal = _flex(qkv, causal, variant)
    out = []
    for window in tqdm(cfg.windows, desc="windows", disable=not progress):
        config = cfg.pattern("causal_sliding_window", window=window)
        check = forward_check(config, *qkv)
        needed, _ = attention_flops(config, shape)
        flex = _FlexCompile(config, qkv[0], banded)
        candidates = [
            flex.candidate(
                FLEX, _flex(qkv, config, banded), check, flops=needed, metrics=banded._asdict()
            ),
            Candidate(FLEX_CAUSAL, flex_causal, causal_check, flops=causal_flops),
        ]
        candidates += [
            Candidate(name, partial(call, *qkv), check, flops=needed)
            for name, call in _baselines(config, shape, qkv[0]).items()
            if name in SDPA_BACKENDS
        ]
        case = f"causal_sliding_window_w{window}"
        this = Case(TOPIC, case, {**shape.as_dict(), "window": window}, shape.dtype, FORWARD)
        records = compare(
            this,
            candidates,
            facts=facts,
            baseline=FLEX_CAUSAL,
            **timing_options(cfg, progress, case),
        )
        out += with_metrics(
            records,
            section="window_sweep",
            window=window,
            ideal_speedup=causal_flops / needed,
            dense_flops=dense,
        )
        out += flex.records(this, facts)
    return tuning + _ran(_ran(out, banded), variant, FLEX_CAUSAL)


def seq_sweep(
    cfg: AttentionConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
) -> list[rec.Record]:
    """Causal attention at each sequence length through every implementation (forward_case)."""
    causal = cfg.pattern("causal")
    out = []
    for seq_len in tqdm(cfg.seq_lens, desc="seq lens", disable=not progress):
        out += forward_case(
            cfg,
            causal,
            cfg.shape(seq_len),
            facts=facts,
            variant=variant,
            case=f"causal_s{seq_len}",
            section="seq_sweep",
            progress=progress,
        )
    return out


def cold_compile_case(
    cfg: AttentionConfig, *, facts: DeviceFacts, variant: FlexVariant
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
    return _ran([record], variant)
