"""The suite on the shared compiled shape: every timed record checked, ratios, headline."""

import dataclasses
from functools import partial

import matplotlib.pyplot as plt
import pytest

from kernel_lib import records as rec
from kernel_lib.attention import bench, bench_decode, bench_sweeps, candidates, plain, plots, suite
from kernel_lib.attention.baselines import SDPA_BACKENDS
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant
from kernel_lib.attention.shapes import AttentionShape, attention_flops
from kernel_lib.checks import Unsupported
from kernel_lib.records import to_frame

from .conftest import FLEX_BLOCK, FLEX_SHAPE, flex_config

pytestmark = pytest.mark.slow  # the attention suite, run once for the module, compiles flex

PARAMS = {
    "attn_batch": FLEX_SHAPE.batch,
    "attn_heads": FLEX_SHAPE.heads,
    "attn_seq_len": FLEX_SHAPE.seq_len,
    "attn_head_dim": FLEX_SHAPE.head_dim,
    "attn_dtype": "float32",
    "attn_patterns": ["causal", "softcap"],
    "attn_window": 17,
    "attn_prefix_len": 30,
    "attn_num_docs": 4,
    "attn_dilation": 3,
    "attn_num_global": 5,
    "attn_softcap": 20.0,
    "attn_block_sizes": [FLEX_BLOCK],
    "attn_causal_dtypes": ["float32", "bfloat16"],
    "attn_cold_compile": False,
    "attn_reps": 6,
    "attn_min_time_s": 0.01,
    "attn_windows": [17],
    "attn_windows_seq_len": FLEX_SHAPE.seq_len,
    "attn_seq_lens": [FLEX_SHAPE.seq_len],
    # bench_decode's sections on tiny sizes (the defaults are the 8k-token decode target)
    "attn_gym_patterns": ["shared_prefix"],
    "attn_decode_heads": 4,
    "attn_decode_kv_heads": 2,
    "attn_decode_head_dim": 16,
    "attn_decode_kv_len": 77,
    "attn_decode_q_len": 3,
    "attn_decode_dtype": "float32",
    "attn_decode_kv_lens": [77],
    "attn_cross_q_len": 13,
    "attn_cross_kv_len": 50,
    "attn_page_size": 32,
    # one gym kernel (test_bench_gym checks them all): vsa at test_bench_gym's shape and tile
    "attn_gym_kernels": ["vsa"],
}


@pytest.fixture(scope="module")
def records():
    return suite.run_suite(PARAMS)


def _by_key(records, dtype="float32"):
    return {(r.case, r.implementation, r.mode): r for r in records if r.dtype == dtype}


def test_every_timed_record_carries_a_passed_check(records):
    timed = [r for r in records if r.status == "ok"]
    assert timed and all(r.check is not None and r.check["pass"] for r in timed)
    assert all(r.status in ("ok", "skipped") for r in records), [r.reason for r in records]
    assert all(r.topic == "attention" for r in records)


@pytest.mark.parametrize("dtype", PARAMS["attn_causal_dtypes"])
def test_ratios_are_over_the_best_of_every_sdpa_backends_record(records, dtype):
    """Each SDPA backend is a record of the causal compare (timed, or skipped with its reason),
    and flex's ratio is over the fastest of those that ran: the headline's baseline is a record."""
    by_key = _by_key(records, dtype)
    sdpa = [by_key[("causal", b, "forward")] for b in SDPA_BACKENDS]
    assert all(r.status == "ok" or (r.status == "skipped" and r.reason) for r in sdpa)
    flex = by_key[("causal", candidates.FLEX, "forward")]
    ran = [r for r in sdpa if r.status == "ok"]
    assert flex.baseline == min(ran, key=lambda r: r.median_ms).implementation
    assert flex.ratio_vs_baseline > 0 and flex.metrics["dense_flops"] > flex.flops


@pytest.mark.parametrize("dtype", PARAMS["attn_causal_dtypes"])
def test_flash_backend_is_a_causal_candidate_skipped_with_its_reason(records, dtype):
    flash = _by_key(records, dtype)[("causal", candidates.FLEX_FLASH, "forward")]
    assert flash.status == "skipped" and "NVIDIA GPU" in flash.reason
    assert not [
        r for r in records if r.implementation == candidates.FLEX_FLASH and r.case != "causal"
    ]


def test_fp32_sdpa_math_past_the_score_memory_is_skipped_under_its_id(monkeypatch, cpu_facts):
    """As fp32 at S=8192 on a GPU (16 GiB of scores): math is skipped with the reason, its record
    id unchanged, and flex's ratio comes from the SDPA backends that ran."""
    cfg = AttentionBenchConfig.from_params(PARAMS)
    case = partial(
        bench.forward_case,
        cfg,
        cfg.pattern("causal"),
        cfg.shape(),
        facts=cpu_facts,
        variant=FlexVariant(FLEX_BLOCK),
        case="causal",
        section="causal_dtypes",
    )
    ids = {rec.record_id(r, "p") for r in case() if r.mode == "forward"}
    monkeypatch.setattr(plain, "MAX_SCORE_BYTES", 1)
    records = [r for r in case() if r.mode == "forward"]
    assert {rec.record_id(r, "p") for r in records} == ids
    by_name = {r.implementation: r for r in records}
    assert by_name["sdpa_math"].status == "skipped"
    assert "GiB of scores" in by_name["sdpa_math"].reason
    ran = [by_name[b] for b in SDPA_BACKENDS if by_name[b].status == "ok"]
    assert (
        ran
        and by_name[candidates.FLEX].baseline == min(ran, key=lambda r: r.median_ms).implementation
    )


def test_pattern_records_carry_the_dense_equivalent_rate(records):
    # the notebook's TFLOP/s plot reads it (a second with_metrics without it once broke nbval)
    flex = _by_key(records)[("causal", candidates.FLEX, "forward")]
    dense = flex.metrics["dense_flops"] / flex.median_ms / 1e9
    assert flex.metrics["dense_tflops"] == pytest.approx(dense)


def test_headline_is_flex_causal_forward_in_each_causal_dtype(records):
    headlines = [
        (r.case, r.implementation, r.mode, r.dtype, r.headline) for r in records if r.headline
    ]
    # the dtype in every key: a platform whose attn_dtype is bf16 lines up with this one
    assert [h for h in headlines if h[0] == "causal"] == [
        ("causal", candidates.FLEX, "forward", "float32", "flex.causal_vs_sdpa.float32"),
        ("causal", candidates.FLEX, "forward", "bfloat16", "flex.causal_vs_sdpa.bfloat16"),
    ]


def test_decode_and_paged_headlines_are_their_flex_forward(records):
    declared = {r.headline: (r.case, r.implementation, r.mode) for r in records if r.headline}
    assert declared[bench_decode.DECODE_HEADLINE] == ("gqa_decode", candidates.FLEX, "forward")
    paged = ("paged_gqa_decode", bench_decode.FLEX_PAGED, "forward")
    assert declared[bench_decode.PAGED_HEADLINE] == paged


def test_causal_in_another_dtype_is_tuned_checked_and_timed_in_it(records):
    """attn_dtype's causal case is the pattern section's; bf16 gets its own variants (the fp32
    upcast among them) and its own comparison against the best SDPA backend in bf16."""
    by_key = _by_key(records, "bfloat16")
    flex = by_key[("causal", candidates.FLEX, "forward")]
    assert flex.metrics["section"] == "causal_dtypes" and flex.check["pass"]
    assert flex.baseline.startswith("sdpa") and by_key[("causal", flex.baseline, "forward")]
    tuned = {
        r.implementation
        for r in records
        if r.dtype == "bfloat16" and r.metrics.get("section") == "flex_variants"
    }
    variants = [
        candidates.variant_name(FlexVariant(FLEX_BLOCK, upcast)) for upcast in (False, True)
    ]
    assert {*variants, candidates.PLAIN} <= tuned
    assert flex.variant in variants
    sections = {r.metrics.get("section") for r in records if r.dtype == "float32"}
    assert "causal_dtypes" not in sections  # attn_dtype's case is the pattern section's


def test_skips_have_reasons(records):
    by_key = _by_key(records)
    assert by_key[("softcap", "sdpa_math", "forward")].status == "skipped"
    assert by_key[("causal", candidates.FLEX, "forward_backward")].reason.startswith("backward")
    assert "not installed" in by_key[("causal", "flash_attn_2", "forward")].reason


def test_window_sweep_is_over_causal_flex(records):
    flex = _by_key(records)[("causal_sliding_window_w17", candidates.FLEX, "forward")]
    assert flex.baseline == bench_sweeps.FLEX_CAUSAL and flex.metrics["ideal_speedup"] > 1


def test_the_window_sweep_and_its_tuning_run_at_windows_seq_len(cpu_facts, monkeypatch):
    """Windows pay off on long sequences: the sweep has its own S, not the pattern sections',
    and with two tiles to choose from the band's variant is tuned there (tune_flex itself, as
    the fixture's causal tuning; here it answers without compiling the second tile)."""
    long = 2 * FLEX_SHAPE.seq_len
    cfg = dataclasses.replace(
        AttentionBenchConfig.from_params(PARAMS),
        windows_seq_len=long,
        block_sizes=(FLEX_BLOCK, 2 * FLEX_BLOCK),
    )
    asked = []

    def tune_flex(cfg, *, facts, pattern, seq_len, progress):
        asked.append((pattern, seq_len))
        return FlexVariant(FLEX_BLOCK), []

    monkeypatch.setattr(bench_sweeps, "tune_flex", tune_flex)
    records = bench_sweeps.window_sweep(cfg, facts=cpu_facts, variant=FlexVariant(FLEX_BLOCK))
    assert asked == [("causal_sliding_window", long)]
    timed = [r for r in records if r.status == "ok" and r.mode == "forward"]
    assert {r.case for r in timed} == {"causal_sliding_window_w17"}
    assert {r.shape["seq_len"] for r in timed} == {long}


def test_one_variant_runs_the_band_as_causal_without_tuning(records):
    """One tile in fp32: nothing to choose, so no tuning compile per tile for the band; the
    sweep runs the causal variant."""
    tuned = {r.case for r in records if r.metrics.get("section") == "flex_variants"}
    assert tuned == {"causal"}
    chosen = _by_key(records)[("causal", candidates.FLEX, "forward")].variant
    assert (
        _by_key(records)[("causal_sliding_window_w17", candidates.FLEX, "forward")].variant
        == chosen
    )


def test_flex_records_name_the_variant_they_ran(records):
    by_key = _by_key(records)
    chosen = candidates.variant_name(FlexVariant(FLEX_BLOCK))
    for key in [("causal", candidates.FLEX, "forward"), ("causal_sliding_window_w17", candidates.FLEX, "forward"),
                ("causal_sliding_window_w17", bench_sweeps.FLEX_CAUSAL, "forward")]:  # fmt: skip
        assert by_key[key].variant == chosen, key
    assert (
        by_key[("causal", candidates.PLAIN, "forward")].status == "ok"
    )  # the tuning's comparator


def test_first_calls_carry_their_check(records):
    first = [r for r in records if r.mode == "first_call"]
    assert first and all(r.reps == 1 and r.check["pass"] for r in first)


def test_naive_skipped_when_scores_too_large():
    huge = _Huge()
    with pytest.raises(Unsupported, match="GiB of scores"):
        candidates._naive(huge, huge, huge, config=flex_config("causal"))


class _Huge:
    shape = (64, 64, 4096, 16)

    def element_size(self):
        return 4


def test_flops_count_needed_and_dense():
    shape = AttentionShape(1, 1, 4, 16)
    needed, dense = attention_flops(flex_config("causal"), shape)
    assert (needed, dense) == (4 * 16 * 10, 4 * 16 * 16)


@pytest.mark.parametrize("field, value", [("seq_len", 0), ("heads", -1), ("dtype", "fp8")])
def test_bad_shape(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(FLEX_SHAPE, **{field: value})


PLOTS = (
    plots.plot_flex_variants,
    plots.plot_pattern_times,
    plots.plot_pattern_tflops,
    plots.plot_window_speedup,
    plots.plot_compile_times,
    plots.plot_seq_sweep,
)


@pytest.mark.parametrize("plot", PLOTS, ids=lambda f: f.__name__)
def test_each_plot_names_the_dtype_and_shape_it_shows(records, plot):
    fig = plot(to_frame(records))
    assert f"head_dim={FLEX_SHAPE.head_dim},heads={FLEX_SHAPE.heads}" in fig.axes[0].get_title()
    assert "float32" in fig.axes[0].get_title()
    plt.close(fig)


@pytest.mark.parametrize("plot", PLOTS, ids=lambda f: f.__name__)
def test_each_plot_of_a_section_that_did_not_run_says_so(records, plot):
    fig = plot(to_frame(records).assign(status="skipped"))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("nothing measured" in t for t in texts)
    plt.close(fig)
