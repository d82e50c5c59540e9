"""Problem sizes, seeded inputs and FLOP counts for attention benchmarks.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import dense_mask
from kernel_lib.config import DTYPES


@dataclass(frozen=True)
class AttentionShape:
    """One self-attention problem: q, k, v all (B, H, S, D) in `dtype`."""

    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str = "float32"  # a key of kernel_lib.config.DTYPES, as in the parameter files

    def __post_init__(self):
        for field in ("batch", "heads", "seq_len", "head_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "dtype"}


def make_qkv(
    shape: AttentionShape, *, device, seed: int = 0, requires_grad: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded standard-normal q, k, v of `shape` (generated in fp32 on CPU, then moved)."""
    generator = torch.Generator().manual_seed(seed)
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    tensors = [torch.randn(dims, generator=generator) for _ in range(3)]
    return tuple(
        t.to(device=device, dtype=shape.torch_dtype).requires_grad_(requires_grad) for t in tensors
    )


def attention_flops(config: PatternConfig, shape: AttentionShape) -> tuple[float, float]:
    """Forward FLOPs (needed, dense-equivalent): 2 matmuls x 2 FLOP x D per attended pair.

    "needed" counts only the (query, key) pairs the pattern allows; "dense" counts all S^2.
    """
    per_pair = 4.0 * shape.batch * shape.heads * shape.head_dim
    allowed = float(dense_mask(config, shape.seq_len).sum())
    return per_pair * allowed, per_pair * shape.seq_len**2


# Backward does 2.5x the forward matmul work (dQ, dK, dV, and dP recomputation: FA2 paper).
BACKWARD_FLOP_FACTOR = 2.5
