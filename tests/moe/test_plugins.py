"""`moe.dispatch` plug-ins (kernel_lib.plugins) in the MoE sections: checked against the fp64
loop over experts, timed in the strategies' compare against the same dense pair, never the
headline; the built-in records exactly as without them."""

import dataclasses
import functools

import pytest
import torch

from kernel_lib import records as rec
from kernel_lib.moe import bench
from kernel_lib.moe.bench_presets import section_presets
from kernel_lib.moe.candidates import FORWARD_ONLY, SLOT
from kernel_lib.moe.config import SWEEPS, MoEBenchConfig
from kernel_lib.plugins import kernel

CFG = MoEBenchConfig(
    tokens=(64,), hidden=(16,), ffn=(32,), experts=4, top_k=2, dtype="float32",
    strategies=("loop", "sorted_grouped"), compile=(), side_strategies=("sorted_grouped",),
    capacity_factor=1.0, imbalance=(0.0,), sweep_tokens=(32,), sweep_experts=(4,),
    sweep_top_k=(2,), sweep_base_tokens=32, sweep_strategies=("sorted_grouped",),
    presets=("mixtral-8x7b",), preset_tokens=32, preset_scale=1 / 64,
    preset_strategies=("sorted_grouped",), min_time_s=0.001,
)  # fmt: skip


@pytest.fixture(autouse=True)
def eager_compile(monkeypatch):
    """torch.compile as the identity (the compiled plain loop): these tests are about records."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)


def loop(x, routing, experts):
    """A plain torch loop over experts: the user's correct kernel."""
    out = torch.zeros_like(x)
    for e in range(routing.num_experts):
        rows = routing.expert_idx == e
        tokens = routing.token_idx[rows]
        y = experts.forward_expert(e, x, tokens) * routing.weight[rows, None].to(x.dtype)
        out = out.index_add(0, tokens, y)
    return out


def wrong(x, routing, experts):
    return loop(x, routing, experts) * 1.1


def raises(x, routing, experts):
    raise RuntimeError("my kernel broke\nsecond line")


def _by_name(records, case="forward"):
    return {r.implementation: r for r in records if r.case == case}


def _builtins(records):
    return [
        (r.case, r.implementation, r.status, r.record_id)
        for r in rec.stamp(records, run_id="t", platform="t")
        if r.plugin is None
    ]


def test_plugins_beside_the_strategies_checked_timed_and_never_the_headline(
    plugin_registry, cpu_facts
):
    without = bench.section_throughput(CFG, cpu_facts)
    kernel(SLOT, name="mine")(loop)
    kernel(SLOT, name="wrong")(wrong)
    kernel(SLOT, name="raises")(raises)
    kernel(SLOT, name="fp64")(lambda x, routing, experts: loop(x, routing, experts).double())
    kernel(SLOT, name="dispatch_cached")(functools.cache(loop))  # the fastest, correct
    kernel(SLOT, name="dispatch_loop")(loop)  # a built-in's name
    records = bench.section_throughput(CFG, cpu_facts)
    assert _builtins(records) == _builtins(without)
    got = _by_name(records)
    mine = got["mine"]
    assert mine.status == "ok" and mine.check["pass"] and mine.baseline == "dense_gemm"
    assert mine.ratio_vs_baseline > 0 and mine.ratio_low <= mine.ratio_high
    assert mine.fraction_of_peak > 0 and mine.metrics["tokens_per_s"] > 0
    assert mine.plugin["slot"] == SLOT and mine.plugin["name"] == "mine"
    assert mine.plugin["file"] == __file__ and mine.flops == got["dispatch_loop"].flops
    assert got["wrong"].status == "wrong" and not got["wrong"].check["pass"]
    assert not got["wrong"].samples_ms and got["wrong"].median_ms is None
    assert got["raises"].status == "failed"
    assert got["raises"].reason == "RuntimeError: my kernel broke"
    assert got["fp64"].status == "failed" and "torch.float64" in got["fp64"].reason
    assert got["dispatch_loop.plugin"].status == "failed"
    assert all(got[n].plugin["name"] == n for n in ("wrong", "raises", "fp64"))
    cached = got["dispatch_cached"]
    assert cached.status == "ok" and cached.variant is None and not cached.headline
    (headline,) = [r for r in records if r.headline]
    assert headline.plugin is None and headline.implementation == headline.variant


def test_a_backward_plugin_is_checked_on_its_weight_gradients(plugin_registry, cpu_facts):
    kernel(SLOT, name="mine", backward=True)(loop)
    kernel(SLOT, name="wrong", backward=True)(wrong)
    kernel(SLOT, name="forward_only")(loop)
    got = _by_name(bench.section_throughput(CFG, cpu_facts, backward=True), "forward_backward")
    mine = got["mine"]
    assert mine.status == "ok" and mine.ratio_vs_baseline > 0 and mine.plugin["name"] == "mine"
    assert mine.check["reference"] == "fp64 loop over experts, autograd"
    assert got["wrong"].status == "wrong" and not got["wrong"].samples_ms
    skipped = got["forward_only"]
    assert skipped.status == "skipped" and skipped.reason == FORWARD_ONLY and skipped.plugin


def test_capacity_sweeps_and_presets_time_the_plugins(plugin_registry, cpu_facts):
    kernel(SLOT, name="mine")(loop)
    records = bench.section_capacity(CFG, cpu_facts) + section_presets(CFG, cpu_facts)
    for axis in SWEEPS:
        records += bench.section_sweep(axis, CFG, cpu_facts)
    cases = {r.case for r in records}
    assert len(cases) == 2 + len(SWEEPS)
    for case in cases:
        mine = _by_name(records, case)["mine"]
        assert mine.status == "ok" and mine.baseline == "dense_gemm", case
        assert mine.ratio_vs_baseline > 0 and mine.plugin["name"] == "mine", case
    assert "drop_rate" in _by_name(records, "forward_capacity")["mine"].metrics
    assert all(not r.headline for r in records if r.plugin)


def test_a_case_too_big_skips_the_plugins_with_its_reason(plugin_registry, cpu_facts):
    kernel(SLOT, name="mine", backward=True)(loop)
    facts = dataclasses.replace(cpu_facts, memory_bytes=1000)
    records = bench.section_throughput(CFG, facts) + section_presets(CFG, facts)
    mine = [r for r in records if r.implementation == "mine"]
    assert len(mine) == 2 and all(r.status == "skipped" and "GiB" in r.reason for r in mine)
    assert all(r.plugin["name"] == "mine" for r in mine)
