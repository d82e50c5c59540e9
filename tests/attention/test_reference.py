"""The dense references: eager flex_attention (the unfused path, no compile) on random shapes
agrees with the fp64 reference, and the reference agrees with SDPA on plain masks."""

import warnings

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from kernel_lib.attention import reference
from kernel_lib.attention.patterns import PatternConfig, build_pattern
from kernel_lib.attention.reference import (
    attention_reference,
    dense_block_sparsity,
    dense_mask,
    output_rows,
    reference_grads,
    reference_output,
    reference_rows,
    sdpa_mask,
)

from .conftest import fp64, pattern_cases, qkv_for


@settings(max_examples=40, deadline=None)
@given(pattern_cases(max_seq_len=70))
def test_eager_flex_matches_reference(case):
    config, seq_len, heads = case
    q, k, v = fp64(*qkv_for(seq_len, heads))
    pattern = build_pattern(config, seq_len=seq_len, num_heads=heads, device="cpu")
    block_mask = None
    if pattern.mask_mod is not None:
        block_mask = create_block_mask(
            pattern.mask_mod, None, None, seq_len, seq_len, device="cpu"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile.*")
        out = flex_attention(q, k, v, score_mod=pattern.score_mod, block_mask=block_mask)
    error = float((out - reference_output(q, k, v, config)).abs().max())
    assert error < 1e-5, f"{config.name} S={seq_len}: max error {error:.2e}"


def test_reference_matches_sdpa_causal():
    q, k, v = fp64(*qkv_for(37, 2))
    ref = attention_reference(q, k, v, mask=dense_mask(PatternConfig("causal"), 37))
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert float((ref - sdpa).abs().max()) < 1e-12


def test_sdpa_mask_carries_bias_and_mask():
    mask = sdpa_mask(PatternConfig("alibi"), 9, 2, torch.float32)
    assert mask.shape == (1, 2, 9, 9) and mask.dtype == torch.float32
    assert torch.isinf(mask[0, :, 0, 1:]).all() and mask[0, 1, 4, 2] < 0  # masked future, past < 0


def test_sdpa_mask_shifts_each_row_before_rounding_the_bias():
    """Sandwich's diagonal bias reaches 128 at 16 heads, where bf16 steps by 0.5: rounded as is,
    the softmax weights move by over 1e-2; shifted by each row's largest attended bias, 4e-4."""
    config, S, H = PatternConfig("sandwich"), 64, 16
    allowed = dense_mask(config, S)
    bias = reference.dense_bias(config, S, H)

    def weights(b):
        return torch.softmax(b.double().masked_fill(~allowed, float("-inf")), dim=-1)

    exact = weights(bias)
    shifted = sdpa_mask(config, S, H, torch.bfloat16)[0]
    assert float(shifted.masked_fill(~allowed, float("-inf")).amax(-1).abs().max()) == 0.0
    assert float((weights(shifted) - exact).abs().max()) < 1e-3
    assert float((weights(bias.to(torch.bfloat16)) - exact).abs().max()) > 1e-2  # teeth


def test_softcap_bounds_scores():
    q, k, v = fp64(*qkv_for(5, 1))
    capped = attention_reference(q * 100, k * 100, v, softcap=1.0)
    uniformish = attention_reference(q * 0, k * 0, v)
    assert float((capped - uniformish).abs().max()) < 2.0  # |score| < 1: no one-hot softmax


def test_row_sampled_reference_matches_full():
    seq_len = 1100  # above reference_rows' threshold
    rows = reference_rows(seq_len)
    assert rows is not None and rows[0] == 0 and rows[-1] == seq_len - 1
    q, k, v = qkv_for(seq_len, 2, batch=1)
    for name in ("alibi", "relative_position_bias", "document"):
        config = PatternConfig(name, max_distance=50)
        full = output_rows(reference_output(q, k, v, config), rows)
        assert torch.allclose(full, reference_output(q, k, v, config, rows=rows), atol=1e-12), name


def test_chunked_reference_grads_match_autograd(monkeypatch):
    monkeypatch.setattr(reference, "CHUNK_BYTES", 8 * 2 * 3 * 29 * 5)  # 5 rows per chunk
    q, k, v = (t.requires_grad_(True) for t in fp64(*qkv_for(29, 3)))
    grad_out = torch.randn(q.shape, dtype=torch.float64)
    config = PatternConfig("alibi")
    expected = torch.autograd.grad(reference_output(q, k, v, config), (q, k, v), grad_out)
    for got, want in zip(reference_grads(q, k, v, grad_out, config), expected):
        assert torch.allclose(got, want, atol=1e-12)


def test_dense_block_sparsity_counts_empty_tiles():
    assert dense_block_sparsity(PatternConfig("causal"), 256, 64) == 100 * 6 / 16
    assert dense_block_sparsity(PatternConfig("full"), 200, 64) == 0.0


def test_gqa_reference_reads_kv_head_h_over_group():
    q, _, _ = qkv_for(9, 6, head_dim=8, seed=2)
    _, k, v = qkv_for(11, 2, head_dim=8, seed=3)
    mask = torch.rand(9, 11, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[:, 0] = True
    out = reference.gqa_reference(*fp64(q, k, v), mask=mask)
    for h in range(6):  # heads 0-2 read KV head 0, heads 3-5 KV head 1
        one = attention_reference(
            *fp64(q[:, h : h + 1], k[:, h // 3 : h // 3 + 1], v[:, h // 3 : h // 3 + 1]), mask=mask
        )
        assert torch.allclose(out[:, h : h + 1], one)
