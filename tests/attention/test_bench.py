"""The benchmark building blocks and suite on the shared compiled shape (no extra compiles)."""

import dataclasses

import pytest

from kernel_lib.attention import bench
from kernel_lib.attention.checks import check_patterns, error_bound
from kernel_lib.attention.shapes import AttentionShape, attention_flops

from .conftest import FLEX_BLOCK, FLEX_SHAPE, flex_config

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
    "attn_block_size": FLEX_BLOCK,
    "attn_reps": 2,
    "attn_windows": [17],
    "attn_seq_lens": [FLEX_SHAPE.seq_len],
}


def test_suite_records():
    records = bench.suite(PARAMS)
    by_key = {(r.case, r.implementation): r for r in records}
    flex = by_key[("causal", bench.FLEX)]
    assert flex.status == "ok" and flex.baseline in ("sdpa_flash", "sdpa_math")
    assert flex.ratio_vs_baseline > 0 and flex.metrics["dense_flops"] > flex.flops
    assert by_key[("softcap", "sdpa_math")].status == "skipped"
    assert by_key[("causal_backward", bench.FLEX)].reason.startswith("backward")
    assert "ideal_speedup" in by_key[("causal_sliding_window_w17", bench.FLEX)].metrics
    assert by_key[("causal_first_call", bench.FLEX)].reps == 1
    assert all(r.status != "failed" for r in records)
    assert all(r.topic == "attention" for r in records)


def test_check_patterns_table():
    table = check_patterns(
        FLEX_SHAPE,
        [flex_config("causal"), flex_config("softcap")],
        device="cpu",
        block_size=FLEX_BLOCK,
    )
    assert list(table["result"]) == ["PASS", "PASS"]
    assert list(table["sdpa_vs_fp64"])[1] == "n/a"


def test_naive_skipped_when_scores_too_large():
    huge = dataclasses.replace(FLEX_SHAPE, batch=64, heads=64, seq_len=4096)
    calls = bench._implementations(flex_config("causal"), huge, _StubTensor(), ("naive",))
    assert "GiB of scores" in str(calls["attention_naive"])


class _StubTensor:
    dtype, device = None, "cpu"

    def element_size(self):
        return 4


def test_flops_count_needed_and_dense():
    shape = AttentionShape(1, 1, 4, 16)
    needed, dense = attention_flops(flex_config("causal"), shape)
    assert (needed, dense) == (4 * 16 * 10, 4 * 16 * 16)


def test_error_bound_is_stable_text():
    assert error_bound(7.2e-7) == "<=1e-06" and error_bound(0.0) == "0"


@pytest.mark.parametrize("field, value", [("seq_len", 0), ("heads", -1), ("dtype", "fp8")])
def test_bad_shape(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(FLEX_SHAPE, **{field: value})
