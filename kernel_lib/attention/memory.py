"""Estimated peak bytes of one attention case, for `AttentionBenchConfig.memory_needs`: its inputs,
its fp64 reference (in row chunks, never the whole score matrix), its masks.

Legend: B batch, H heads (Hq / Hkv of decode), S sequence length, D head dim, Lq / Lk query / key
lengths; MLA's letters in mla.py.
"""

from __future__ import annotations

from kernel_lib.attention.mla import MLAShape
from kernel_lib.attention.reference import CHUNK_BYTES, FULL_CHECK_MAX_SEQ_LEN
from kernel_lib.attention.shapes import AttentionShape
from kernel_lib.config import parse_dtype


def tiles(length: int, block: int) -> int:
    """`length` rounded up to whole tiles of `block`."""
    return -(-length // block) * block


def case_bytes(shape: AttentionShape, *, backward: bool = False) -> int:
    """One case's inputs and its fp64 reference. The reference never holds the whole
    (B, H, S, S) score matrix: it works in row chunks of about CHUNK_BYTES (reference.py)."""
    B, H, S, D = shape.batch, shape.heads, shape.seq_len, shape.head_dim
    item = parse_dtype(shape.dtype).itemsize
    # q, k, v, out (backward: also grad_out, dq, dk, dv), each again in fp64 for the reference
    tensors = (8 if backward else 4) * B * H * S * D * (item + 8)
    row = 8 * B * H * S  # fp64 scores of one query row, every batch and head
    rows = S if backward or S <= FULL_CHECK_MAX_SEQ_LEN else 256  # else: a row sample
    scores = 3 * min(rows, max(1, CHUNK_BYTES // row)) * row  # scores, probs, masked copy
    masks = 2 * S * S  # the dense (S, S) bool mask and SDPA's copy of it
    if backward:  # pattern sections: SDPA's additive (1, H, S, S) bias, twice, and offsets
        masks += 2 * H * S * S * item + 8 * S * S
    return tensors + scores + masks


def decode_bytes(
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    q_len: int,
    kv_len: int,
    page_size: int,
    paged: bool = False,
) -> int:
    """One decode or cross-attention case (bench_decode.py, B = 1): q (Hq, Lq, D) and k, v
    (Hkv, Lk, D) drawn in fp32 then cast; the fp64 reference's q, output, and k, v repeated
    to Hq heads, its (Hq, Lq, Lk) scores three times; the bool mask, and again padded to
    `page_size` tiles. `paged`: the page pool and its padded staging copy, k and v."""
    H, D, P = heads, head_dim, page_size
    item = parse_dtype(dtype).itemsize
    q, kv = H * q_len * D, kv_heads * kv_len * D
    tensors = (q + 2 * kv) * (4 + item) + 2 * H * kv_len * D * (item + 8) + q * (8 + 8 + item)
    masks = q_len * kv_len + tiles(q_len, P) * tiles(kv_len, P)
    pages = 2 * kv_heads * D * item * (2 * tiles(kv_len, P) + 3 * P)
    return tensors + 3 * 8 * H * q_len * kv_len + masks + (pages if paged else 0)


def mla_bytes(shape: MLAShape) -> int:
    """MLA (bench_gym.py): inputs drawn in fp32 then cast, and in fp64 for the reference; the
    expanded per-head q, k, v, again in fp64; the reference's scores (rows as in case_bytes)."""
    B, H, S = shape.batch, shape.heads, shape.seq_len
    C, Dn, R, Dv = shape.kv_lora_rank, shape.nope_dim, shape.rope_dim, shape.v_dim
    item = parse_dtype(shape.dtype).itemsize
    inputs = B * (H * S * (Dn + R) + S * (C + R)) + C * H * (Dn + Dv)
    expanded = B * H * S * (2 * (Dn + R) + Dv)
    rows = S if S <= FULL_CHECK_MAX_SEQ_LEN else 256
    return inputs * (4 + item + 8) + expanded * (item + 8) + 3 * 8 * B * H * rows * S
