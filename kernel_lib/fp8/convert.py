"""Swap the nn.Linear layers of a model for FP8 ones, and say which were left alone and why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
from torch import nn

from kernel_lib.fp8.linear import Fp8Linear, Fp8LinearConfig, check_fp8_dims

ModuleFilter = Callable[[str, nn.Linear], bool]  # (fully qualified name, layer) -> convert it?


@dataclass(frozen=True)
class ConversionReport:
    converted: list[str] = field(default_factory=list)
    not_converted: dict[str, str] = field(default_factory=dict)  # name -> reason

    def frame(self) -> pd.DataFrame:
        rows = [{"layer": n, "converted": True, "reason": ""} for n in self.converted]
        rows += [
            {"layer": n, "converted": False, "reason": r} for n, r in self.not_converted.items()
        ]
        return pd.DataFrame(rows, columns=["layer", "converted", "reason"])


def swap_linears(
    model: nn.Module,
    make: Callable[[nn.Linear], nn.Module],
    *,
    module_filter: ModuleFilter | None = None,
) -> ConversionReport:
    """Replace in place every nn.Linear that passes `module_filter` and whose dimensions suit
    _scaled_mm by make(linear); the rest stay as they are, each with its reason."""
    report = ConversionReport()
    targets = [(name, m) for name, m in model.named_modules() if type(m) is nn.Linear]
    for name, linear in targets:
        if module_filter is not None and not module_filter(name, linear):
            report.not_converted[name] = "excluded by module_filter"
            continue
        reason = check_fp8_dims(linear.in_features, linear.out_features)
        if reason:
            report.not_converted[name] = reason
            continue
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, make(linear))
        report.converted.append(name)
    return report


def convert_to_fp8(
    model: nn.Module,
    *,
    config: Fp8LinearConfig | None = None,
    module_filter: ModuleFilter | None = None,
) -> ConversionReport:
    """In place: nn.Linear -> Fp8Linear sharing the same weight Parameters (for training)."""
    if config is not None and not isinstance(config, Fp8LinearConfig):
        raise TypeError(f"config must be an Fp8LinearConfig, got {type(config).__name__}")
    return swap_linears(
        model, lambda lin: Fp8Linear.from_linear(lin, config), module_filter=module_filter
    )
