"""Other FP8 linears, timed beside ours when installed: torchao Float8Linear, Transformer Engine."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import torch

from kernel_lib.checks import against
from kernel_lib.fp8.checks import TOLERANCES
from kernel_lib.fp8.linear import scaled_mm_unsupported
from kernel_lib.measure import Candidate


def _torchao_linear(w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    n, k = w.shape
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).to(w.device, torch.bfloat16)
    with torch.no_grad():
        model[0].weight.copy_(w)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    return torch.no_grad()(model)


def _te_linear(w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling

    n, k = w.shape
    layer = te.Linear(k, n, bias=False, params_dtype=torch.bfloat16, device=w.device)
    with torch.no_grad():
        layer.weight.copy_(w)

    @torch.no_grad()
    def forward(x):
        with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling()):
            return layer(x)

    return forward


COMPARATORS = {
    "torchao_float8_linear": ("torchao", _torchao_linear),
    "transformer_engine_linear": ("transformer_engine", _te_linear),
}


def comparator_candidates(
    x: torch.Tensor, w: torch.Tensor, reference
) -> dict[str, Candidate | str]:
    """Per comparator: a Candidate computing x @ w.T (x: (M, K) bf16, w: (N, K)) with `w` loaded
    into it at its first call (an error there is its own `failed` record), checked against
    `reference` (fp64 of the unquantised product) with the FP8 bound; or why it cannot run here
    ('not installed', `_scaled_mm` refused)."""
    refused = scaled_mm_unsupported(x.device)
    out: dict[str, Candidate | str] = {}
    for name, (package, build) in COMPARATORS.items():
        if importlib.util.find_spec(package) is None:
            out[name] = "not installed"
        elif refused:
            out[name] = refused
        else:
            layer = functools.cache(lambda build=build: build(w))
            out[name] = Candidate(
                name,
                lambda layer=layer: layer()(x),
                dtype="float8",
                flops=2.0 * x.shape[0] * x.shape[1] * w.shape[0],
                check=against(
                    reference,
                    reference="fp64 of the unquantised inputs",
                    tolerance=TOLERANCES["vs_unquantised"],
                ),
            )
    return out
