import copy
import dataclasses
import time

import pytest
import torch

from kernel_lib import records as rec
from kernel_lib.measure import Case, require_passed
from kernel_lib.moe import bench, candidates, dispatch, suite
from kernel_lib.moe.cases import check_table, make_case
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.seed_style import SeedStyleMoE
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.moe.suite import run_suite

PARAMS = dict(
    moe_tokens=[64], moe_hidden=[16], moe_ffn=[32], moe_experts=4, moe_top_k=2,
    moe_dtype="float32", moe_activation="relu", moe_capacity_factor=1.0,
    moe_strategies=["loop", "sorted_grouped", "padded", "triton"], moe_compile=[],
    moe_backward=True, moe_layer_types=["standard", "switch"], moe_imbalance=[0.0, 1.0],
    moe_sweep_tokens=[32, 64], moe_sweep_experts=[2, 4], moe_sweep_top_k=[1, 2],
    moe_sweep_base_tokens=32, moe_sweep_strategies=["sorted_grouped"], moe_min_time_s=0.001,
    moe_presets=["gpt-oss-20b"], moe_preset_tokens=32, moe_preset_strategies=["sorted_grouped"],
    # one FP8 decode case; expert parallelism on the throughput shape only (its presets' runs,
    # ~20 s more here, are tests/moe/test_ep_bench.py's)
    moe_fp8_decode_presets=["qwen3-30b-a3b"], moe_fp8_decode_tokens=[1], moe_ep_presets=[],
)  # fmt: skip
CFG = MoEBenchConfig.from_params(PARAMS)


def _eager(fn, **kwargs):
    return fn


@pytest.fixture(autouse=True)
def eager_compile(monkeypatch):
    """torch.compile as the identity here: these tests are about records, checks and choices;
    the compiled comparator's own compile and check run in tests/test_cli.py (bench --json)."""
    monkeypatch.setattr(torch, "compile", _eager)


@pytest.fixture(scope="module")
def records():
    """The whole suite at tiny sizes (torch.compile as the identity, as in eager_compile)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", _eager)
        return run_suite(PARAMS)


@pytest.mark.slow
def test_suite_sections_modes_and_unique_ids(records):
    assert {r.case for r in records} >= {
        "forward", "forward_backward", "seed_same_dtype", "seed_config", "forward_capacity",
        "layer_forward", "sweep_tokens", "sweep_experts", "sweep_top_k", "sweep_imbalance",
        "fp8_decode_qwen3-30b-a3b",
    }  # fmt: skip
    assert {r.mode for r in records} == {"forward", "forward_backward"}
    rec.stamp(records, run_id="test", platform="test")  # raises on a shared record_id


@pytest.mark.slow
def test_every_timed_record_passed_its_check(records):
    timed = [r for r in records if r.status == "ok"]
    assert timed and all(r.check["pass"] for r in timed)
    assert {r.status for r in records} <= {"ok", "skipped"}


@pytest.mark.slow
def test_strategies_against_dense_with_interval_and_headline(records):
    fwd = {r.implementation: r for r in records if r.case == "forward"}
    grouped = fwd["dispatch_sorted_grouped"]
    assert grouped.baseline == "dense_gemm" and grouped.ratio_low <= grouped.ratio_high
    assert grouped.fraction_of_peak > 0 and fwd["dense_gemm"].ratio_vs_baseline is None
    heads = [r for r in records if r.headline and r.case in ("forward", "forward_backward")]
    assert len(heads) == 2 and all(r.implementation == r.variant for r in heads)


@pytest.mark.slow
def test_seed_style_compared_twice_each_labelled(records):
    for case in bench.SEED_CASES:
        recs = {r.implementation: r for r in records if r.case == case}
        seed = recs["seed_style"]
        assert seed.dtype == "float32" and seed.metrics["drop_rate"] > 0
        assert recs["dispatch_loop"].baseline.startswith("seed_style")
        assert sum(1 for r in recs.values() if r.headline) == 1


def test_compile_of_grouped_mm_in_float32_is_skipped_not_raised(cpu_facts):
    cfg = dataclasses.replace(CFG, compile=("sorted_grouped",), strategies=("loop",))
    recs = bench.section_throughput(cfg, cpu_facts)
    compiled = next(r for r in recs if r.implementation == "dispatch_sorted_grouped_compiled")
    assert compiled.status == "skipped" and "bfloat16 only" in compiled.reason


def test_the_side_compares_time_the_side_strategies_and_the_plain_loop(cpu_facts):
    cfg = dataclasses.replace(CFG, side_strategies=("padded",))
    seed = bench.section_seed(cfg, cpu_facts, "seed_config")
    assert [r.implementation for r in seed] == ["dispatch_padded", "dispatch_loop", "seed_style"]
    capacity = bench.section_capacity(cfg, cpu_facts)
    assert [r.implementation for r in capacity] == ["dense_gemm", "dispatch_padded"]


def test_case_too_big_for_memory_is_skipped(cpu_facts):
    facts = dataclasses.replace(cpu_facts, memory_bytes=1000)
    recs = bench.section_throughput(CFG, facts) + bench.section_layers(CFG, facts)
    recs += bench.section_seed(CFG, facts, "seed_config")
    assert recs and all(r.status == "skipped" and "GiB" in r.reason for r in recs)


def _zero_expert_0(experts):
    """The same experts with expert 0's output weights zeroed (gradients still flow)."""
    broken = copy.copy(experts)
    mask = torch.ones(experts.num_experts, 1, 1, dtype=experts.w_out.dtype)
    mask[0] = 0
    broken._parameters = {**experts._parameters, "w_out": experts.w_out * mask}
    return broken


def _swap_routing(routing):
    """Every assignment sent to the next expert (a consistent but wrong routing)."""
    e = routing.num_experts
    return routing._replace(expert_idx=(routing.expert_idx + 1) % e, counts=routing.counts.roll(1))


BREAKS = {
    "zero_expert": lambda fn: lambda x, routing, experts: fn(x, routing, _zero_expert_0(experts)),
    "swap_routing": lambda fn: lambda x, routing, experts: fn(x, _swap_routing(routing), experts),
}


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("broken", BREAKS)
def test_broken_strategy_is_wrong_not_timed(monkeypatch, cpu_facts, broken, backward):
    fn = dispatch.dispatch_sorted_segments
    monkeypatch.setattr(dispatch, "dispatch_sorted_segments", BREAKS[broken](fn))
    cfg = dataclasses.replace(CFG, strategies=("loop", "sorted_segments"), compile=())
    recs = {
        r.implementation: r for r in bench.section_throughput(cfg, cpu_facts, backward=backward)
    }
    assert recs["dispatch_sorted_segments"].status == "wrong"
    assert recs["dispatch_sorted_segments"].median_ms is None
    assert recs["dispatch_loop"].status == "ok"


@pytest.mark.parametrize("broken", BREAKS)
def test_broken_dispatch_inside_a_layer_is_wrong(monkeypatch, cpu_facts, broken):
    fn = dispatch.dispatch_sorted_grouped
    monkeypatch.setattr(dispatch, "dispatch_sorted_grouped", BREAKS[broken](fn))
    recs = bench.section_layers(CFG, cpu_facts)
    assert {r.status for r in recs} == {"wrong"}


def test_broken_dense_pair_fails_its_check():
    case = make_case(MoEShape(64, 16, 32, 4, 2), dtype="float32")
    for backward in (False, True):
        c = candidates.dense_candidate(case, backward=backward)
        out = c.fn()
        assert c.check(out).passed
        wrong = tuple(t * 1.01 for t in out) if backward else out * 1.01
        assert not c.check(wrong).passed


def test_seed_style_check_pins_its_drops_and_weights():
    case = make_case(MoEShape(64, 16, 32, 4, 2), dtype="float32")
    c = candidates.seed_style_candidate(case)
    assert c.check(c.fn()).passed
    other_drops = SeedStyleMoE(case.gate, case.feedforward, seed=1)(case.x).y
    assert not c.check(other_drops).passed
    zeroed = SeedStyleMoE(case.gate, _zero_expert_0(case.feedforward))(case.x).y
    assert not c.check(zeroed).passed


def test_check_table_passes_and_skips_misaligned_grouped():
    table = check_table(
        make_case(MoEShape(33, 7, 13, 3, 2), dtype="float32"), ["loop", "sorted_grouped"]
    )
    assert table["check"].tolist() == ["PASS", "skipped"] and "hidden" in table["reason"][1]


def test_a_broken_strategy_is_a_fail_row_a_wrong_record_and_fails_its_cell(monkeypatch, cpu_facts):
    fn = dispatch.dispatch_padded
    monkeypatch.setattr(dispatch, "dispatch_padded", lambda x, r, e, **kw: fn(x, r, e, **kw) * 0)
    case = make_case(MoEShape(33, 16, 32, 3, 2), dtype="float32")
    table = check_table(case, ["loop", "padded"])
    assert table["check"].tolist() == ["PASS", "FAIL"]
    records = suite._strategy_records(table, case, "strategy_check", cpu_facts)
    assert [(r.implementation, r.status) for r in records] == [
        ("dispatch_loop", "ok"), ("dispatch_padded", "wrong"),
    ]  # fmt: skip
    with pytest.raises(AssertionError, match="1 check"):
        require_passed(table, "strategies")


def test_make_case_bad_dtype_is_named():
    with pytest.raises(ValueError, match="dtype"):
        make_case(MoEShape(8, 8, 8, 4, 2), dtype="int8")


@pytest.mark.slow
def test_the_plain_comparator_is_timed_beside_every_chosen_dispatch(records):
    plain = {"forward": "dispatch_loop_compiled", "forward_backward": "dispatch_loop"}
    plain.update({case: "dispatch_loop" for case in bench.SEED_CASES})
    for case, comparator in plain.items():
        recs = {r.implementation: r for r in records if r.case == case}
        assert recs[comparator].status == "ok", case
        chosen = [r for r in recs.values() if r.headline]
        assert len(chosen) == 1 and chosen[0].variant == chosen[0].implementation, case
        assert chosen[0].metrics["variant_source"] in ("measured", "cached")


@pytest.fixture
def variants_here(tmp_path, monkeypatch):
    """A fresh choice cache, and a config of three strategies besides the plain comparator."""
    monkeypatch.setenv("KERNEL_WORKBOOK_VARIANT_CACHE", str(tmp_path))
    return dataclasses.replace(
        CFG, strategies=("loop", "sorted_segments", "padded"), compile=(), backward=False
    )


def _slowed(fn):
    def slow(*args, **kwargs):
        time.sleep(0.02)  # far beyond the tiny case on a loaded machine
        return fn(*args, **kwargs)

    return slow


def _dispatch(records):
    return {r.implementation: r for r in records if r.implementation.startswith("dispatch_")}


def test_a_slow_strategy_is_never_chosen(monkeypatch, cpu_facts, variants_here):
    monkeypatch.setattr(
        dispatch, "dispatch_sorted_segments", _slowed(dispatch.dispatch_sorted_segments)
    )
    recs = _dispatch(bench.section_throughput(variants_here, cpu_facts))
    slow = recs["dispatch_sorted_segments"]
    assert slow.status == "ok" and slow.variant not in (None, slow.implementation)
    assert not slow.headline and recs[slow.variant].headline
    assert recs["dispatch_loop"].variant is None  # the eager loop is no variant here
    again = _dispatch(bench.section_throughput(variants_here, cpu_facts))
    assert again[slow.variant].metrics["variant_source"] == "cached"


def _timed(implementation: str, rounds_ms: tuple) -> rec.Record:
    return rec.Record(
        "moe", "forward", implementation, "cpu", "cpu", median_ms=rounds_ms[0],
        round_medians_ms=rounds_ms, baseline="dense_gemm", ratio_vs_baseline=1 / rounds_ms[0],
    )  # fmt: skip


def test_a_strategy_slower_than_the_plain_compiled_loop_is_flagged(cpu_facts, variants_here):
    # rounds as a quiet machine would time them: no timing noise in this test
    records = [
        _timed("dispatch_loop", (9.0,) * 10),
        _timed("dispatch_padded", (2.0, 2.1) * 5),
        _timed("dispatch_sorted_segments", (1.0, 1.1) * 5),
        _timed("dispatch_loop_compiled", (1.5, 1.6) * 5),
    ]
    case = Case("moe", "forward", {"T": 1}, "float32", "forward")
    got = bench.chosen_headline(
        records, case, cpu_facts, comparator="dispatch_loop_compiled", key="moe.forward_vs_dense"
    )
    by_name = {r.implementation: r for r in got}
    assert by_name["dispatch_sorted_segments"].headline == "moe.forward_vs_dense"
    assert any(
        "slower than its plain comparator dispatch_loop_compiled" in f
        for f in by_name["dispatch_padded"].flags
    )
    assert not by_name["dispatch_sorted_segments"].flags
    assert by_name["dispatch_loop"].variant is None and not by_name["dispatch_loop"].flags


def test_a_broken_fast_strategy_is_wrong_and_never_chosen(monkeypatch, cpu_facts, variants_here):
    monkeypatch.setattr(dispatch, "dispatch_padded", lambda x, *a, **kw: torch.zeros_like(x))
    recs = _dispatch(bench.section_throughput(variants_here, cpu_facts))
    broken = recs["dispatch_padded"]
    assert broken.status == "wrong" and broken.median_ms is None
    assert broken.variant not in (None, "dispatch_padded") and not broken.headline
