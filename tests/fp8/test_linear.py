import pytest
import torch
from torch import nn

from kernel_lib.checks import Unsupported, relative_error
from kernel_lib.fp8 import linear
from kernel_lib.fp8.checks import out_tolerance
from kernel_lib.fp8.linear import (
    Fp8Linear,
    Fp8LinearConfig,
    check_fp8_dims,
    fp8_matmul_support,
    scaled_mm,
)  # fmt: skip
from kernel_lib.fp8.numerics import error_metrics
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.reference import fp8_linear_reference

from .conftest import refuse_ragged, with_nonfinite

RECIPES = ["tensorwise_dynamic", "rowwise_dynamic", "tensorwise_delayed"]


def _rel(ref, out):
    return error_metrics(ref, out)["rel_error"]


def _pair(recipe, k=64, n=48, grad_dtype="e5m2", seed=0):
    torch.manual_seed(seed)
    ref = nn.Linear(k, n)
    return ref, Fp8Linear.from_linear(
        ref, Fp8LinearConfig.from_recipe_name(recipe, grad_dtype=grad_dtype)
    )


def test_scaled_mm_gets_inverse_scales():
    a, b = torch.randn(32, 64) * 50, torch.randn(16, 64) / 50
    qa, qb = quantize(a), quantize(b)
    out = scaled_mm(qa, qb, out_dtype=torch.float32)
    err = _rel(a.double() @ b.double().t(), out)
    assert err < 0.06, (
        f"relative error {err}: forward scales instead of inverse ones would be off by ~1e9"
    )


@pytest.mark.parametrize("recipe", RECIPES)
def test_forward_matches_twin_on_3d_input(recipe):
    ref, layer = _pair(recipe)
    x = torch.randn(3, 7, 64)  # 21 rows: not a multiple of 16
    out = layer(x)
    assert out.shape == (3, 7, 48)
    twin = fp8_linear_reference(x, ref.weight, ref.bias, granularity=recipe.split("_")[0])
    assert relative_error(out, twin) <= out_tolerance(recipe.split("_")[0], torch.float32).value
    assert _rel(ref(x).detach(), out.detach()) < 0.08


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("grad_dtype", ["e5m2", "bfloat16"])
def test_backward_close_to_fp32(recipe, grad_dtype):
    ref, layer = _pair(recipe, grad_dtype=grad_dtype)
    x = torch.randn(3, 7, 64, requires_grad=True)
    layer(x).square().sum().backward()
    gx, gw, gb = x.grad.clone(), ref.weight.grad.clone(), ref.bias.grad.clone()
    x.grad = None
    ref.zero_grad()
    ref(x).square().sum().backward()
    for name, got, want in (
        ("x", gx, x.grad),
        ("w", gw, ref.weight.grad),
        ("b", gb, ref.bias.grad),
    ):
        err = _rel(want, got)
        assert err < 0.12, f"grad {name} relative error {err}"


def test_weights_are_parameters_the_optimizer_sees():
    ref, layer = _pair("tensorwise_dynamic")
    names = {n for n, _ in layer.named_parameters()}
    assert names == {"weight", "bias"}
    assert layer.weight is ref.weight


def test_dims_not_multiple_of_16_are_rejected_with_a_reason():
    with pytest.raises(ValueError, match="in_features=30 is not a multiple of 16"):
        Fp8Linear(30, 64)
    with pytest.raises(ValueError, match="out_features=40"):
        Fp8Linear(64, 40)
    assert check_fp8_dims(32, 48) is None


def test_wrong_input_width():
    with pytest.raises(ValueError, match="in_features"):
        Fp8Linear(32, 16)(torch.randn(4, 48))


def test_config_validation():
    with pytest.raises(ValueError, match="grad_dtype"):
        Fp8LinearConfig(grad_dtype="float16")
    with pytest.raises(ValueError, match="nonfinite"):
        Fp8LinearConfig(nonfinite="zero")
    with pytest.raises(ValueError, match="quantizer"):
        Fp8LinearConfig(quantizer="cuda")
    with pytest.raises(ValueError, match="recipe"):
        Fp8LinearConfig.from_recipe_name("fastest")
    with pytest.raises(NotImplementedError, match="triton"):
        Fp8LinearConfig.from_recipe_name("tensorwise_delayed", quantizer="triton")


def test_nonfinite_inputs_come_out_nan_or_raise():
    _, layer = _pair("tensorwise_dynamic")
    x = with_nonfinite(torch.randn(4, 64))
    out = layer(x)
    assert torch.isnan(out).any(), "inf must not be saturated into a finite output"
    raising = Fp8Linear(64, 48, config=Fp8LinearConfig(nonfinite="raise"))
    with pytest.raises(ValueError, match="NaN"):
        raising(x)


def test_delayed_history_and_saturation_stats():
    config = Fp8LinearConfig.from_recipe_name("tensorwise_delayed", track_stats=True)
    layer = Fp8Linear(32, 16, config=config)
    x = torch.randn(8, 32)
    layer(x)
    assert layer.amax_history_x[-1].item() == x.abs().max().item()
    assert layer.last_stats["x"].saturated == 0
    layer(x * 100)  # scale from the history of x, so the new outliers saturate, and are counted
    assert layer.last_stats["x"].saturated > 0


def test_cpu_path_is_onednn_where_it_runs_never_a_rule_by_device():
    refused = linear.cpu_scaled_mm_error()
    assert fp8_matmul_support("cpu") == ("unsupported" if refused else "onednn")
    assert (linear.scaled_mm_unsupported("cpu") is None) == (refused is None)


def test_a_cpu_whose_onednn_refuses_scaled_mm_is_unsupported_with_its_reason(refused_scaled_mm):
    assert fp8_matmul_support("cpu") == "unsupported"
    assert "could not create a primitive descriptor" in linear.scaled_mm_unsupported("cpu")


def test_a_cpu_whose_onednn_refuses_only_ragged_shapes_is_unsupported(refused_ragged):
    assert "could not create a primitive descriptor" in linear.scaled_mm_unsupported("cpu")


def test_a_call_onednn_refuses_is_unsupported_naming_its_shape_and_other_errors_raise(monkeypatch):
    monkeypatch.setattr(torch, "_scaled_mm", refuse_ragged(torch._scaled_mm))
    a, b = quantize(torch.randn(37, 64), fmt="e4m3fn"), quantize(torch.randn(32, 64), fmt="e4m3fn")
    with pytest.raises(Unsupported, match="no FP8 matmul for 37x64x32"):
        scaled_mm(a, b, out_dtype=torch.float32)

    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(torch, "_scaled_mm", broken)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        scaled_mm(a, b, out_dtype=torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA/AMD GPU with FP8 units")
def test_triton_quantizer_on_gpu():
    if fp8_matmul_support("cuda") != "native":
        pytest.skip("needs FP8 matrix units (sm_89+, gfx942+)")
    config = Fp8LinearConfig.from_recipe_name("rowwise_dynamic", quantizer="triton")
    layer = Fp8Linear(256, 128, config=config, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(100, 256, device="cuda", dtype=torch.bfloat16)
    twin = fp8_linear_reference(
        x.float(), layer.weight.float(), layer.bias.float(), granularity="rowwise"
    )
    assert _rel(twin, layer(x).detach()) < 1e-2
