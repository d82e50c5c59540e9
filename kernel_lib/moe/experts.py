"""Expert families. Each holds E experts' weights and computes expert e on the tokens routed to it.

Legend: T tokens (= B*S), D model, F ffn, E experts, n tokens routed to one expert, r rank.
Every family has `forward_expert(e, x, token_idx) -> (n, D)` with x the whole (T, D) input, so
experts that look at neighbours (convolution, attention) see the real sequence, not a length-1
view of each token. Only FeedForwardExperts has the stacked (E, D, F) layout grouped GEMMs need.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATIONS = ("relu", "gelu", "swiglu", "swiglu_clamped")
GATED = ("swiglu", "swiglu_clamped")  # w_in is 2F wide, laid out [gate | up]
SWIGLU_LIMIT, SWIGLU_ALPHA = 7.0, 1.702  # gpt-oss's clamp and sigmoid scale


def _check_positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")


def _init(*shape: int, fan_in: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape) / math.sqrt(fan_in))


def in_width(ffn: int, activation: str) -> int:
    """Columns of w_in: 2F for the gated activations, F otherwise."""
    return 2 * ffn if activation in GATED else ffn


def swiglu_clamped_reference(
    h: Tensor, *, limit: float = SWIGLU_LIMIT, alpha: float = SWIGLU_ALPHA
) -> Tensor:
    """fp64 twin of swiglu_clamped, element by element as GptOssExperts writes it."""
    f = h.shape[-1] // 2
    rows = []
    for row in h.double().tolist():
        out = []
        for g, u in zip(row[:f], row[f:]):
            g, u = min(g, limit), min(max(u, -limit), limit)
            out.append((u + 1) * g / (1 + math.exp(-alpha * g)))
        rows.append(out)
    return torch.tensor(rows, dtype=torch.float64).view(h.shape[0], f)


def swiglu_clamped(
    h: Tensor, *, limit: float = SWIGLU_LIMIT, alpha: float = SWIGLU_ALPHA
) -> Tensor:
    """gpt-oss's expert activation of h (n, 2F) laid out [gate | up] (gpt-oss stores the two
    interleaved, a weight layout): gate clamped above at `limit`, up to [-limit, limit], then
    (up + 1) * gate * sigmoid(alpha * gate). Returns (n, F) in h's dtype."""
    gate, up = h.chunk(2, dim=-1)
    return _gated_sigmoid(gate.clamp(max=limit), up.clamp(-limit, limit), alpha)


def _gated_sigmoid(gate: Tensor, up: Tensor, alpha: float = SWIGLU_ALPHA) -> Tensor:
    """gpt-oss's (up + 1) * gate * sigmoid(alpha * gate) of the already clamped halves."""
    return (up + 1) * gate * F.sigmoid(alpha * gate)


def activate(h: Tensor, activation: str, *, inplace: bool = False) -> Tensor:
    """relu/gelu of h (n, F); of h (n, 2F) laid out [gate | up]: swiglu -> silu(gate) * up,
    swiglu_clamped -> gpt-oss's clamped SwiGLU (swiglu_clamped).

    inplace: relu overwrites h (saves a pass over an (n, F) buffer the caller no longer needs).
    """
    if activation == "relu":
        return h.relu_() if inplace else torch.relu(h)
    if activation == "gelu":
        return F.gelu(h, approximate="tanh")
    if activation == "swiglu_clamped":
        return swiglu_clamped(h)
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def replayed_activation(h: Tensor, h_case: Tensor, activation: str) -> Tensor:
    """activate(h) with its kinks where `h_case` (the same pre-activations in the case's dtype)
    has them: ReLU passes h where h_case > 0, the clamped SwiGLU holds its limits where h_case
    passed them. Smooth activations have no kinks and run as they are."""
    if activation == "relu":
        return h * (h_case > 0)
    if activation != "swiglu_clamped":
        return activate(h, activation)
    (gate, up), (gate_case, up_case) = h.chunk(2, dim=-1), h_case.chunk(2, dim=-1)
    gate = torch.where(gate_case > SWIGLU_LIMIT, SWIGLU_LIMIT, gate)
    up = torch.where(up_case.abs() > SWIGLU_LIMIT, SWIGLU_LIMIT * up_case.sign(), up)
    return _gated_sigmoid(gate, up)


class FeedForwardExperts(nn.Module):
    """E two-layer FFNs stored stacked: w_in (E, D, F) or (E, D, 2F) gated, w_out (E, F, D).

    Row-major (E, D, F) is the layout `torch._grouped_mm` runs fastest on CPU (the transposed,
    nn.Linear-style layout measured ~1.5x slower there).
    """

    def __init__(self, num_experts: int, hidden: int, ffn: int, *, activation: str = "relu"):
        super().__init__()
        _check_positive(num_experts=num_experts, hidden=hidden, ffn=ffn)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {ACTIVATIONS}")
        self.num_experts, self.hidden, self.ffn, self.activation = (
            num_experts,
            hidden,
            ffn,
            activation,
        )
        self.w_in = _init(num_experts, hidden, in_width(ffn, activation), fan_in=hidden)
        self.w_out = _init(num_experts, ffn, hidden, fan_in=ffn)

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        return activate(x[token_idx] @ self.w_in[e], self.activation) @ self.w_out[e]

    def flops_per_row(self) -> int:
        """Multiply-add FLOPs of one routed row: 2*D*F (x2 for a gated w_in) + 2*F*D."""
        return 2 * self.hidden * in_width(self.ffn, self.activation) + 2 * self.ffn * self.hidden


class SharedExpert(nn.Module):
    """A dense FFN applied to every token (DeepSeekMoE shared expert), added to the output."""

    def __init__(self, hidden: int, ffn: int, *, activation: str = "relu"):
        super().__init__()
        self.ffn = FeedForwardExperts(1, hidden, ffn, activation=activation)

    def forward(self, x: Tensor) -> Tensor:
        return activate(x @ self.ffn.w_in[0], self.ffn.activation) @ self.ffn.w_out[0]


class ConvolutionalExperts(nn.Module):
    """Causal depthwise conv (width `kernel`) over each token's own sequence, then a ReLU FFN."""

    def __init__(self, num_experts: int, hidden: int, ffn: int, *, seq_len: int, kernel: int = 3):
        super().__init__()
        _check_positive(
            num_experts=num_experts, hidden=hidden, ffn=ffn, seq_len=seq_len, kernel=kernel
        )
        self.num_experts, self.seq_len, self.kernel = num_experts, seq_len, kernel
        self.conv = _init(num_experts, kernel, hidden, fan_in=kernel)
        self.ffn = FeedForwardExperts(num_experts, hidden, ffn)

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        shifts = torch.arange(self.kernel, device=x.device)
        src = token_idx[:, None] - shifts  # (n, kernel): the token and its predecessors
        inside = (token_idx[:, None] % self.seq_len) >= shifts  # stay within the sequence
        window = x[src.clamp_min(0)] * inside[..., None].to(x.dtype)
        mixed = (window * self.conv[e]).sum(1)
        return torch.relu(mixed @ self.ffn.w_in[e]) @ self.ffn.w_out[e]


class AttentionExperts(nn.Module):
    """Causal single-head attention among the tokens of one sequence routed to the same expert."""

    def __init__(self, num_experts: int, hidden: int, *, seq_len: int):
        super().__init__()
        _check_positive(num_experts=num_experts, hidden=hidden, seq_len=seq_len)
        self.num_experts, self.seq_len = num_experts, seq_len
        self.w_qkv = _init(num_experts, hidden, 3 * hidden, fan_in=hidden)
        self.w_o = _init(num_experts, hidden, hidden, fan_in=hidden)

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        q, k, v = (x[token_idx] @ self.w_qkv[e]).chunk(3, dim=-1)
        seq = token_idx // self.seq_len
        mask = (seq[:, None] == seq[None, :]) & (token_idx[None, :] <= token_idx[:, None])
        out = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask[None])
        return out[0] @ self.w_o[e]


class LoRAExperts(nn.Module):
    """One shared ReLU FFN plus a rank-r update per expert and projection: E*r*(2D+2F) extra
    parameters instead of E*2*D*F (the seed kept a full base projection per expert)."""

    def __init__(self, num_experts: int, hidden: int, ffn: int, *, rank: int = 8):
        super().__init__()
        _check_positive(num_experts=num_experts, hidden=hidden, ffn=ffn, rank=rank)
        self.num_experts = num_experts
        self.base = FeedForwardExperts(1, hidden, ffn)
        self.a_in, self.b_in = (
            _init(num_experts, hidden, rank, fan_in=hidden),
            nn.Parameter(torch.zeros(num_experts, rank, ffn)),
        )
        self.a_out, self.b_out = (
            _init(num_experts, ffn, rank, fan_in=ffn),
            nn.Parameter(torch.zeros(num_experts, rank, hidden)),
        )

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        xs = x[token_idx]
        h = torch.relu(xs @ self.base.w_in[0] + (xs @ self.a_in[e]) @ self.b_in[e])
        return h @ self.base.w_out[0] + (h @ self.a_out[e]) @ self.b_out[e]


class AdapterExperts(nn.Module):
    """A bottleneck adapter per expert: relu(x @ down[e]) @ up[e], D -> r -> D."""

    def __init__(self, num_experts: int, hidden: int, *, rank: int = 64):
        super().__init__()
        _check_positive(num_experts=num_experts, hidden=hidden, rank=rank)
        self.num_experts = num_experts
        self.down = _init(num_experts, hidden, rank, fan_in=hidden)
        self.up = _init(num_experts, rank, hidden, fan_in=rank)

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        return torch.relu(x[token_idx] @ self.down[e]) @ self.up[e]
