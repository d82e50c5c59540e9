"""Weight-only FP8 linear (W8A16) for CPU inference, as FP8 checkpoints (Llama/Qwen3 FP8 per
output channel, DeepSeek-V3 per 128 x 128 block) are served: e4m3fn weights with their
dequantisation scales (`weight_scale_inv`), bf16 activations and output. Decoding is memory-bound,
and an FP8 weight moves half the bytes of a bf16 one.

Letters: x (M, K) bf16 @ W^T, W (N, K) -> (M, N) bf16. Here: the weight's quantisation and its
plain dequantisation, the fp64 reference twin, dequantise-then-`F.linear` (the plain comparator)
and the same through torch.compile; the C kernel that converts FP8 in registers inside the GEMM
is `weight_only_c`."""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernel_lib.checks import Unsupported
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.scaling import BLOCK, Granularity

# the scalings of a weight-only FP8 checkpoint -> the quantisation granularity of W (N, K)
SCALINGS = {"channel": Granularity.ROWWISE, "block": Granularity.BLOCKWISE}
FORMAT = "e4m3fn"  # the format FP8 checkpoints store weights in
RECOMPILE_LIMIT = 64  # graphs of compiled_dequant_linear per process (one per shape)


class Fp8Weight(NamedTuple):
    """W (N, K) as e4m3fn bytes and fp32 dequantisation scales: (N, 1) per output channel or
    (ceil(N/128), ceil(K/128)) per 128 x 128 block; W ~= data * scale_inv (broadcast)."""

    data: torch.Tensor
    scale_inv: torch.Tensor
    scaling: str  # a key of SCALINGS

    @property
    def granularity(self) -> Granularity:
        return SCALINGS[self.scaling]

    @property
    def nbytes(self) -> int:
        """The layer's weight bytes: FP8 data and fp32 scales."""
        return self.data.numel() * self.data.element_size() + self.scale_inv.numel() * 4


def scaling_of(name: str) -> str:
    if name not in SCALINGS:
        raise ValueError(f"scaling={name!r} must be one of {list(SCALINGS)}")
    return name


def quantize_weight(w: torch.Tensor, scaling: str = "channel") -> Fp8Weight:
    """W (N, K) quantised to e4m3fn with a dynamic scale per output channel or 128 x 128 block
    (`quantize`; NaN/inf stay NaN)."""
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D (N, K), got shape {tuple(w.shape)}")
    q = quantize(w.float(), fmt=FORMAT, granularity=SCALINGS[scaling_of(scaling)], nonfinite="nan")
    return Fp8Weight(q.data, q.inverse_scale.float().contiguous(), scaling)


def dequantize_weight(w: Fp8Weight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """data * scale_inv in fp32 (one rounding), as `dtype`. Block scales multiply W zero-padded
    to whole blocks and viewed as (N/128, 128, K/128, 128), then cropped (Inductor compiles the
    index gather of `scaling.broadcast_scale` wrong at ragged K: NaN, torch 2.13)."""
    data = w.data.float()
    if w.scaling == "channel":
        return (data * w.scale_inv).to(dtype)
    (n, k), (nb, kb) = data.shape, w.scale_inv.shape
    blocks = F.pad(data, (0, kb * BLOCK - k, 0, nb * BLOCK - n)).view(nb, BLOCK, kb, BLOCK)
    out = (blocks * w.scale_inv[:, None, :, None]).view(nb * BLOCK, kb * BLOCK)
    return out[:n, :k].to(dtype)


def weight_only_reference(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """fp64 x @ (data * scale_inv)^T by the definitions alone: every FP8 byte's value (NaN codes
    NaN), its scale looked up by the obvious block indices."""
    n, k = w.data.shape
    values = w.data.double()  # exact: every e4m3fn value is an fp64 value
    if w.scaling == "channel":
        scale = w.scale_inv.double().reshape(n, 1)
    else:
        rows, cols = torch.arange(n) // BLOCK, torch.arange(k) // BLOCK
        scale = w.scale_inv.double()[rows[:, None], cols[None, :]]
    return x.double() @ (values * scale).t()


def dequant_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """The plain comparator: W dequantised to bf16 per call, then `F.linear`."""
    return F.linear(x, dequantize_weight(w, torch.bfloat16))


@functools.cache
def _compiled():
    # dynamo's automatic dynamic shapes: a second M recompiles with M symbolic, so the decode
    # and prefill rows of one weight share a graph (M = 1 is specialised: 3 graphs at cpu sizes)
    return torch.compile(dequant_linear)


def compiled_dequant_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """`dequant_linear` through torch.compile (Inductor fuses the dequantisation). Raises
    Unsupported once RECOMPILE_LIMIT graphs were compiled in this process."""
    try:
        with torch._dynamo.config.patch(
            recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True
        ):
            return _compiled()(x, w)
    except torch._dynamo.exc.FailOnRecompileLimitHit as why:
        raise Unsupported(
            f"compiled_dequant_linear: recompile limit ({RECOMPILE_LIMIT} graphs) hit: "
            f"{str(why).splitlines()[0][:120]}"
        ) from None
