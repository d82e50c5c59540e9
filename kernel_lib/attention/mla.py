"""Multi-head latent attention (MLA) with decoupled RoPE, as DeepSeek-V2 (arXiv 2405.04434,
section 2.1) and V3 write it; attention-gym `attn_gym/mods/latent_attention.py`.

Legend: B batch, H heads, S sequence length, C latent width (kv_lora_rank), Dn per-head no-RoPE
dim (qk_nope_head_dim), R RoPE dim (qk_rope_head_dim), Dv value dim (v_head_dim).
Keys and values come from one compressed latent c (B, S, C) that is all the KV cache holds:
k_h = [c W_uk_h | rope(k_r)] with k_r (B, S, R) shared by every head, v_h = c W_uv_h; queries
q_h = [q_nope_h | rope(q_rope_h)]; scores scaled by 1/sqrt(Dn + R), causal. RoPE rotates
adjacent pairs (x_2i, x_2i+1) by pos * 10000^(-2i / R) (DeepSeek's complex-pair form).
Two fast paths: the expanded form (per-head K, V built, then attention) and the absorbed form
(W_uk folded into the query, attention over the latent as one shared KV head, W_uv applied
after: what DeepSeek's decode kernels do).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.attention.flex import call_flex, causal_block_mask
from kernel_lib.config import DTYPES

ROPE_BASE = 10000.0  # DeepSeek-V2/V3 rope_theta (V3's YaRN long-context scaling is left out)


@dataclass(frozen=True)
class MLAShape:
    """One MLA problem (DeepSeek-V3: H 128, C 512, Dn 128, R 64, Dv 128)."""

    batch: int
    heads: int
    seq_len: int
    kv_lora_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int
    dtype: str = "float32"

    def __post_init__(self):
        for field in ("batch", "heads", "seq_len", "kv_lora_rank", "nope_dim", "v_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")
        if self.rope_dim < 2 or self.rope_dim % 2:
            raise ValueError(f"rope_dim={self.rope_dim} must be an even int >= 2")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")

    @property
    def qk_dim(self) -> int:
        return self.nope_dim + self.rope_dim

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "dtype"}


class MLAInputs(NamedTuple):
    """What MLA attention reads: queries before RoPE, the latent, the shared RoPE key before
    RoPE, and the up-projections."""

    q: Tensor  # (B, H, S, Dn + R): [q_nope | q_rope]
    latent: Tensor  # (B, S, C): c_kv after its norm, the KV cache
    k_rope: Tensor  # (B, S, R)
    w_uk: Tensor  # (C, H, Dn)
    w_uv: Tensor  # (C, H, Dv)


def make_inputs(shape: MLAShape, *, device, seed: int = 0) -> MLAInputs:
    """Seeded inputs in shape.dtype: standard-normal q, latent and k_rope, up-projections
    N(0, 1/C) so k_nope and v are standard normal too."""
    generator = torch.Generator().manual_seed(seed)
    B, H, S, C = shape.batch, shape.heads, shape.seq_len, shape.kv_lora_rank
    dims = [
        ((B, H, S, shape.qk_dim), 1.0),
        ((B, S, C), 1.0),
        ((B, S, shape.rope_dim), 1.0),
        ((C, H, shape.nope_dim), C**-0.5),
        ((C, H, shape.v_dim), C**-0.5),
    ]
    return MLAInputs(
        *(
            (torch.randn(d, generator=generator) * s).to(device=device, dtype=shape.torch_dtype)
            for d, s in dims
        )
    )


def rope(x: Tensor) -> Tensor:
    """Rotary embedding of x (..., S, R) at positions 0..S-1, adjacent pairs rotated; computed in
    fp32, input dtype out."""
    S, R = x.shape[-2], x.shape[-1]
    freqs = ROPE_BASE ** (-torch.arange(0, R, 2, device=x.device, dtype=torch.float32) / R)
    angles = torch.arange(S, device=x.device, dtype=torch.float32)[:, None] * freqs
    cos, sin = angles.cos(), angles.sin()
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def up_project(latent: Tensor, w: Tensor) -> Tensor:
    """Per-head (B, H, S, D) of latent (B, S, C) times w (C, H, D), as one (C, H D) GEMM."""
    B, S, C = latent.shape
    H, D = w.shape[1:]
    return (latent @ w.reshape(C, H * D)).view(B, S, H, D).transpose(1, 2)


def expand(inputs: MLAInputs) -> tuple[Tensor, Tensor, Tensor]:
    """Per-head q (B, H, S, Dn + R), k (B, H, S, Dn + R), v (B, H, S, Dv) of the expanded form."""
    q, latent, k_rope, w_uk, w_uv = inputs
    nope = w_uk.shape[-1]
    H = q.shape[1]
    q = torch.cat((q[..., :nope], rope(q[..., nope:])), dim=-1)
    k_pe = rope(k_rope)[:, None].expand(-1, H, -1, -1)
    k = torch.cat((up_project(latent, w_uk), k_pe), dim=-1)
    return q, k, up_project(latent, w_uv).contiguous()  # (B, H, S, Dv) in memory, as flex reads it


def flex_mla(inputs: MLAInputs, *, block_size: int = 128) -> Tensor:
    """Expanded MLA: per-head K and V built from the latent, then compiled causal flex_attention;
    (B, H, S, Dv) in the input dtype."""
    q, k, v = expand(inputs)
    mask = causal_block_mask(q.shape[-2], str(q.device), block_size)
    return call_flex(q, k, v, block_mask=mask)


def flex_mla_absorbed(inputs: MLAInputs, *, block_size: int = 128) -> Tensor:
    """Absorbed MLA: q_nope W_uk^T joins the RoPE query, compiled causal flex_attention reads the
    latent as one KV head of width C + R (values: the latent itself, scale 1/sqrt(Dn + R)), and
    W_uv maps the (B, H, S, C) result to (B, H, S, Dv); input dtype out."""
    q, latent, k_rope, w_uk, w_uv = inputs
    nope = w_uk.shape[-1]
    q_latent = q[..., :nope] @ w_uk.permute(1, 2, 0)  # (B, H, S, Dn) @ (H, Dn, C)
    q = torch.cat((q_latent, rope(q[..., nope:])), dim=-1)
    k = torch.cat((latent, rope(k_rope)), dim=-1)[:, None]
    mask = causal_block_mask(q.shape[-2], str(q.device), block_size)
    scale = 1.0 / math.sqrt(nope + k_rope.shape[-1])
    out = call_flex(q, k, latent[:, None], block_mask=mask, scale=scale, enable_gqa=True)
    return out @ w_uv.transpose(0, 1)  # (B, H, S, C) @ (H, C, Dv)


def flops(shape: MLAShape) -> float:
    """Forward attention FLOPs of the expanded form over the causal pairs (the projections
    excluded): 2 FLOP x (Dn + R + Dv) per (head, pair)."""
    pairs = shape.seq_len * (shape.seq_len + 1) / 2
    return 2.0 * shape.batch * shape.heads * (shape.qk_dim + shape.v_dim) * pairs
