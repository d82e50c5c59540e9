import importlib

import pytest
import torch

from kernel_lib.moe import dispatch
from kernel_lib.moe.layers import MoELayerConfig
from kernel_lib.moe.strategies import ELSEWHERE, STRATEGIES, dispatch_fn, run_strategy, unavailable
from kernel_lib.params import load_plan
from tests.moe.conftest import make_experts, random_routing


def test_registry_names_are_the_dispatch_functions():
    for name in STRATEGIES:
        module = importlib.import_module(ELSEWHERE.get(name, "kernel_lib.moe.dispatch"))
        assert dispatch_fn(name) is getattr(module, f"dispatch_{name}")


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(ValueError, match="strategy='magic'.*sorted_grouped"):
        dispatch_fn("magic")
    with pytest.raises(ValueError, match="strategy"):
        MoELayerConfig(hidden=16, ffn=32, strategy="magic")


def test_run_strategy_passes_capacity_to_padded_only():
    experts, routing = make_experts(3, 16, 32), random_routing(10, 3, 2)
    x = torch.randn(10, 16)
    with pytest.raises(ValueError, match="capacity=1"):
        run_strategy("padded", x, routing, experts, capacity=1)
    torch.testing.assert_close(
        run_strategy("loop", x, routing, experts, capacity=1),
        dispatch.dispatch_loop(x, routing, experts),
    )


def test_compiled_grouped_mm_needs_bfloat16():
    experts = make_experts(2, 16, 32)
    x = torch.randn(4, 16)
    assert unavailable("sorted_grouped", x, experts) is None
    assert "bfloat16 only" in unavailable("sorted_grouped", x, experts, compiled=True)
    bf16 = make_experts(2, 16, 32, dtype=torch.bfloat16)
    assert unavailable("sorted_grouped", x.bfloat16(), bf16, compiled=True) is None


def test_misaligned_grouped_mm_and_triton_without_gpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter is for tests, never benchmarked
    experts, x = make_experts(2, 7, 13), torch.randn(4, 7)
    assert "hidden=7" in unavailable("sorted_grouped", x, experts)
    if not torch.cuda.is_available():
        assert "GPU" in unavailable("triton", x, experts)


def test_packed_segments_is_forward_only_and_not_compiled_again():
    experts, x = make_experts(2, 16, 32), torch.randn(4, 16)
    assert unavailable("packed_segments", x, experts) is None
    assert "inference only" in unavailable("packed_segments", x, experts, backward=True)
    assert "freezing" in unavailable("packed_segments", x, experts, compiled=True)
    assert "float64" in unavailable("packed_segments", x.double(), experts.double())


def test_padded_max_autotune_is_cpu_only():
    """Inductor offers its C++ GEMM template for CPU tensors only: elsewhere (a meta tensor here
    for a GPU's) max-autotune would have ATen's bmm alone to choose from."""
    experts = make_experts(2, 16, 32)
    reason = unavailable("padded_max_autotune", torch.empty(4, 16, device="meta"), experts)
    assert reason == "Inductor's C++ max-autotune GEMM template: CPU only, not meta"
    assert unavailable("padded_max_autotune", torch.randn(4, 16), experts) is None


@pytest.mark.parametrize("platform", ["h100-quick", "h200-quick"])
def test_the_gpu_quick_plans_time_no_cpu_only_strategy_on_the_presets(platform):
    listed = load_plan(platform).values["moe_preset_strategies"]
    off_cpu, experts = torch.empty(4, 16, device="meta"), make_experts(2, 16, 32)
    cpu_only = {s for s in STRATEGIES if s != "triton" and unavailable(s, off_cpu, experts)}
    assert cpu_only == {"packed_segments", "padded_max_autotune", "per_core", "fused_c"}
    assert not cpu_only & set(listed), f"{platform} times CPU-only strategies on a GPU"
