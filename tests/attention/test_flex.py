"""Compiled flex: every pattern vs the fp64 reference on one odd shape, cache hits on repeat
calls, Inductor's refusals and the FLASH backend's as skip reasons, and bad inputs. One
process-wide compiled function; each pattern compiles once."""

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

from kernel_lib.attention import flex
from kernel_lib.attention.checks import forward_check
from kernel_lib.attention.patterns import PATTERNS, PatternConfig, build_pattern
from kernel_lib.attention.reference import dense_block_sparsity, reference_output
from kernel_lib.checks import Unsupported

from .conftest import FLEX_BLOCK, FLEX_SHAPE, flex_config, without_block


@pytest.mark.parametrize("name", list(PATTERNS))
def test_compiled_flex_matches_reference(name, flex_qkv):
    config = flex_config(name)
    out = flex.flex_attention_compiled(*flex_qkv, config, block_size=FLEX_BLOCK)
    error = float((out.double() - reference_output(*flex_qkv, config)).abs().max())
    assert error < 1e-5, f"{name}: max error {error:.2e} vs fp64 (fp32 in)"


@pytest.mark.parametrize("name", ["natten_tiled", "natten_morton", "graphormer_edges"])
def test_a_dropped_block_fails_the_check(name, flex_qkv):
    """Teeth: the pattern's BlockMask (graphormer_edges': every tile) less one tile fails the
    fp64 check the compiled call passes."""
    config, S = flex_config(name), FLEX_SHAPE.seq_len
    check = forward_check(config, *flex_qkv)
    assert check(flex.flex_attention_compiled(*flex_qkv, config, block_size=FLEX_BLOCK)).passed
    mask = flex.block_mask_for(config, S, device="cpu", block_size=FLEX_BLOCK)
    if mask is None:
        everything = lambda b, h, q_idx, kv_idx: q_idx >= 0
        mask = create_block_mask(everything, None, None, S, S, "cpu", BLOCK_SIZE=FLEX_BLOCK)
    score_mod = build_pattern(
        config, seq_len=S, num_heads=FLEX_SHAPE.heads, device="cpu"
    ).score_mod
    out = flex.call_flex(*flex_qkv, score_mod=score_mod, block_mask=without_block(mask))
    assert not check(out).passed


def test_repeat_call_hits_caches(flex_qkv):
    config = flex_config("causal")
    flex.flex_attention_compiled(*flex_qkv, config, block_size=FLEX_BLOCK)
    before = flex.cache_info()
    flex.flex_attention_compiled(*flex_qkv, config, block_size=FLEX_BLOCK)
    after = flex.cache_info()
    assert after.compiled_graphs == before.compiled_graphs, "a repeat call recompiled"
    assert after.block_mask_hits == before.block_mask_hits + 1
    assert after.block_mask_misses == before.block_mask_misses
    first = flex.first_call(config, flex_qkv[0], block_size=FLEX_BLOCK)
    assert first is not None and first.timing.reps == 1


def test_new_window_reuses_the_kernel(flex_qkv):
    flex.flex_attention_compiled(*flex_qkv, flex_config("sliding_window"), block_size=FLEX_BLOCK)
    graphs = flex.compiled_graphs()
    wider = PatternConfig("sliding_window", window=41)  # captured as a tensor: same kernel
    flex.flex_attention_compiled(*flex_qkv, wider, block_size=FLEX_BLOCK)
    assert flex.compiled_graphs() == graphs
    assert flex.first_call(wider, flex_qkv[0], block_size=FLEX_BLOCK).new_graphs == 0


def test_block_sparsity():
    causal = flex.block_sparsity(flex_config("causal"), 256, block_size=64)
    assert causal == pytest.approx(100 * 6 / 16)  # 4x4 tiles, the 6 above the diagonal skipped
    assert flex.block_sparsity(flex_config("full"), 256, block_size=64) == 0.0
    odd = flex.block_sparsity(flex_config("causal"), FLEX_SHAPE.seq_len, block_size=FLEX_BLOCK)
    assert 0 < odd < 100  # never negative when S is not a multiple of the block


@pytest.mark.parametrize("name", list(PATTERNS))
def test_block_sparsity_is_the_dense_expectation(name):
    config = flex_config(name)
    got = flex.block_sparsity(config, FLEX_SHAPE.seq_len, block_size=FLEX_BLOCK)
    assert got == pytest.approx(dense_block_sparsity(config, FLEX_SHAPE.seq_len, FLEX_BLOCK))


def test_block_mask_is_cached_per_key():
    config = flex_config("prefix_lm")
    one = flex.block_mask_for(config, 96, device="cpu", block_size=32)
    assert flex.block_mask_for(config, 96, device="cpu", block_size=32) is one
    assert flex.block_mask_for(config, 96, device="cpu", block_size=64) is not one


def test_backward_on_cpu_is_refused(flex_qkv):
    q = flex_qkv[0].clone().requires_grad_(True)
    with pytest.raises(Unsupported, match="backward"):
        flex.flex_attention_compiled(q, *flex_qkv[1:], flex_config("causal"))


def test_head_dim_torch_accepts_is_accepted():
    q = torch.randn(1, 2, 40, 40)  # D=40: not a power of two, accepted by torch's flex
    out = flex.flex_attention_compiled(q, q, q, flex_config("causal"), block_size=FLEX_BLOCK)
    error = float((out.double() - reference_output(q, q, q, flex_config("causal"))).abs().max())
    assert error < 1e-5, f"D=40: max error {error:.2e}"


def test_compile_failure_is_unsupported(monkeypatch):
    def refuse(*args, **kwargs):
        raise torch._dynamo.exc.BackendCompilerFailed(refuse, RuntimeError("no kernel"), None)

    monkeypatch.setattr(flex, "compiled_flex_attention", lambda: refuse)
    q = torch.randn(1, 1, 8, 3)
    with pytest.raises(Unsupported, match="D=3"):
        flex.flex_attention_compiled(q, q, q, flex_config("full"))


def test_a_refused_lowering_is_unsupported_in_inductors_words(refused_compile):
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(Unsupported, match="D=16") as refused:
        flex.flex_attention_compiled(q, q, q, flex_config("causal"), block_size=FLEX_BLOCK)
    assert refused_compile in str(refused.value)


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA sm_90 device as flash_backend_refusal sees it (no GPU needed), its cache cleared."""
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    flex.flash_backend_refusal.cache_clear()
    yield torch.device("cuda", 0)
    flex.flash_backend_refusal.cache_clear()


def test_flash_backend_refuses_a_cpu():
    reason = flex.flash_backend_refusal(torch.device("cpu"), torch.bfloat16)
    assert "needs an NVIDIA GPU, not cpu" in reason


def test_flash_backend_refuses_a_gpu_before_hopper(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "sm_90+" in flex.flash_backend_refusal(gpu, torch.bfloat16)


def test_flash_backend_refuses_fp32(gpu):
    assert "bf16/fp16" in flex.flash_backend_refusal(gpu, torch.float32)


def test_flash_backend_refuses_a_torch_without_the_backend_option(gpu, monkeypatch):
    monkeypatch.delattr(flex.torch_flex, "FlexKernelOptions")
    assert "BACKEND='FLASH'" in flex.flash_backend_refusal(gpu, torch.bfloat16)


@pytest.mark.parametrize("missing", ["no_such_package.cute", "json.cute"])
def test_flash_backend_refuses_without_flash_attention_4(gpu, monkeypatch, missing):
    monkeypatch.setattr(flex, "FLASH_MODULE", missing)  # its package missing, or only the package
    assert "not installed" in flex.flash_backend_refusal(gpu, torch.bfloat16)


def test_flash_backend_runs_on_hopper_with_flash_attention_4(gpu, monkeypatch):
    monkeypatch.setattr(flex, "FLASH_MODULE", "json")  # any installed module
    assert flex.flash_backend_refusal(gpu, torch.float16) is None


def test_flash_flex_on_a_cpu_is_skipped_not_the_cpu_template(flex_qkv):
    # torch ignores BACKEND on a CPU and would run its C++ template under FLASH's name
    with pytest.raises(Unsupported, match="NVIDIA GPU"):
        flex.flex_attention_flash(*flex_qkv, flex_config("causal"), block_size=FLEX_BLOCK)


def test_bad_shapes_and_types():
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="k.shape"):
        flex.flex_attention_compiled(q, torch.randn(1, 2, 9, 16), q, flex_config("causal"))
    with pytest.raises(ValueError, match="q.shape"):
        flex.flex_attention_compiled(q[0], q[0], q[0], flex_config("causal"))
    with pytest.raises(ValueError, match="seq_len=0"):
        empty = torch.randn(1, 2, 0, 16)
        flex.flex_attention_compiled(empty, empty, empty, flex_config("causal"))
    with pytest.raises(TypeError, match="dtype"):
        half = q.to(torch.float64)
        flex.flex_attention_compiled(half, half, half, flex_config("causal"))
    with pytest.raises(TypeError, match="config"):
        flex.flex_attention_compiled(q, q, q, "causal")


@pytest.mark.parametrize("block_size", [0, 48, 8])
def test_bad_block_size(block_size, flex_qkv):
    with pytest.raises(ValueError, match=f"block_size={block_size}"):
        flex.flex_attention_compiled(*flex_qkv, flex_config("causal"), block_size=block_size)


def test_recompile_limit_raised_past_the_pattern_count():
    flex.compiled_flex_attention()
    assert torch._dynamo.config.recompile_limit >= 2 * len(PATTERNS)


def test_unsupported_device():
    q = torch.randn(1, 2, 8, 16, device="meta")
    with pytest.raises(ValueError, match="device=meta"):
        flex.flex_attention_compiled(q, q, q, flex_config("causal"))


def test_upcast_runs_the_fp32_kernel_and_returns_the_input_dtype(flex_qkv):
    config = flex_config("causal")
    q, k, v = (t.bfloat16() for t in flex_qkv)
    out = flex.flex_attention_compiled(q, k, v, config, block_size=FLEX_BLOCK, upcast=True)
    assert out.dtype == torch.bfloat16
    call = flex.first_call(config, q, block_size=FLEX_BLOCK, upcast=True)
    assert call is not None and call.dtype == "float32"  # the fp32 kernel, compiled once
    error = float((out.double() - reference_output(q, k, v, config)).abs().max())
    assert error < 1e-2, f"max error {error:.2e} vs fp64 (bf16 in, fp32 compute, bf16 out)"
