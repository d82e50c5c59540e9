"""Attention shapes of inference: grouped-query heads (GQA/MQA), decoding against a long KV cache
(bottom-right causal alignment) and cross-attention (Lq != Lk, optionally per-document).

Legend: B batch, Hq query heads, Hkv key/value heads (Hq a multiple of Hkv; Hkv = 1 is MQA),
Lq query positions, Lk key positions, D head dim. q: (B, Hq, Lq, D); k, v: (B, Hkv, Lk, D).
Decode queries are the last Lq positions of the sequence: query i sits at Lk - Lq + i and sees
keys j <= Lk - Lq + i (bottom-right alignment; SDPA's is_causal aligns top-left instead).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from kernel_lib.attention import masks
from kernel_lib.attention.flex import call_flex
from kernel_lib.config import DTYPES
from kernel_lib.profiling.phases import phase

# What a query may see: every key (cross-attention), bottom-right causal (decode), or keys of
# its own document (cross-attention over packed documents).
MASKS = ("none", "causal", "document")


@dataclass(frozen=True)
class DecodeShape:
    """One inference attention problem; `docs` (document mask only): per document, (query
    tokens, key tokens), in order, summing to (Lq, Lk)."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    dtype: str = "float32"
    mask: str = "causal"
    docs: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        for field in ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")
        if self.mask not in MASKS:
            raise ValueError(f"mask={self.mask!r} is unknown; valid: {', '.join(MASKS)}")
        if self.mask == "causal" and self.q_len > self.kv_len:
            raise ValueError(f"q_len={self.q_len} must be <= kv_len={self.kv_len} (causal)")
        if self.mask == "document":
            sums = tuple(sum(d[i] for d in self.docs) for i in (0, 1))
            if sums != (self.q_len, self.kv_len) or any(min(d) < 1 for d in self.docs):
                raise ValueError(
                    f"docs={self.docs} must be (query, key) lengths >= 1 summing to "
                    f"(q_len, kv_len)={(self.q_len, self.kv_len)}"
                )

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def as_dict(self) -> dict:
        """The numeric sizes (a record's shape; the mask is in the case name)."""
        return {k: v for k, v in asdict(self).items() if k not in ("dtype", "mask", "docs")}


def make_inputs(shape: DecodeShape, *, device, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded standard-normal q (B, Hq, Lq, D), k, v (B, Hkv, Lk, D), fp32 on CPU then moved."""
    generator = torch.Generator().manual_seed(seed)
    B, D = shape.batch, shape.head_dim
    dims = [(B, shape.heads, shape.q_len, D)] + [(B, shape.kv_heads, shape.kv_len, D)] * 2
    return tuple(
        torch.randn(d, generator=generator).to(device=device, dtype=shape.torch_dtype)
        for d in dims
    )


def _doc_ids(lengths: list[int], device) -> Tensor:
    return torch.repeat_interleave(
        torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device)
    )


def dense_mask(shape: DecodeShape) -> Tensor:
    """(Lq, Lk) bool reference of the shape's mask, built from diagonals and blocks."""
    Lq, Lk = shape.q_len, shape.kv_len
    if shape.mask == "causal":  # keys up to diagonal Lk - Lq
        return torch.ones(Lq, Lk, dtype=torch.bool).tril(diagonal=Lk - Lq)
    if shape.mask == "document":
        return torch.block_diag(*(torch.ones(q, k, dtype=torch.bool) for q, k in shape.docs))
    return torch.ones(Lq, Lk, dtype=torch.bool)


def mask_mod(shape: DecodeShape, device: torch.device | str) -> masks.MaskMod | None:
    """The shape's flex mask_mod (None: every key)."""
    if shape.mask == "causal":
        return masks.causal_offset(masks.as_index(shape.kv_len - shape.q_len, device))
    if shape.mask == "document":
        q_ids = _doc_ids([q for q, _ in shape.docs], device)
        kv_ids = _doc_ids([k for _, k in shape.docs], device)
        return masks.cross_document(q_ids, kv_ids)
    return None


@functools.lru_cache(maxsize=32)
def block_mask_for(shape: DecodeShape, device: str, block_size: int) -> BlockMask | None:
    """The cached (Lq, Lk) BlockMask of the shape (None: no mask), broadcast over B and H."""
    mod = mask_mod(shape, device)
    if mod is None:
        return None
    return create_block_mask(
        mod, None, None, shape.q_len, shape.kv_len, device=device, BLOCK_SIZE=block_size
    )


def block_sparsity(shape: DecodeShape, *, block_size: int, device="cpu") -> float:
    """Percent of (query block, key block) tiles flex skips (0 without a mask)."""
    mask = block_mask_for(shape, str(torch.device(device)), block_size)
    if mask is None:
        return 0.0
    visited = float(mask.kv_num_blocks.sum() + mask.full_kv_num_blocks.sum())
    tiles = -(-shape.q_len // block_size) * -(-shape.kv_len // block_size)
    return 100.0 * (1.0 - visited / tiles)


def flex_decode(
    q: Tensor, k: Tensor, v: Tensor, shape: DecodeShape, *, block_size: int = 128
) -> Tensor:
    """Compiled flex_attention (the process-wide function, enable_gqa) of q (B, Hq, Lq, D) over
    k, v (B, Hkv, Lk, D) under the shape's mask; input dtype out. A new (Lq, Lk, dtype) compiles
    once (static shapes); Unsupported where Inductor cannot compile it (flex.call_flex)."""
    with phase("block mask"):
        mask = block_mask_for(shape, str(q.device), block_size)
    gqa = shape.heads != shape.kv_heads
    return call_flex(q, k, v, block_mask=mask, enable_gqa=gqa)


def sdpa_kwargs(shape: DecodeShape, *, device) -> dict:
    """SDPA keyword arguments of the shape: enable_gqa, and the mask as an (Lq, Lk) bool
    attn_mask unless every key is visible (one decode query; cross-attention without mask)."""
    kwargs = {"enable_gqa": shape.heads != shape.kv_heads}
    mask = dense_mask(shape)
    if not bool(mask.all()):
        kwargs["attn_mask"] = mask.to(device)
    return kwargs


def flops(shape: DecodeShape) -> float:
    """Forward FLOPs of the attended pairs: 2 matmuls x 2 FLOP x D per (query head, pair)."""
    pairs = float(dense_mask(shape).sum())
    return 4.0 * shape.batch * shape.heads * shape.head_dim * pairs


def kv_bytes(shape: DecodeShape) -> float:
    """Bytes of the K and V caches read once (what bounds decode)."""
    item = shape.torch_dtype.itemsize
    return 2.0 * shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim * item
