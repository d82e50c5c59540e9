"""What a W8A16 kernel is measured beside, besides bf16: the read ceiling (an int32 `amax` over a
buffer of the FP8 weight's bytes: the fastest a kernel that reads each weight byte once can be
here) and ATen's int8 weight-only GEMM (`torch._weight_int8pack_mm`, the same bytes per weight:
what a PyTorch user on a CPU runs instead), on a per-channel int8 copy of the same weights,
checked against its own fp64 reference."""

from __future__ import annotations

import torch

from kernel_lib.checks import Unsupported
from kernel_lib.fp8.weight_only import Fp8Weight

INT8_MAX = 127


def read_buffer(w: Fp8Weight) -> torch.Tensor:
    """The FP8 weight's bytes (its data, then its scales) in one int32 buffer, padded with zeros
    to whole int32s: what the read ceiling reads."""
    raw = torch.cat(
        [w.data.reshape(-1).view(torch.uint8), w.scale_inv.reshape(-1).view(torch.uint8)]
    )
    padded = torch.zeros(-(-raw.numel() // 4) * 4, dtype=torch.uint8, device=raw.device)
    padded[: raw.numel()] = raw
    return padded.view(torch.int32)


def read(buffer: torch.Tensor) -> torch.Tensor:
    """Every byte of `buffer` read once (its int32 maximum)."""
    return buffer.amax()


def int8_weight(
    w: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` [N, K] as symmetric int8 per output channel: (int8 [N, K], scales [N] in `dtype`, as
    `_weight_int8pack_mm` takes them); an all-zero row gets scale 1."""
    amax = w.abs().amax(dim=1).float()
    scales = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    q = torch.round(w.float() / scales[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scales.to(dtype)


def int8_reference(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp64 of x times the int8 weight times its scales (as stored)."""
    return x.double() @ (q.double() * scales.double()[:, None]).t()


# torch 2.13's AVX-512 CPU kernel reads past the end of a row when K is not a multiple of this
# (measured on an AMX Xeon: garbage at K = 8, 24, 40, 72, 200, a segfault at K = 72 with M >= 16;
# its AVX2 and default kernels were right there). A crash cannot be probed in the process that
# would take it, so no CPU calls it at such a K.
INT8PACK_K_MULTIPLE = 16


def aten_int8_linear(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """ATen's int8 weight-only linear (x [M, K] bf16, q [N, K] int8, scales [N]); Unsupported
    where K is not a multiple of INT8PACK_K_MULTIPLE, or this build has no kernel for the
    device."""
    if q.shape[1] % INT8PACK_K_MULTIPLE:
        raise Unsupported(
            f"torch._weight_int8pack_mm reads out of bounds at K={q.shape[1]}, not a multiple "
            f"of {INT8PACK_K_MULTIPLE}"
        )
    try:
        return torch._weight_int8pack_mm(x, q, scales)
    except NotImplementedError as err:
        raise Unsupported(f"torch._weight_int8pack_mm: {str(err).splitlines()[0]}") from None
    except RuntimeError as err:
        if "Could not run" in str(err):  # the dispatcher has no kernel for this device
            raise Unsupported(f"torch._weight_int8pack_mm on {x.device.type}: no kernel") from None
        raise
