"""Attention with a pointwise activation instead of softmax, out = f(q k^T / sqrt(D)) v over
the causal pairs, through flex's log-space trick (attention-gym `attn_gym/mods/activation.py`).

Legend: B batch, H heads, S sequence length, D head dim.
score_mod log(f(s) + N) turns flex's softmax weights into (f(s) + N) / l with l = exp(lse), so
f(S) v = out * l - N * (sum of the attended v: a running sum for causal). Needs flex's lse,
which compiled flex on a CPU does not return (torch 2.13): skipped there with Inductor's reason.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import AuxRequest

from kernel_lib.attention import mods
from kernel_lib.attention.flex import call_flex, causal_block_mask
from kernel_lib.attention.plain import check_score_memory

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}  # the two attention-gym demonstrates
OFFSET = 1.0  # N: gelu >= -0.17 and relu >= 0, so f + 1 > 0 and its log is finite


def activation_function(name: str):
    """The activation called `name`; ValueError naming the valid ones."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation={name!r} is unknown; valid: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def undo_softmax(out: Tensor, lse: Tensor, v: Tensor, *, offset: float = OFFSET) -> Tensor:
    """f(S) v of causal attention from flex's softmax output of log(f + offset): out (B, H, S,
    Dv) times exp(lse) (B, H, S), minus offset times the running sum of v (B, H, S, Dv); fp32."""
    return out.float() * lse.float().exp()[..., None] - offset * v.float().cumsum(dim=-2)


def flex_activation(
    q: Tensor, k: Tensor, v: Tensor, *, activation: str, block_size: int = 128
) -> Tensor:
    """Causal activation attention of q, k, v: (B, H, S, D) through compiled flex_attention and
    undo_softmax; input dtype out. Unsupported where Inductor cannot lower flex's lse."""
    score_mod = mods.activation(activation_function(activation), OFFSET)
    mask = causal_block_mask(q.shape[-2], str(q.device), block_size)
    out, aux = call_flex(
        q, k, v, score_mod=score_mod, block_mask=mask, return_aux=AuxRequest(lse=True)
    )
    return undo_softmax(out, aux.lse, v).to(q.dtype)


def activation_naive(q: Tensor, k: Tensor, v: Tensor, *, activation: str) -> Tensor:
    """The materialised (B, H, S, S) scores in the input dtype, f applied, the non-causal half
    zeroed, times v: the plain baseline flex is compared with (Unsupported over the score memory
    limit)."""
    check_score_memory(q)
    S = q.shape[-2]
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    weights = activation_function(activation)(scores)
    causal = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
    return weights.masked_fill(~causal, 0.0) @ v
