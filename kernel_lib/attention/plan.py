"""The flex-attention topic's plan: its sections in the notebook's order, which `bench attention`
runs as one suite (the notebook calls the same section functions)."""

from __future__ import annotations

from kernel_lib import records as rec
from kernel_lib.attention import bench_decode, bench_gym
from kernel_lib.attention.bench import (
    cold_compile_case,
    seq_sweep,
    time_causal_dtypes,
    time_patterns,
    tune_flex,
    window_sweep,
)
from kernel_lib.attention.config import AttentionConfig
from kernel_lib.platform import device_facts


def suite(params: dict, *, progress: bool = False) -> list[rec.Record]:
    """The notebook's measurements in its order: flex variants, patterns (+ backward), causal
    in other dtypes, windows, lengths, decode and paged KV, MLA / temporal heads / activations, the cold
    compile."""
    cfg = AttentionConfig.from_params(params)
    facts = device_facts()
    variant, out = tune_flex(cfg, facts=facts, progress=progress)
    out += time_patterns(cfg, facts=facts, variant=variant, progress=progress)
    out += time_causal_dtypes(cfg, facts=facts, progress=progress)
    out += window_sweep(cfg, facts=facts, variant=variant, progress=progress)
    out += seq_sweep(cfg, facts=facts, variant=variant, progress=progress)
    out += bench_decode.inference(cfg, facts=facts, variant=variant, progress=progress)
    out += bench_gym.gym_kernels(
        cfg, facts=facts, block_size=variant.block_size, progress=progress
    )
    return out + cold_compile_case(cfg, facts=facts, variant=variant)
