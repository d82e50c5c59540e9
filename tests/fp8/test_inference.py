import torch
from torch import nn

from kernel_lib.fp8.inference import Fp8InferenceLinear, compare_inference, weight_bytes
from kernel_lib.fp8.numerics import error_metrics


def test_inference_linear_matches_linear_and_stores_fp8():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    layer = Fp8InferenceLinear(linear)
    assert layer.weight_fp8.dtype == torch.float8_e4m3fn and not list(layer.parameters())
    x = torch.randn(2, 9, 64)
    err = error_metrics(linear(x).detach(), layer(x))["rel_error"]
    assert err < 0.06, f"relative error {err}"


def test_weight_bytes_counts_shared_storage_once():
    a = nn.Linear(16, 16, bias=False)
    b = nn.Linear(16, 16, bias=False)
    b.weight = a.weight
    assert weight_bytes(nn.Sequential(a, b)) == 16 * 16 * 4


def test_compare_inference_reports_memory_and_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), nn.Linear(64, 10))
    result = compare_inference(model, torch.randn(20, 64))
    assert result.report.converted == ["0", "2"] and "3" in result.report.not_converted
    # 64x128 + 128x64 weights go from 2 bytes to 1 (+ scales); biases and the last layer stay bf16.
    assert result.fp8_weight_bytes < 0.6 * result.bf16_weight_bytes
    assert result.error_vs_bf16["rel_error"] < 0.08
    assert result.bf16_error_vs_fp32["rel_error"] < result.error_vs_fp32["rel_error"]
    assert list(result.frame().index) == ["fp8 vs bf16", "fp8 vs fp32", "bf16 vs fp32"]
