"""The FP8 topic's GEMM shapes, one type each, and their record keys (`as_dict`: a record's shape,
hence its record_id).

Convention (torch's `F.linear`, and `_scaled_mm(x, w.t())` as every FP8 path here calls it):
x (M, K) @ W^T with W (N, K) -> (M, N). The grouped GEMM: x (T, K), its rows grouped by expert,
each group @ its expert's W^T with weights (E, N, K) -> (T, N).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch


def _require_sizes(shape) -> None:
    for field in fields(shape):
        value = getattr(shape, field.name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{field.name}={value!r} must be an int >= 1")


@dataclass(frozen=True)
class GemmShape:
    """x (M, K) @ W^T, W (N, K) -> (M, N)."""

    KEYS: ClassVar[tuple[str, ...]] = ("M", "K", "N")  # the record keys of m, k, n

    m: int
    k: int
    n: int

    def __post_init__(self):
        _require_sizes(self)

    @classmethod
    def square(cls, n: int) -> GemmShape:
        """M = K = N = n: the speed sweeps' shape."""
        return cls(n, n, n)

    @classmethod
    def ragged(cls, n: int) -> GemmShape:
        """(n + 5) x 2n x n: the check tables' shape. For n a multiple of 16 (as the parameters
        require) M is odd, a ragged edge; K is two blocks of n."""
        return cls(n + 5, 2 * n, n)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.KEYS, (self.m, self.k, self.n)))


def bf16_operands(shape: GemmShape, *, device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded bf16 x (M, K) and W (N, K) / sqrt(K) (standard normal, generated in fp32 on the CPU,
    then moved): outputs of unit scale."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape.m, shape.k, generator=gen).to(device, torch.bfloat16)
    w = torch.randn(shape.n, shape.k, generator=gen) / shape.k**0.5
    return x, w.to(device, torch.bfloat16)


@dataclass(frozen=True)
class GroupedGemmShape:
    """x (T, K) grouped by expert @ each expert's W^T, weights (E, N, K) -> (T, N); fields named
    as the parameters fp8_grouped_tokens, _dim, _ffn, _experts."""

    KEYS: ClassVar[tuple[str, ...]] = ("T", "K", "N", "E")  # the record keys of the fields

    tokens: int  # T: routed rows, each through its one expert
    dim: int  # K: model width
    ffn: int  # N: expert hidden width
    experts: int  # E

    def __post_init__(self):
        _require_sizes(self)

    @property
    def flops(self) -> float:
        return 2.0 * self.tokens * self.dim * self.ffn

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.KEYS, (self.tokens, self.dim, self.ffn, self.experts)))
