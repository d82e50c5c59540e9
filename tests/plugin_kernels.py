"""The plug-in module of the acceptance runs (tests/test_cli.py; docs/plugins.md): the example's
MoE dispatch and W8A16 linear, an attention forward for every case of its slot (patterns with
their masks, biases and soft-caps, decode shapes, the paged cache), a dispatch off by 10 % and
one that raises."""

import torch

from examples.my_kernels import my_dispatch
from kernel_lib.attention import decode, paged, reference
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.plugins import kernel

BROKE = "RuntimeError: this kernel broke"


def _attend(q, k, v, mask, bias=None, softcap=None):
    """Softmax attention in fp32 under an (Lq, Lk) bool mask; KV head h serves its q heads."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.float().repeat_interleave(group, dim=1) for t in (k, v))
    scores = q.float() @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if bias is not None:
        scores = scores + bias.to(scores)
    out = scores.masked_fill(~mask.to(q.device), float("-inf")).softmax(-1) @ v
    return out.to(q.dtype)


@kernel("attention.forward", name="every_attention", backward=True)
def every_attention(q, k, v, pattern):
    if isinstance(pattern, PatternConfig):
        seq, heads = q.shape[2], q.shape[1]
        bias = reference.dense_bias(pattern, seq, heads, device=q.device)
        softcap = reference.dense_softcap(pattern)
        return _attend(q, k, v, reference.dense_mask(pattern, seq), bias, softcap)
    if isinstance(pattern, paged.PagedCache):
        k, v = paged.gather(pattern)
        rows, keys = q.shape[2], pattern.kv_len
        return _attend(q, k, v, torch.ones(rows, keys, dtype=torch.bool).tril(keys - rows))
    return _attend(q, k, v, decode.dense_mask(pattern))


@kernel("moe.dispatch", name="off_by_tenth")
def off_by_tenth(x, routing, experts):
    return 1.1 * my_dispatch(x, routing, experts)


@kernel("moe.dispatch", name="broken")
def broken(x, routing, experts):
    raise RuntimeError(BROKE.split(": ", 1)[1])
