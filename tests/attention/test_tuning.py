"""Flex variants chosen by measurement: a slow or broken variant is never chosen, the plain
compiled comparator is timed beside them, and a variant slower than it is flagged."""

import time

import matplotlib.pyplot as plt
import pytest
import torch

from kernel_lib import variants
from kernel_lib.attention import bench, candidates, plots
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant
from kernel_lib.attention.plain import attention_naive_compiled
from kernel_lib.attention.reference import reference_output
from kernel_lib.attention.shapes import make_qkv
from kernel_lib.records import to_frame

from .conftest import FLEX_BLOCK, FLEX_SHAPE, flex_bench_config, flex_config

CFG = flex_bench_config(block_sizes=(FLEX_BLOCK, 128), reps=6, min_time_s=0.01)
FAST, OTHER = (candidates.variant_name(FlexVariant(b)) for b in CFG.block_sizes)


@pytest.fixture(autouse=True)
def variant_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(variants.CACHE_ENV, str(tmp_path))


def _fake_flex(monkeypatch, *, other=lambda out: out, sleep_s=None):
    """Every variant returns the real kernel's output at FLEX_BLOCK, computed once (so timings
    are the sleeps, not the load of a shared machine); block 128's goes through `other`;
    `sleep_s` maps block size -> seconds added to each call."""
    qkv = make_qkv(FLEX_SHAPE, device="cpu", seed=0)
    done = candidates.flex_attention_compiled(*qkv, CFG.pattern("causal"), block_size=FLEX_BLOCK)

    def fake(q, k, v, config, *, block_size, upcast):
        time.sleep((sleep_s or {}).get(block_size, 0.0))
        return other(done) if block_size == 128 else done

    monkeypatch.setattr(candidates, "flex_attention_compiled", fake)
    return done


def _by_name(records):
    return {r.implementation: r for r in records if r.mode == bench.FORWARD}


def test_a_slow_variant_is_never_chosen(monkeypatch, cpu_facts):
    _fake_flex(monkeypatch, sleep_s={128: 0.005})
    variant, records = bench.tune_flex(CFG, facts=cpu_facts)
    got = _by_name(records)
    assert variant == FlexVariant(FLEX_BLOCK)
    assert got[OTHER].status == "ok" and got[OTHER].median_ms > got[FAST].median_ms
    assert got[FAST].variant == got[OTHER].variant == FAST
    assert got[FAST].metrics["variant_source"] == "measured"


def test_the_plain_compiled_comparator_is_timed_beside_the_variants(monkeypatch, cpu_facts):
    _fake_flex(monkeypatch)
    _, records = bench.tune_flex(CFG, facts=cpu_facts)
    got = _by_name(records)
    plain = got[candidates.PLAIN]
    assert plain.status == "ok" and plain.check["pass"] and plain.samples_ms
    assert got[FAST].baseline == candidates.PLAIN and got[FAST].ratio_vs_baseline is not None
    assert {r.metrics["section"] for r in got.values()} == {"flex_variants"}


def test_the_variants_plot_names_the_choice(monkeypatch, cpu_facts):
    _fake_flex(monkeypatch, sleep_s={128: 0.005})
    _, records = bench.tune_flex(CFG, facts=cpu_facts)
    fig = plots.plot_flex_variants(to_frame(records))
    title = fig.axes[0].get_title()
    assert "chosen here: block64 (float32)" in title
    assert title.endswith("float32 batch=2,head_dim=16,heads=3,seq_len=200")
    plt.close(fig)


def test_a_broken_variant_is_wrong_and_never_chosen(monkeypatch, cpu_facts):
    _fake_flex(monkeypatch, other=lambda out: out.flip(-2), sleep_s={FLEX_BLOCK: 0.005})
    variant, records = bench.tune_flex(CFG, facts=cpu_facts)
    got = _by_name(records)
    assert got[OTHER].status == "wrong" and got[OTHER].median_ms is None
    assert variant == FlexVariant(FLEX_BLOCK)  # the slower one: the only one that passed


def test_a_variant_slower_than_the_plain_comparator_is_flagged(monkeypatch, cpu_facts):
    done = _fake_flex(monkeypatch, sleep_s={FLEX_BLOCK: 0.005, 128: 0.005})
    monkeypatch.setattr(
        candidates, "attention_naive_compiled", lambda *qkv: done
    )  # instant, right
    _, records = bench.tune_flex(CFG, facts=cpu_facts)
    got = _by_name(records)
    assert any("slower than its plain comparator" in f for f in got[FAST].flags), [
        (r.implementation, r.status, r.median_ms, r.flags, r.metrics) for r in got.values()
    ]
    assert not got[candidates.PLAIN].flags


def test_upcast_variants_only_for_reduced_precision():
    assert CFG.flex_variants() == [FlexVariant(FLEX_BLOCK), FlexVariant(128)]
    bf16 = AttentionBenchConfig(dtype="bfloat16", block_sizes=(64,))
    assert bf16.flex_variants() == [FlexVariant(64), FlexVariant(64, upcast=True)]
    assert AttentionBenchConfig(dtype="bfloat16", upcast=False).flex_variants()[-1].upcast is False


def test_plain_comparator_matches_the_reference(flex_qkv):
    config = flex_config("causal")
    out = attention_naive_compiled(*flex_qkv, config)
    error = float((out.double() - reference_output(*flex_qkv, config)).abs().max())
    assert out.dtype == torch.float32 and error < 1e-5, f"max error {error:.2e} vs fp64"
