"""Per-head masks of video diffusion (Sparse VideoGen, arXiv 2502.01776; attention-gym
`attn_gym/masks/svg.py`): spatial heads see nearby frames, temporal heads see the same place in
every frame; the prompt attends and is attended everywhere.

Legend: B batch, H heads, S sequence length, D head dim; P prompt tokens, F frames, T tokens per
frame (S = P + F T: the prompt, then the frames one after another). Heads alternate spatial
(even h) and temporal (odd h): SVG picks each head's kind by profiling, alternating keeps both
kinds in every run. The mask depends on h, so its BlockMask is built per head (the pattern
registry's block masks are broadcast over heads, hence this module's own flex call).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from kernel_lib.attention import masks
from kernel_lib.attention.flex import call_flex


@dataclass(frozen=True)
class VideoLayout:
    """A prompt followed by `frames` frames of `tokens_per_frame` tokens; `width` frames wide
    windows (spatial heads: width * T tokens; temporal heads: max(1, width * T // F) places,
    SVG's widths)."""

    prompt_len: int
    frames: int
    tokens_per_frame: int
    width: int = 2

    def __post_init__(self):
        if self.prompt_len < 0:
            raise ValueError(f"prompt_len={self.prompt_len} must be >= 0")
        for field in ("frames", "tokens_per_frame", "width"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")

    @classmethod
    def fit(cls, seq_len: int, *, prompt_len: int, frames: int, width: int) -> VideoLayout:
        """The layout of S tokens: F frames of (S - P) // F tokens, the remainder joining the
        prompt; ValueError if fewer than F tokens follow the prompt."""
        if seq_len - prompt_len < frames:
            raise ValueError(
                f"seq_len={seq_len} must leave >= frames={frames} tokens after "
                f"prompt_len={prompt_len}"
            )
        per_frame = (seq_len - prompt_len) // frames
        return cls(seq_len - frames * per_frame, frames, per_frame, width)

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.frames * self.tokens_per_frame

    @property
    def spatial_width(self) -> int:
        return self.width * self.tokens_per_frame

    @property
    def temporal_width(self) -> int:
        return max(1, self.width * self.tokens_per_frame // self.frames)

    def as_dict(self) -> dict:
        return asdict(self)


def temporal(num_heads: int, device: torch.device | str = "cpu") -> Tensor:
    """(H,) bool: True for the temporal heads (odd h)."""
    return torch.arange(num_heads, device=device) % 2 == 1


def mask_mod(layout: VideoLayout, num_heads: int, device: torch.device | str) -> masks.MaskMod:
    """The per-head mask_mod of `layout` for H heads."""
    prompt = masks.as_index(layout.prompt_len, device)
    return masks.per_head(
        temporal(num_heads, device),
        masks.spatial_head(prompt, masks.as_index(layout.spatial_width, device)),
        masks.temporal_head(
            prompt,
            masks.as_index(layout.tokens_per_frame, device),
            masks.as_index(layout.temporal_width, device),
        ),
    )


@functools.lru_cache(maxsize=16)
def block_mask_for(layout: VideoLayout, num_heads: int, device: str, block_size: int) -> BlockMask:
    """The cached (H, S, S) BlockMask of `layout`: one per head, broadcast over B."""
    S = layout.seq_len
    return create_block_mask(
        mask_mod(layout, num_heads, device), None, num_heads, S, S, device=device,
        BLOCK_SIZE=block_size,
    )  # fmt: skip


def block_sparsity(
    layout: VideoLayout, num_heads: int, *, block_size: int, heads=slice(None), device="cpu"
) -> float:
    """Percent of (head, query block, key block) tiles flex skips, over `heads` (an index or
    slice of the H heads; default all)."""
    mask = block_mask_for(layout, num_heads, str(torch.device(device)), block_size)
    visited = mask.kv_num_blocks[:, heads] + mask.full_kv_num_blocks[:, heads]
    tiles = visited[0].numel() * math.ceil(layout.seq_len / block_size)
    return 100.0 * (1.0 - float(visited.sum()) / tiles)


def flex_temporal_heads(
    q: Tensor, k: Tensor, v: Tensor, layout: VideoLayout, *, block_size: int = 128
) -> Tensor:
    """Compiled flex_attention (the process-wide function) of q, k, v: (B, H, S, D) under the
    per-head mask of `layout` (S = layout.seq_len); input dtype out."""
    if q.shape[-2] != layout.seq_len:
        raise ValueError(f"seq_len={q.shape[-2]} must be layout.seq_len={layout.seq_len}")
    mask = block_mask_for(layout, q.shape[1], str(q.device), block_size)
    return call_flex(q, k, v, block_mask=mask)
