"""torch._scaled_mm, every call of it: where a CPU's oneDNN has no FP8 matmul for one call (an
AMX Xeon held to an older ISA refused ragged shapes its probe never saw), that call is
`Unsupported` naming its shape, so it is skipped, not failed; any other error raises as it is."""

from __future__ import annotations

import torch

from kernel_lib.checks import Unsupported

# oneDNN's status where it has no implementation for a call, as torch raises it.
ONEDNN_REFUSES = "could not create a primitive descriptor"


def raw_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    out_dtype: torch.dtype,
    use_fast_accum: bool = False,
) -> torch.Tensor:
    """torch._scaled_mm(a, b, scale_a, scale_b): a (M, K) row-major, b (K, N) column-major."""
    try:
        return torch._scaled_mm(
            a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
            use_fast_accum=use_fast_accum,
        )  # fmt: skip
    except RuntimeError as err:
        if a.device.type != "cpu" or ONEDNN_REFUSES not in str(err):
            raise
        shape = f"{a.shape[0]}x{a.shape[1]}x{b.shape[1]}"
        raise Unsupported(f"unsupported: this CPU's oneDNN has no FP8 matmul for {shape}") from err
