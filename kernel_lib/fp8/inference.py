"""FP8 inference: weights quantised once and stored as FP8 (no high-precision copy), activations
quantised per call; outputs compared with the bf16 model, weight memory read from tensor storage."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from kernel_lib.fp8.convert import ConversionReport, ModuleFilter, swap_linears
from kernel_lib.fp8.linear import Fp8LinearConfig, dynamic_quantize, scaled_mm
from kernel_lib.fp8.numerics import error_metrics
from kernel_lib.fp8.quantize import Fp8Tensor, quantize


class Fp8InferenceLinear(nn.Module):
    """y = x @ W.T + b with W held as FP8 data + scale buffers. x: (..., K) -> (..., N)."""

    def __init__(self, linear: nn.Linear, config: Fp8LinearConfig | None = None):
        super().__init__()
        self.config = config or Fp8LinearConfig()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        with torch.no_grad():
            qw = quantize(
                linear.weight, fmt=self.config.fmt, granularity=self.config.recipe.granularity
            )
        self.register_buffer("weight_fp8", qw.data)
        self.register_buffer("weight_scale", qw.scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gran = self.config.recipe.granularity
        qx = dynamic_quantize(x.reshape(-1, self.in_features), self.config)
        qw = Fp8Tensor(
            self.weight_fp8, self.weight_scale, self.weight_scale, self.config.fmt, gran
        )
        out = scaled_mm(qx, qw, out_dtype=x.dtype)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


def convert_for_inference(
    model: nn.Module,
    *,
    config: Fp8LinearConfig | None = None,
    module_filter: ModuleFilter | None = None,
) -> ConversionReport:
    """In place: nn.Linear -> Fp8InferenceLinear (the high-precision weights are dropped)."""
    return swap_linears(
        model, lambda lin: Fp8InferenceLinear(lin, config), module_filter=module_filter
    )


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the distinct storages behind the model's parameters and buffers (shared once)."""
    storages = {}
    for t in [*model.parameters(), *model.buffers()]:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def _allocated(device: torch.device) -> int | None:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else None


@dataclass(frozen=True)
class InferenceComparison:
    report: ConversionReport
    bf16_weight_bytes: int
    fp8_weight_bytes: int
    allocator_bytes: dict  # CUDA allocator's view per model; empty on devices without statistics
    error_vs_bf16: dict
    error_vs_fp32: dict
    bf16_error_vs_fp32: dict

    def frame(self) -> pd.DataFrame:
        """The errors of the FP8 and bf16 models against fp32, and of FP8 against bf16."""
        return pd.DataFrame(
            [
                {"comparison": "fp8 vs bf16", **self.error_vs_bf16},
                {"comparison": "fp8 vs fp32", **self.error_vs_fp32},
                {"comparison": "bf16 vs fp32", **self.bf16_error_vs_fp32},
            ]  # fmt: skip
        ).set_index("comparison")


@torch.no_grad()
def compare_inference(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    config: Fp8LinearConfig | None = None,
    module_filter: ModuleFilter | None = None,
) -> InferenceComparison:
    """Run `model` (left untouched) in fp32, in bf16 and converted to FP8 (on bf16) on `inputs`;
    return errors and weight memory measured from storage (and from the CUDA allocator there)."""
    device = next(model.parameters()).device
    reference = model(inputs).double()
    before = _allocated(device)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    mid = _allocated(device)
    fp8 = copy.deepcopy(bf16)
    report = convert_for_inference(fp8, config=config, module_filter=module_filter)
    after = _allocated(device)
    low = inputs.to(torch.bfloat16) if inputs.is_floating_point() else inputs
    out_bf16, out_fp8 = bf16(low), fp8(low)
    allocator = {} if before is None else {"bf16": mid - before, "fp8": after - mid}
    return InferenceComparison(
        report=report,
        bf16_weight_bytes=weight_bytes(bf16),
        fp8_weight_bytes=weight_bytes(fp8),
        allocator_bytes=allocator,
        error_vs_bf16=error_metrics(out_bf16, out_fp8),
        error_vs_fp32=error_metrics(reference, out_fp8),
        bf16_error_vs_fp32=error_metrics(reference, out_bf16),
    )
