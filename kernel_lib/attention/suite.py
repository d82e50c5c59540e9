"""The flex-attention topic's suite: its sections in the notebook's order. Each notebook cell runs
one by name (`SUITE.run("seq_sweep", ctx)`); `python -m kernel_lib bench attention` runs them all
(`run_suite`). Every section after `tune_flex` runs flex as the variant it chose."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kernel_lib import records as rec
from kernel_lib.attention import bench_decode, bench_gym
from kernel_lib.attention.bench import (
    TOPIC,
    cold_compile_case,
    time_causal_dtypes,
    time_patterns,
    tune_flex,
)
from kernel_lib.attention.bench_sweeps import seq_sweep, window_sweep
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant
from kernel_lib.platform import device_facts
from kernel_lib.suite import Context, Section, Suite

Records = list[rec.Record]


class Tuned(NamedTuple):
    """The flex variant chosen by measurement on causal forward, and the tuning's records."""

    variant: FlexVariant
    records: Records


def tuned(ctx: Context[AttentionBenchConfig]) -> Tuned:
    return Tuned(*tune_flex(ctx.config, facts=ctx.facts, progress=ctx.progress))


def variant(ctx: Context[AttentionBenchConfig]) -> FlexVariant:
    """The flex variant `tune_flex` chose in this run."""
    return ctx.output("tune_flex").variant


def _plain(section: Callable[..., Records]) -> Callable[[Context[AttentionBenchConfig]], Records]:
    """A section function of (cfg, *, facts, progress) as a suite section."""
    return lambda ctx: section(ctx.config, facts=ctx.facts, progress=ctx.progress)


def _with_variant(
    section: Callable[..., Records],
) -> Callable[[Context[AttentionBenchConfig]], Records]:
    """A section function of (cfg, *, facts, variant, progress), run as the chosen variant."""
    return lambda ctx: section(
        ctx.config, facts=ctx.facts, variant=variant(ctx), progress=ctx.progress
    )


def cold_compile(ctx: Context[AttentionBenchConfig]) -> Records:
    return cold_compile_case(ctx.config, facts=ctx.facts, variant=variant(ctx))


def gym_kernels(ctx: Context[AttentionBenchConfig]) -> Records:
    block_size = variant(ctx).block_size
    return bench_gym.gym_kernels(
        ctx.config, facts=ctx.facts, block_size=block_size, progress=ctx.progress
    )


SUITE = Suite(TOPIC, (
    Section("tune_flex", tuned, "flex variants of causal forward vs the plain compiled one"),
    Section("time_patterns", _with_variant(time_patterns), "every pattern, every backend; bwd"),
    Section("time_causal_dtypes", _plain(time_causal_dtypes), "causal in the other dtypes"),
    Section("window_sweep", _with_variant(window_sweep), "sliding window per window vs causal"),
    Section("seq_sweep", _with_variant(seq_sweep), "causal per sequence length"),
    Section("cold_compile_case", cold_compile, "one flex compile in a fresh process"),
    Section("time_decode", _plain(bench_decode.time_decode), "GQA/MQA decode, cross-attention"),
    Section("paged_case", _plain(bench_decode.paged_case), "paged KV decode vs contiguous"),
    Section("decode_sweep", _plain(bench_decode.decode_sweep), "GQA decode per KV length"),
    Section("time_gym_patterns", _with_variant(bench_gym.time_gym_patterns), "gym masks"),
    Section("gym_kernels", gym_kernels, "MLA, temporal heads, activation, JetSpec, VSA"),
))  # fmt: skip


def run_suite(params: dict, *, progress: bool = False) -> Records:
    """Every attention record on the detected device: the notebook's sections, in its order."""
    config = AttentionBenchConfig.from_params(params)
    return SUITE.run_all(Context(config, device_facts(), progress=progress))
