"""The tolerance table and the checks' teeth: a broken pattern or gradient is `wrong`."""

import dataclasses

import pytest
import torch

from kernel_lib.attention import bench, candidates, flex, patterns
from kernel_lib.attention.baselines import sdpa_attention
from kernel_lib.attention.checks import (
    TOLERANCES,
    backward_check,
    correctness_table,
    forward_check,
)
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.patterns import PatternConfig

from .conftest import FLEX_BLOCK, FLEX_SHAPE, qkv_for

CFG = AttentionBenchConfig(
    batch=FLEX_SHAPE.batch,
    heads=FLEX_SHAPE.heads,
    seq_len=FLEX_SHAPE.seq_len,
    head_dim=FLEX_SHAPE.head_dim,
    block_sizes=(FLEX_BLOCK,),
    window=17,
    windows=(17,),
    windows_seq_len=FLEX_SHAPE.seq_len,
    prefix_len=30,
    seq_lens=(FLEX_SHAPE.seq_len,),
    reps=6,
    min_time_s=0.01,
)


def test_every_tolerance_has_a_derivation():
    for (mode, dtype), tol in TOLERANCES.items():
        assert tol.why and 0 < tol.value < 0.1, (mode, dtype)


def test_causal_mask_replaced_by_full_is_wrong(monkeypatch, cpu_facts):
    broken = dataclasses.replace(patterns.PATTERNS["causal"], mask_mod=None, is_causal=False)
    monkeypatch.setitem(patterns.PATTERNS, "causal", broken)
    flex._pattern.cache_clear()  # the cached mods were built from the unbroken entry
    monkeypatch.setattr(flex, "_FIRST_CALLS", {})
    records = bench.forward_case(
        CFG,
        CFG.pattern("causal"),
        CFG.shape(),
        facts=cpu_facts,
        variant=flex.FlexVariant(FLEX_BLOCK),
        case="causal",
        section="patterns",
    )
    flex._pattern.cache_clear()
    status = {(r.implementation, r.mode): r.status for r in records}
    assert status[(candidates.FLEX, "forward")] == "wrong"
    assert status[(candidates.FLEX, "first_call")] == "wrong"  # the compile's output, checked too
    assert status[("sdpa_math", "forward")] == "wrong"  # SDPA took the pattern as full too
    assert status[(candidates.NAIVE, "forward")] == "ok"  # the dense mask was left intact
    # shown as FAIL, not raised: the notebook goes on to save them and the runner fails it
    table = correctness_table(records)
    assert table.loc[("causal", "forward"), candidates.FLEX] == "FAIL"
    assert table.loc[("causal", "forward"), candidates.NAIVE] == "PASS"


def test_wrong_gradient_fails_the_backward_check():
    q, k, v = (t.requires_grad_(True) for t in qkv_for(33, 2))
    grad_out = torch.randn(q.shape)
    config = PatternConfig("causal")
    check = backward_check(config, q, k, v, grad_out)
    out = sdpa_attention(q, k, v, backend="sdpa_math", sdpa_kwargs={"is_causal": True})
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
    assert check((dq, dk, dv)).passed
    assert not check((dq, dk, dv * 1.01)).passed


def test_row_sampled_forward_check_sees_the_sampled_rows():
    q, k, v = qkv_for(1100, 1, batch=1)
    config = PatternConfig("causal")
    check = forward_check(config, q, k, v)
    out = sdpa_attention(q, k, v, backend="sdpa_math", sdpa_kwargs={"is_causal": True})
    assert check(out).passed and "sampled rows" in check(out).reference
    out[..., -1, :] += 1.0  # the last row is always sampled
    assert not check(out).passed


@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_unknown_dtype_has_no_tolerance(mode):
    from kernel_lib.attention.checks import tolerance

    with pytest.raises(ValueError, match="float64"):
        tolerance(mode, "float64")
