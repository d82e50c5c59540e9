"""Three kernels of your own, in plain torch, each in its slot (docs/plugins.md). Time them beside
ours on this machine: `python -m kernel_lib bench moe --plugin examples/my_kernels.py`, or every
notebook: `make report PLUGINS=examples/my_kernels.py`."""

import torch

from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import dense_mask
from kernel_lib.checks import Unsupported
from kernel_lib.plugins import kernel


@kernel("moe.dispatch", name="my_dispatch", backward=True)
def my_dispatch(x, routing, experts):
    """Each expert on its tokens, weighted by the gate and summed in fp32 (fp64 for fp64)."""
    out = torch.zeros(x.shape, dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
    for e in range(routing.num_experts):
        mine = routing.expert_idx == e
        tokens = routing.token_idx[mine]
        y = experts.forward_expert(e, x, tokens).to(out.dtype)
        out = out.index_add(0, tokens, y * routing.weight[mine, None].to(out.dtype))
    return out.to(x.dtype)


@kernel("fp8.weight_only_linear", name="my_w8a16")
def my_w8a16(x, weight):
    """x @ W.T with W = FP8 bytes times their scales: per output channel, or per 128 x 128 block."""
    w, scale = weight.data.float(), weight.scale_inv
    if scale.shape[1] > 1:  # one scale per 128 x 128 block: spread over its elements
        scale = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
        scale = scale[: w.shape[0], : w.shape[1]]
    return (x.float() @ (w * scale).T).to(x.dtype)


@kernel("attention.forward", name="my_attention")
def my_attention(q, k, v, pattern):
    """Softmax attention under the pattern's mask, in fp32 (masks only: no score_mod)."""
    if not isinstance(pattern, PatternConfig) or pattern.pattern.score_mod:
        raise Unsupported("the mask patterns only (no score_mod, decode or paged cache)")
    mask = dense_mask(pattern, q.shape[2]).to(q.device)
    scores = q.float() @ k.float().transpose(-2, -1) * q.shape[-1] ** -0.5
    return (scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v.float()).to(q.dtype)
