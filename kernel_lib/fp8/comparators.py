"""Other FP8 linears, timed beside ours when installed: torchao Float8Linear, Transformer Engine."""

from __future__ import annotations

import importlib.util

import torch

from kernel_lib.fp8.linear import fp8_matmul_support
from kernel_lib.platform import DeviceFacts
from kernel_lib.records import Record, measured, skipped, with_baseline
from kernel_lib.timing import time_fn

TOPIC = "fp8"
CASE = "linear_forward"


def _torchao_linear(n: int, device: str) -> torch.nn.Module:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    model = torch.nn.Sequential(torch.nn.Linear(n, n, bias=False)).to(device, torch.bfloat16)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    return model


def _te_linear(n: int, device: str) -> torch.nn.Module:
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling

    layer = te.Linear(n, n, bias=False, params_dtype=torch.bfloat16, device=device)

    def forward(x):
        with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling()):
            return layer(x)

    return forward


COMPARATORS = {"torchao_float8_linear": ("torchao", _torchao_linear),
               "transformer_engine_linear": ("transformer_engine", _te_linear)}


def comparator_records(facts: DeviceFacts, *, sizes: list[int], baselines: list[Record],
                       min_time_s: float = 0.2) -> list[Record]:
    """Forward time per n (x: (n, n) bf16, W: (n, n)) of each comparator, against the bf16
    baseline record of the same n; `skipped: not installed` when its package is absent."""
    records = []
    by_n = {r.shape.get("N"): r for r in baselines if r.implementation == "bf16_linear"}
    support = fp8_matmul_support(facts.device)
    for name, (package, build) in COMPARATORS.items():
        for n in sizes:
            shape = {"M": n, "K": n, "N": n}
            if importlib.util.find_spec(package) is None:
                records.append(skipped(TOPIC, CASE, name, "not installed", facts=facts, dtype="float8", shape=shape))
                continue
            if support != "native":
                reason = f"{support}: needs a GPU with FP8 matrix units"
                records.append(skipped(TOPIC, CASE, name, reason, facts=facts, dtype="float8", shape=shape))
                continue
            layer = build(n, facts.device)
            x = torch.randn(n, n, device=facts.device, dtype=torch.bfloat16)
            with torch.no_grad():
                timing = time_fn(lambda: layer(x), device=facts.device, min_time_s=min_time_s)
            record = measured(TOPIC, CASE, name, timing, facts=facts, dtype="float8", shape=shape, flops=2.0 * n**3)
            records.append(with_baseline(record, by_n[n]) if n in by_n else record)
    return records
