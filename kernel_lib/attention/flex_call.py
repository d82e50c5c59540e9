"""The process-wide compiled flex_attention as called by modules that build their own block masks
(MLA, temporal heads, activation attention): Inductor's refusals become `skipped` reasons, and
the causal BlockMask they share is flex.block_mask_for's cached one.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from torch import Tensor
from torch._dynamo.exc import BackendCompilerFailed
from torch._inductor.exc import InductorError
from torch.nn.attention.flex_attention import BlockMask

from kernel_lib.attention.flex import block_mask_for, compiled_flex_attention
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.checks import Unsupported

CAUSAL = PatternConfig("causal")


def call_flex(q: Tensor, k: Tensor, v: Tensor, **kwargs):
    """compiled_flex_attention()(q, k, v, **kwargs); Unsupported naming the head dims, dtype,
    device and Inductor's first line where Inductor cannot compile it (e.g. no lse on a CPU, a
    head dim past the GPU kernel's shared memory)."""
    try:
        return compiled_flex_attention()(q, k, v, **kwargs)
    except (BackendCompilerFailed, InductorError) as why:
        reason = str(why).strip().splitlines()[0][:200]  # Inductor's own words come first
        raise Unsupported(
            f"Inductor cannot compile flex_attention for D={q.shape[-1]}, Dv={v.shape[-1]}, "
            f"{q.dtype} on {q.device.type}: {reason}"
        ) from None


def causal_block_mask(seq_len: int, device: str, block_size: int) -> BlockMask:
    """The causal (S, S) BlockMask, broadcast over B and H: the pattern sections' cached one."""
    return block_mask_for(CAUSAL, seq_len, device=device, block_size=block_size)
