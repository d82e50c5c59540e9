"""The sweeps of causal attention: a causal sliding window at each window, against causal flex on
the same inputs (ratio = the speedup the window buys), and causal attention at each sequence
length through every implementation (bench.forward_case). Returns records only.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.attention.baselines import SDPA_BACKENDS
from kernel_lib.attention.bench import (
    FORWARD,
    forward_case,
    timing_options,
    tune_flex,
    with_metrics,
    with_variant,
)
from kernel_lib.attention.candidates import (
    FLEX,
    TOPIC,
    FlexCompile,
    baseline_candidates,
    flex_call,
)
from kernel_lib.attention.checks import forward_check
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant
from kernel_lib.attention.shapes import attention_flops, make_qkv
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.platform import DeviceFacts

FLEX_CAUSAL = "flex_attention_compiled_causal"  # the window sweep's baseline


def window_sweep(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
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
    flex_causal = flex_call(qkv, causal, variant)
    out = []
    for window in tqdm(cfg.windows, desc="windows", disable=not progress):
        config = cfg.pattern("causal_sliding_window", window=window)
        check = forward_check(config, *qkv)
        needed, _ = attention_flops(config, shape)
        flex = FlexCompile(config, qkv[0], banded)
        candidates = [
            flex.candidate(
                FLEX, flex_call(qkv, config, banded), check, flops=needed, metrics=banded._asdict()
            ),
            Candidate(FLEX_CAUSAL, flex_causal, causal_check, flops=causal_flops),
        ]
        candidates += baseline_candidates(
            config, shape, qkv, check, flops=needed, among=SDPA_BACKENDS
        )
        case = f"causal_sliding_window_w{window}"
        this = Case(TOPIC, case, {**shape.as_dict(), "window": window}, shape.dtype, FORWARD)
        records = check_then_time(
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
    return tuning + with_variant(with_variant(out, banded), variant, FLEX_CAUSAL)


def seq_sweep(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
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
