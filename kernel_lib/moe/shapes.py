"""The MoE problem size: fields named as the notebook's parameters, record keys in the topic's
letters (LETTERS: T tokens, D model, F ffn, E experts, K top-k)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from kernel_lib.moe.capacity import expert_capacity

# field -> its key in a record's shape (and record id); the other fields keep their names
LETTERS = {"tokens": "T", "hidden": "D", "ffn": "F", "experts": "E", "top_k": "K"}


@dataclass(frozen=True)
class MoEShape:
    """One MoE problem: x (T, D), E experts of width F, K experts per token, expert e's router
    logit lowered by imbalance * e, `capacity` rows per expert (None: dropless)."""

    tokens: int
    hidden: int
    ffn: int
    experts: int
    top_k: int
    imbalance: float = 0.0
    capacity: int | None = None

    def __post_init__(self):
        if self.tokens < 0:
            raise ValueError(f"tokens={self.tokens} must be >= 0")
        for field in ("hidden", "ffn", "experts"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k={self.top_k} must be in [1, experts={self.experts}]")
        if not math.isfinite(self.imbalance):
            raise ValueError(f"imbalance={self.imbalance} must be finite")
        if self.capacity is not None and self.capacity < 0:
            raise ValueError(f"capacity={self.capacity} must be >= 0 (or None: dropless)")

    def with_capacity_factor(self, capacity_factor: float) -> MoEShape:
        """This shape in capacity mode: C = ceil(capacity_factor x T x K / E) rows per expert."""
        assignments = self.tokens * self.top_k
        capacity = expert_capacity(assignments, self.experts, capacity_factor=capacity_factor)
        return replace(self, capacity=capacity)

    def as_dict(self) -> dict:
        """The record shape: T, D, F, E, K, imbalance, capacity."""
        return {LETTERS.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}
