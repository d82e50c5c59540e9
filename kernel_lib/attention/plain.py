"""The plain comparator of compiled flex: attention written plainly (materialised scores, the
pattern's dense mask and bias, softmax, in the input dtype) and put through torch.compile.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import (
    attention_reference,
    dense_bias,
    dense_mask,
    dense_softcap,
)
from kernel_lib.checks import Unsupported

# Naive attention materialises B*H*S*S scores (several copies): refused above this many bytes.
MAX_SCORE_BYTES = 2 * 2**30


def check_score_memory(q: Tensor) -> None:
    """Unsupported when naive attention on q (B, H, S, D) would hold over MAX_SCORE_BYTES."""
    score_bytes = 3 * q.shape[0] * q.shape[1] * q.shape[2] ** 2 * q.element_size()
    if score_bytes > MAX_SCORE_BYTES:
        raise Unsupported(f"would materialise {score_bytes / 2**30:.1f} GiB of scores")


@functools.cache
def _compiled():
    return torch.compile(attention_reference, fullgraph=True, dynamic=False)


@functools.lru_cache(maxsize=16)
def _dense(config: PatternConfig, seq_len: int, num_heads: int, dtype, device: str):
    mask = dense_mask(config, seq_len).to(device)
    return mask, dense_bias(config, seq_len, num_heads, dtype=dtype, device=device)


def attention_naive_compiled(q: Tensor, k: Tensor, v: Tensor, config: PatternConfig) -> Tensor:
    """softmax(q k^T / sqrt(D) + bias, masked) v of q, k, v: (B, H, S, D) under `config`,
    computed in the input dtype by torch.compile (what Inductor makes of the obvious code).
    The dense (S, S) mask and (H, S, S) bias are built once per pattern and shape."""
    check_score_memory(q)
    _, H, S, _ = q.shape
    mask, bias = _dense(config, S, H, q.dtype, str(q.device))
    return _compiled()(
        q, k, v, mask=mask, bias=bias, softcap=dense_softcap(config), compute_dtype=q.dtype
    )
