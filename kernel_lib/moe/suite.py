"""The MoE topic's suite: its sections in the notebook's order. Each notebook cell runs one by name
(`SUITE.run("throughput", ctx)`); `python -m kernel_lib bench moe` runs them all (`run_suite`).
The correctness tables are sections too: every check the notebook shows is a record."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from kernel_lib import records as rec
from kernel_lib.measure import Case, check_table_records
from kernel_lib.moe import bench, routing_reference
from kernel_lib.moe.bench import TOPIC
from kernel_lib.moe.bench_presets import section_presets
from kernel_lib.moe.cases import REFERENCE, MoECase, check_table, edge_cases, make_case
from kernel_lib.moe.config import SWEEPS, MoEBenchConfig
from kernel_lib.moe.ep_bench import section_expert_parallel
from kernel_lib.moe.fp8_decode import fp8_decode_records
from kernel_lib.moe.presets import preset
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.suite import Context, Section, Suite, Table

Records = list[rec.Record]
ROUTING_CHECK_TOKENS = 257  # odd: no preset's expert count divides it
ROUTING_REFERENCE = "fp64 routing twin (experts outside near-ties, then weights)"


class Sweeps(NamedTuple):
    """Each sweep's records by axis (the notebook plots each), and all of them."""

    by_axis: dict[str, Records]
    records: Records


def _strategy_records(
    table: pd.DataFrame, case: MoECase, name: str, facts: DeviceFacts
) -> Records:
    return check_table_records(
        table,
        Case(TOPIC, name, case.shape.as_dict(), case.dtype, "forward"),
        facts=facts,
        implementation=lambda row: f"dispatch_{row['strategy']}",
        reference=REFERENCE,
    )


def strategy_check(ctx: Context[MoEBenchConfig]) -> Table:
    """Every strategy on one seeded case: odd token count, skewed routing, SwiGLU, fp32."""
    shape = MoEShape(131, 64, 96, 5, 2, imbalance=0.5)
    case = make_case(shape, dtype="float32", activation="swiglu", device=ctx.facts.device)
    table = check_table(case, ctx.config.strategies)
    return Table(table, _strategy_records(table, case, "strategy_check", ctx.facts))


def edge_check(ctx: Context[MoEBenchConfig]) -> Table:
    """Each strategy of moe_edge_strategies on each of edge_cases, one block of rows each."""
    tables, records = {}, []
    for name, case in edge_cases(ctx.config.dtype, device=ctx.facts.device).items():
        tables[name] = check_table(case, ctx.config.edge)
        records += _strategy_records(tables[name], case, "edge_check", ctx.facts)
    return Table(pd.concat(tables), records)


def routing_check(ctx: Context[MoEBenchConfig]) -> Table:
    """Each preset's routing against its fp64 twin."""
    models = [preset(name) for name in ctx.config.presets]
    table = routing_reference.check_table(models, tokens=ROUTING_CHECK_TOKENS)
    rows = table.rename(columns={"weight_error": "rel_error"}).assign(
        max_abs_error=None, reason=""
    )
    records = check_table_records(
        rows,
        Case(TOPIC, "routing_check", {"T": ROUTING_CHECK_TOKENS}, "float32", "forward"),
        facts=ctx.facts,
        implementation=lambda row: f"route_{row['preset']}",
        reference=ROUTING_REFERENCE,
        shape_columns=("E", "K", "groups"),
        metrics=("wrong_choices", "near_ties"),
    )
    return Table(table, records)


def throughput(ctx: Context[MoEBenchConfig]) -> Records:
    return bench.section_throughput(ctx.config, ctx.facts, progress=ctx.progress)


def seed(ctx: Context[MoEBenchConfig]) -> Records:
    return [
        r for name in bench.SEED_CASES for r in bench.section_seed(ctx.config, ctx.facts, name)
    ]


def throughput_backward(ctx: Context[MoEBenchConfig]) -> Records:
    if not ctx.config.backward:
        return []
    return bench.section_throughput(ctx.config, ctx.facts, backward=True, progress=ctx.progress)


def fp8_decode(ctx: Context[MoEBenchConfig]) -> Records:
    """Each of moe_fp8_decode_presets at moe_preset_scale, per moe_fp8_decode_tokens entry
    (fp8_decode.py); no presets, no records."""
    cfg = ctx.config
    return fp8_decode_records(
        list(cfg.fp8_decode_presets),
        list(cfg.fp8_decode_tokens),
        cfg.preset_scale,
        facts=ctx.facts,
        min_time_s=cfg.min_time_s,
        zipf=cfg.preset_zipf,
    )


def sweeps(ctx: Context[MoEBenchConfig]) -> Sweeps:
    by_axis = {
        axis: bench.section_sweep(axis, ctx.config, ctx.facts, progress=ctx.progress)
        for axis in SWEEPS
    }
    return Sweeps(by_axis, [r for records in by_axis.values() for r in records])


SUITE = Suite(TOPIC, (
    Section("strategy_check", strategy_check, "every strategy vs the fp64 loop: checks"),
    Section("edge_check", edge_check, "moe_edge_strategies on the edge cases: checks"),
    Section("throughput", throughput, "forward: dense pair, every strategy, the chosen one"),
    Section("seed", seed, "the seed-style baseline, same dtype and its configuration"),
    Section("throughput_backward", throughput_backward, "forward + backward, weight grads"),
    Section("capacity", lambda ctx: bench.section_capacity(ctx.config, ctx.facts), "capacity"),
    Section("layers", lambda ctx: bench.section_layers(ctx.config, ctx.facts), "layer types"),
    Section("sweeps", sweeps, "tokens, experts, top-k and imbalance sweeps"),
    Section("routing_check", routing_check, "each preset's routing vs its fp64 twin: checks"),
    Section("presets", lambda ctx: section_presets(ctx.config, ctx.facts), "model presets"),
    Section(
        "fp8_decode",
        fp8_decode,
        "FP8 routed experts decoded by one C call vs bf16 experts, dequantise-then-decode, a read",
    ),
    Section(
        "expert_parallel",
        lambda ctx: section_expert_parallel(ctx.config, ctx.facts),
        "experts over W ranks (torchrun) vs one rank with every core, phases, raw all-to-all",
    ),
))  # fmt: skip


def run_suite(params: dict, *, progress: bool = False) -> Records:
    """Every MoE record on the detected device: the notebook's sections, in its order."""
    cfg = MoEBenchConfig.from_params(params)
    return SUITE.run_all(Context(cfg, device_facts(), progress=progress))
