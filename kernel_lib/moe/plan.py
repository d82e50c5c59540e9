"""The MoE topic's plan: its sections in the notebook's order, which `bench moe` runs as one suite
(the notebook calls the same section functions)."""

from __future__ import annotations

from kernel_lib import records as rec
from kernel_lib.moe.bench import (
    SEED_CASES,
    section_capacity,
    section_layers,
    section_seed,
    section_sweep,
    section_throughput,
)
from kernel_lib.moe.bench_presets import section_presets
from kernel_lib.moe.config import SWEEPS, MoEBenchConfig
from kernel_lib.platform import device_facts


def suite(params: dict, *, progress: bool = False) -> list[rec.Record]:
    """What the notebook measures, in its order."""
    cfg, facts = MoEBenchConfig.from_params(params), device_facts()
    records = section_throughput(cfg, facts, progress=progress)
    if cfg.backward:
        records += section_throughput(cfg, facts, backward=True, progress=progress)
    for case_name in SEED_CASES:
        records += section_seed(cfg, facts, case_name)
    records += section_capacity(cfg, facts)
    records += section_layers(cfg, facts)
    for axis in SWEEPS:
        records += section_sweep(axis, cfg, facts, progress=progress)
    records += section_presets(cfg, facts)
    return records
