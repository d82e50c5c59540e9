"""AttentionBenchConfig: the notebook's attn_* parameters, validated with the parameter's name."""

import dataclasses

import pytest

from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.patterns import GYM_PATTERNS, PATTERNS, SPEC_PATTERNS


def test_from_params_strips_the_prefix_and_keeps_defaults():
    cfg = AttentionBenchConfig.from_params(
        {"attn_seq_len": 512, "attn_patterns": ["causal"], "x": 1}
    )
    assert cfg.seq_len == 512 and cfg.patterns == ("causal",) and cfg.batch == 1
    assert cfg.shape(128).seq_len == 128 and cfg.pattern("document").num_docs == cfg.num_docs


def test_defaults_cover_every_pattern():
    cfg = AttentionBenchConfig()
    assert set(cfg.patterns) | set(GYM_PATTERNS) | set(SPEC_PATTERNS) == set(PATTERNS)
    # the gym families run in their sections (SPEC_PATTERNS: bench_gym's jetspec, Lq != Lk)
    assert not set(cfg.patterns) & set(GYM_PATTERNS + SPEC_PATTERNS)


@pytest.mark.parametrize("field, value, match", [
    ("batch", 0, "attn_batch=0"),
    ("head_dim", -1, "attn_head_dim=-1"),
    ("window", 2048, "attn_window=2048 must be <= attn_seq_len=1024"),
    ("windows", [32, 8192], "attn_windows=.* all <= attn_windows_seq_len=4096"),
    ("windows_seq_len", 64, "attn_windows_seq_len=64"),
    ("seq_lens", [], "attn_seq_lens"),
    ("patterns", ["causal", "diagonal"], "attn_patterns='diagonal'"),
    ("dtype", "float64", "attn_dtype='float64'"),
    ("block_sizes", [64, 48], "attn_block_sizes"),
    ("block_sizes", [], "attn_block_sizes"),
    ("upcast", "yes", "attn_upcast"),
    ("causal_dtypes", ["bfloat16", "fp8"], "attn_causal_dtypes='fp8'"),
    ("cold_compile", 1, "attn_cold_compile"),
    ("prefix_len", -1, "attn_prefix_len=-1"),
    ("reps", 0, "attn_reps=0"),
    ("gym_kernels", [], r"attn_gym_kernels=\[\] must be a non-empty list"),
    ("activations", [], "attn_activations"),
])  # fmt: skip
def test_bad_parameters_name_themselves(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(AttentionBenchConfig(), **{field: value})


def test_optional_extras_may_be_empty():  # the other dtypes of causal, the timed gym patterns
    assert AttentionBenchConfig(causal_dtypes=[], gym_patterns=[]).gym_patterns == ()


def test_any_head_dim_is_accepted():
    assert AttentionBenchConfig(head_dim=40).shape().head_dim == 40


def test_memory_needs_count_the_reference_in_chunks_not_the_dense_score_matrix():
    cfg = AttentionBenchConfig(batch=4, heads=16, seq_len=8192, head_dim=128, dtype="bfloat16",
                          window=512, windows=(512,), seq_lens=(1024, 16384))  # fmt: skip
    needs = cfg.memory_needs()
    # q, k, v, out of (4, 16, 16384, 128) in bf16 and again in fp64: 5 GiB; the fp64 reference
    # holds one ~1 GiB chunk of scores at a time (three copies), not the 128 GiB (B, H, S, S)
    assert 8 * 2**30 < needs["attn_seq_lens"] < 12 * 2**30
    # the pattern sections at S = 8192 add the backward tensors and SDPA's (1, H, S, S) bias
    assert 10 * 2**30 < needs["attn_seq_len"] < 16 * 2**30
    assert needs["attn_batch"] == needs["attn_heads"] == needs["attn_seq_len"]


@pytest.mark.parametrize("field, small, large", [
    ("seq_len", 512, 4096), ("seq_lens", (256,), (256, 8192)), ("batch", 1, 8),
    ("windows_seq_len", 512, 8192),
    ("heads", 2, 32), ("head_dim", 16, 256),
    ("block_sizes", (64,), (64, 2**14)), ("page_size", 128, 2**20),
    ("decode_kv_len", 1024, 65536), ("decode_q_len", 1, 512), ("decode_kv_lens", (1024,), (2**20,)),
    ("decode_heads", 8, 64), ("decode_head_dim", 64, 256), ("cross_q_len", 200, 20000),
    ("cross_kv_len", 1000, 100000), ("mla_kv_lora_rank", 128, 8192), ("mla_v_dim", 64, 1024),
])  # fmt: skip
def test_memory_needs_grow_with_the_size_they_name(field, small, large):
    def need(value):
        cfg = AttentionBenchConfig(window=64, windows=(64,), **{field: value})
        return cfg.memory_needs()[f"attn_{field}"]

    assert need(large) > need(small)
