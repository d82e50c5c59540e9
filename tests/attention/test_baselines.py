"""SDPA per backend, FlashAttention and the naive baseline: right answers or a clear reason."""

import pytest
import torch

from kernel_lib.attention import baselines
from kernel_lib.attention.patterns import PATTERNS, PatternConfig
from kernel_lib.attention.reference import reference_output
from kernel_lib.checks import Unsupported

from .conftest import qkv_for


@pytest.mark.parametrize("name", [p for p in PATTERNS if p != "softcap"])
def test_sdpa_math_runs_every_expressible_pattern(name):
    q, k, v = qkv_for(45, 3)
    config = PatternConfig(name, window=6, prefix_len=9, num_global=2, max_distance=7)
    kwargs = baselines.sdpa_inputs(config, 45, 3, dtype=q.dtype, device="cpu")
    out = baselines.sdpa_attention(q, k, v, backend="sdpa_math", sdpa_kwargs=kwargs)
    assert float((out.double() - reference_output(q, k, v, config)).abs().max()) < 1e-5


def test_softcap_has_no_sdpa_form():
    with pytest.raises(Unsupported, match="soft-capping"):
        baselines.sdpa_inputs(PatternConfig("softcap"), 8, 1, dtype=torch.float32, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's missing SDPA kernels")
@pytest.mark.parametrize("backend", ["sdpa_efficient", "sdpa_cudnn"])
def test_missing_sdpa_backend_says_why(backend):
    q, k, v = qkv_for(16, 1)
    with pytest.raises(Unsupported, match=backend):
        baselines.sdpa_attention(q, k, v, backend=backend, sdpa_kwargs={"is_causal": True})


def test_unknown_sdpa_backend():
    q, k, v = qkv_for(4, 1)
    with pytest.raises(ValueError, match="backend='fast'"):
        baselines.sdpa_attention(q, k, v, backend="fast", sdpa_kwargs={})


def test_flash_attn_not_installed_or_wrong_device():
    q, k, v = qkv_for(16, 1)
    with pytest.raises(Unsupported, match="not installed|needs fp16/bf16"):
        baselines.flash_attention(q, k, v, version="flash_attn_2", fa_kwargs={"causal": True})
    with pytest.raises(ValueError, match="version='flash_attn_4'"):
        baselines.flash_attn_function("flash_attn_4")


def test_flash_attn_kwargs_refuse_what_fa_cannot_express():
    assert baselines.flash_attn_kwargs(PatternConfig("causal_sliding_window", window=7)) == {
        "causal": True,
        "window_size": (7, 0),
    }
    with pytest.raises(Unsupported, match="document"):
        baselines.flash_attn_kwargs(PatternConfig("document"))


@pytest.mark.parametrize("name", ["causal", "alibi", "softcap", "document"])
def test_naive_matches_reference(name):
    q, k, v = qkv_for(33, 2)
    config = PatternConfig(name, num_docs=3)
    out = baselines.attention_naive(q, k, v, config)
    assert float((out.double() - reference_output(q, k, v, config)).abs().max()) < 1e-5
