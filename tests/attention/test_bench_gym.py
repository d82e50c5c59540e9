"""bench_gym's sections on the shared odd shape: every flex record checked and PASS, SDPA and
compiled CPU flex skipped with their reasons where they cannot run, the temporal heads' block
sparsity from flex equal to the dense count, a row-sampled check with teeth, and the new
parameters refused with their names."""

import pytest
import torch

from kernel_lib.attention import bench_gym, tables
from kernel_lib.attention.checks import rows_check
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.measure import MIN_ROUNDS
from kernel_lib.platform import device_facts
from tests.attention.conftest import flex_bench_config

# test_mla's and test_temporal_heads' shapes, so a run of the three compiles each graph once
MLA_DIMS = {"mla_kv_lora_rank": 40, "mla_nope_dim": 16, "mla_rope_dim": 16, "mla_v_dim": 24}
CFG = flex_bench_config(
    prefix_len=13, temporal_frames=6, reps=MIN_ROUNDS, min_time_s=0.01, **MLA_DIMS
)


@pytest.fixture(scope="module")
def records():
    return bench_gym.gym_kernels(CFG, facts=device_facts(), block_size=64)


def _by(records, case):
    return {r.implementation: r for r in records if r.case == case}


@pytest.mark.slow
def test_flex_paths_pass_their_checks_and_get_a_ratio(records):
    mla, heads = _by(records, "mla"), _by(records, "temporal_heads")
    for record in (mla["flex_mla"], mla["flex_mla_absorbed"], heads["flex_temporal_heads"]):
        assert record.status == "ok" and record.check["pass"], record
        assert record.ratio_vs_baseline is not None  # over the best SDPA backend that ran
    assert {r.metrics["section"] for r in records} == set(bench_gym.SECTIONS)


@pytest.mark.slow
def test_jetspec_and_vsa_flex_pass_with_their_block_sparsity(records):
    for case, implementation in [
        ("jetspec_tree", "flex_attention_compiled"),
        ("jetspec_training", "flex_attention_compiled"),
        ("vsa", bench_gym.FLEX_VSA),
    ]:
        by = _by(records, case)
        flex, naive = by[implementation], by["attention_naive"]
        assert flex.status == "ok" and flex.check["pass"] and naive.check["pass"], flex
        assert flex.ratio_vs_baseline is not None and 0 <= flex.metrics["block_sparsity_%"] < 100
    jetspec = _by(records, "jetspec_tree")["flex_attention_compiled"]
    assert (jetspec.shape["q_len"], jetspec.shape["kv_len"]) == (CFG.jetspec_q_len, CFG.seq_len)
    vsa = _by(records, "vsa")[bench_gym.FLEX_VSA]  # 4 tiles of 64, ceil(4 / 8) = 1 kept
    assert vsa.shape["top_k"] == 1 and vsa.metrics["block_sparsity_%"] == 75.0


@pytest.mark.slow
def test_activation_runs_naive_and_skips_sdpa_and_cpu_flex_with_reasons(records):
    for name in CFG.activations:
        case = _by(records, f"activation_{name}")
        assert case["activation_naive"].status == "ok" and case["activation_naive"].check["pass"]
        assert case["sdpa_math"].status == "skipped" and "softmax" in case["sdpa_math"].reason
        flex = case["flex_activation"]
        assert flex.status == "skipped" and "lse" in flex.reason, flex.reason


def test_temporal_heads_sparsity_table_flex_equals_reference():
    table = tables.temporal_heads_sparsity(CFG, block_size=32)
    assert list(table.index) == ["spatial heads", "temporal heads", "all"]
    assert (table["flex_%"] == table["reference_%"]).all()


def test_row_sampled_check_has_teeth():
    rows = torch.tensor([0, 7])
    ref = torch.randn(1, 2, 9, 4, generator=torch.Generator().manual_seed(0)).double()
    check = rows_check(lambda: ref[..., rows, :], rows, name="x", dtype="float32")
    assert check(ref.float()).passed
    broken = ref.float().clone()
    broken[..., 7, 0] += 1.0
    assert not check(broken).passed


@pytest.mark.parametrize(
    "field, value",
    [
        ("gym_kernels", ["mla", "nope"]),
        ("activations", ["swish"]),
        ("mla_rope_dim", 5),
        ("mla_kv_lora_rank", 0),
        ("temporal_frames", 5000),
        ("temporal_width", 0),
        ("jetspec_q_len", 2000),
        ("vsa_keep", 1.5),
        ("vsa_keep", 0),
    ],
)
def test_bad_parameters_are_named(field, value):
    with pytest.raises(ValueError, match=f"attn_{field}"):
        AttentionBenchConfig(**{field: value})


def test_naive_baselines_refuse_scores_over_the_memory_limit(monkeypatch):
    """Teeth: with the limit below this shape's scores, the temporal-heads and activation
    sections record naive skipped with the reason instead of materialising them."""
    monkeypatch.setattr("kernel_lib.attention.plain.MAX_SCORE_BYTES", 1024)
    facts = device_facts()
    heads = _by(bench_gym.time_temporal_heads(CFG, facts=facts, block_size=64), "temporal_heads")
    acts = bench_gym.time_activations(CFG, facts=facts, block_size=64)
    for record in [
        heads["attention_naive"],
        *(r for r in acts if r.implementation == "activation_naive"),
    ]:
        assert record.status == "skipped" and "GiB of scores" in record.reason, record
