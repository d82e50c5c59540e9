"""Dense references: a pattern's mask and bias as matrices (from its registry entry), naive
attention over them, and the fp64 oracles of outputs and gradients that every check uses.

Legend: B batch, H heads, S sequence length, D head dim; R query rows of a row-sampled check;
Lq, Lk query and key lengths (both S but for patterns.py's rectangular patterns).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kernel_lib.attention.patterns import PatternConfig, check_lengths

# Above this S, forward checks compare a fixed sample of query rows (an fp64 B*H*S*S score
# matrix at S=8192, B=4, H=16 would be 34 GB).
FULL_CHECK_MAX_SEQ_LEN = 1024
# fp64 scores materialised at once by the chunked references (bytes).
CHUNK_BYTES = 2**30


def dense_mask(config: PatternConfig, seq_len: int, kv_len: int | None = None) -> Tensor:
    """(Lq, Lk) bool, True where query i may attend key j; Lq = seq_len, Lk = kv_len (default
    seq_len)."""
    kv_len = seq_len if kv_len is None else kv_len
    check_lengths(config, seq_len, kv_len)
    return config.pattern.dense_mask(config, seq_len, kv_len)


def dense_bias(
    config: PatternConfig,
    seq_len: int,
    num_heads: int,
    *,
    rows: Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    kv_len: int | None = None,
) -> Tensor | None:
    """(H, Lq, Lk) additive bias before softmax (or (H, R, Lk) for query `rows`), None if none;
    Lq = seq_len, Lk = kv_len (default seq_len)."""
    if config.pattern.dense_bias is None:
        return None
    kv_len = seq_len if kv_len is None else kv_len
    check_lengths(config, seq_len, kv_len)
    queries = torch.arange(seq_len, device=device) if rows is None else rows.to(device)
    return config.pattern.dense_bias(config, num_heads, queries, kv_len).to(dtype)


def rounded_bias(
    config: PatternConfig,
    seq_len: int,
    num_heads: int,
    mask: Tensor,
    dtype: torch.dtype,
    *,
    device: torch.device | str = "cpu",
    kv_len: int | None = None,
) -> Tensor | None:
    """dense_bias in `dtype` (mask: the pattern's, on `device`), each query row first shifted by
    its largest attended value: softmax ignores a per-row shift, and bf16 would round sandwich's
    diagonal biases near 128 in steps of 0.5 (~5 % error at S=8192). Unshifted under a soft-cap,
    which does not commute with a shift."""
    bias = dense_bias(config, seq_len, num_heads, device=device, kv_len=kv_len)
    if bias is None or dense_softcap(config) is not None:
        return None if bias is None else bias.to(dtype)
    top = bias.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
    return (bias - top.nan_to_num(neginf=0.0)).to(dtype)


def dense_softcap(config: PatternConfig) -> float | None:
    """The soft-cap applied to scores, or None."""
    return config.softcap if config.pattern.softcapped else None


def dense_block_sparsity(
    config: PatternConfig, seq_len: int, block_size: int, kv_len: int | None = None
) -> float:
    """Percent of (query block, key block) tiles with no attended pair, from the dense mask
    (Lq = seq_len, Lk = kv_len, default seq_len): what flex's BlockMask should skip."""
    return mask_block_sparsity(dense_mask(config, seq_len, kv_len), block_size)


def mask_block_sparsity(mask: Tensor, block_size: int) -> float:
    """Percent of tiles of a (..., Lq, Lk) bool mask (over every leading index, e.g. heads) with
    no attended pair."""
    (Lq, Lk), lead = mask.shape[-2:], mask.shape[:-2]
    rows, cols = math.ceil(Lq / block_size), math.ceil(Lk / block_size)
    padded = torch.zeros(*lead, rows * block_size, cols * block_size, dtype=torch.bool)
    padded[..., :Lq, :Lk] = mask
    visited = padded.view(*lead, rows, block_size, cols, block_size).any(dim=(-3, -1))
    return 100.0 * (1.0 - float(visited.sum()) / visited.numel())


def attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    softcap: float | None = None,
    compute_dtype: torch.dtype = torch.float64,
) -> Tensor:
    """softmax(cap(q k^T / sqrt(D) + bias) masked) v with the full (B, H, R, S) score matrix.

    q: (B, H, R, D) (R = Lq, or a subset of query rows), k, v: (B, H, Lk, D); mask: (R, Lk)
    bool, or (B, H, R, Lk) for a mask per batch and head; bias: (H, R, Lk). Computed in `compute_dtype` (fp64: the oracle; the input dtype: the naive
    materialised-scores baseline); returns compute_dtype.
    """
    qc, kc, vc = (t.to(compute_dtype) for t in (q, k, v))
    scores = qc @ kc.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.to(device=q.device, dtype=compute_dtype)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        scores = scores.masked_fill(~mask.to(q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ vc


def reference_rows(seq_len: int) -> Tensor | None:
    """None (check every query row) up to FULL_CHECK_MAX_SEQ_LEN, else the first and last 64
    rows and 128 spread between."""
    if seq_len <= FULL_CHECK_MAX_SEQ_LEN:
        return None
    spread = torch.linspace(0, seq_len - 1, 128).long()
    edges = torch.cat([torch.arange(64), torch.arange(seq_len - 64, seq_len)])
    return torch.unique(torch.cat([edges, spread]))


def output_rows(out: Tensor, rows: Tensor | None) -> Tensor:
    """The query rows of `out` (B, H, S, D) that the reference computed."""
    return out if rows is None else out[..., rows.to(out.device), :]


def _row_chunks(q: Tensor, k: Tensor, rows: Tensor | None) -> list[Tensor]:
    """Query rows in chunks whose fp64 (B, H, rows, Lk) scores stay under CHUNK_BYTES."""
    B, H, Lq, _ = q.shape
    rows = torch.arange(Lq) if rows is None else rows.cpu()
    per_chunk = max(1, CHUNK_BYTES // (8 * B * H * k.shape[-2]))
    return list(rows.split(per_chunk))


def _reference_chunk(q, k, v, config: PatternConfig, rows: Tensor) -> Tensor:
    Lq, Lk, H = q.shape[-2], k.shape[-2], k.shape[1]
    mask = dense_mask(config, Lq, Lk)[rows]
    bias = dense_bias(config, Lq, H, rows=rows, device=q.device, kv_len=Lk)
    q_rows = q[..., rows.to(q.device), :]
    return attention_reference(q_rows, k, v, mask=mask, bias=bias, softcap=dense_softcap(config))


def reference_output(q: Tensor, k: Tensor, v: Tensor, config: PatternConfig, *, rows=None):
    """The fp64 oracle of `config` on q (B, H, Lq, D), k, v (B, H, Lk, D): (B, H, Lq, D), or
    (B, H, R, D) for query `rows`."""
    chunks = [_reference_chunk(q, k, v, config, c) for c in _row_chunks(q, k, rows)]
    return torch.cat(chunks, dim=-2)


def reference_grads(
    q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, config: PatternConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """fp64 (dq, dk, dv) of sum(out * grad_out): every query row, accumulated chunk by chunk
    (each output row depends only on its own query row, so the chunks' gradients add up)."""
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    g64 = grad_out.double()
    for rows in _row_chunks(q, k, None):
        out = _reference_chunk(q64, k64, v64, config, rows)
        (out * g64[..., rows.to(g64.device), :]).sum().backward()
    return q64.grad, k64.grad, v64.grad


def sdpa_mask(
    config: PatternConfig,
    seq_len: int,
    num_heads: int,
    dtype: torch.dtype,
    *,
    device: torch.device | str = "cpu",
    kv_len: int | None = None,
) -> Tensor:
    """The pattern as one SDPA attn_mask: (Lq, Lk) bool, or (1, H, Lq, Lk) additive, -inf
    outside (Lq = seq_len, Lk = kv_len, default seq_len).

    4-D for a bias because SDPA's CPU flash kernel takes only 2-D or 4-D masks.
    """
    mask = dense_mask(config, seq_len, kv_len).to(device)
    bias = rounded_bias(config, seq_len, num_heads, mask, dtype, device=device, kv_len=kv_len)
    if bias is None:
        return mask
    return bias.masked_fill(~mask, float("-inf"))[None]


def gqa_reference(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None) -> Tensor:
    """fp64 attention of q (B, Hq, Lq, D) over k, v (B, Hkv, Lk, D), Hq a multiple of Hkv:
    query head h reads key/value head h // (Hq / Hkv) (each KV head copied, then dense
    attention). mask: (Lq, Lk) bool."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    return attention_reference(q, k, v, mask=mask)


def rope_reference(x: Tensor) -> Tensor:
    """fp64 rotary embedding of x (..., S, R) at positions 0..S-1: adjacent pairs as complex
    numbers times exp(i pos 10000^(-2j / R)) (DeepSeek's form)."""
    S, R = x.shape[-2], x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, R, 2, dtype=torch.float64) / R)
    angles = torch.outer(torch.arange(S, dtype=torch.float64), freqs)
    turns = torch.polar(torch.ones_like(angles), angles).to(x.device)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], R // 2, 2).contiguous())
    return torch.view_as_real(pairs * turns).flatten(-2)


def _causal_rows(seq_len: int, rows: Tensor | None) -> tuple[Tensor, Tensor]:
    """(query rows, their (R, S) causal mask): every row when rows is None."""
    rows = torch.arange(seq_len) if rows is None else rows.cpu()
    return rows, torch.arange(seq_len)[None, :] <= rows[:, None]


def mla_reference(inputs, *, rows: Tensor | None = None) -> Tensor:
    """fp64 causal MLA (mla.py's legend) of MLAInputs: per-head q, k, v built in fp64 from the
    same weights, then dense attention; (B, H, S, Dv), or (B, H, R, Dv) for query `rows`."""
    q, latent, k_rope, w_uk, w_uv = (t.double() for t in inputs)
    nope, H, S = w_uk.shape[-1], q.shape[1], q.shape[-2]
    rows, mask = _causal_rows(S, rows)
    q = torch.cat((q[..., :nope], rope_reference(q[..., nope:])), dim=-1)
    q = q[..., rows.to(q.device), :]
    k_nope = torch.einsum("bsc,chd->bhsd", latent, w_uk)
    k = torch.cat((k_nope, rope_reference(k_rope)[:, None].expand(-1, H, -1, -1)), dim=-1)
    v = torch.einsum("bsc,chd->bhsd", latent, w_uv)
    return attention_reference(q, k, v, mask=mask)  # scale 1/sqrt(Dn + R): q's width


def temporal_heads_mask(layout, num_heads: int) -> Tensor:
    """(H, S, S) bool reference of temporal_heads.VideoLayout's per-head mask: spatial heads
    (even h) a band of width * T tokens, temporal heads (odd h) every frame pair's band of
    places (a Kronecker product); prompt rows and columns all True."""
    P, F, T, S = layout.prompt_len, layout.frames, layout.tokens_per_frame, layout.seq_len
    spatial = torch.ones(S, S, dtype=torch.bool).tril(layout.spatial_width - 1)
    spatial &= spatial.T.clone()
    places = torch.ones(T, T, dtype=torch.bool).tril(layout.temporal_width - 1)
    temporal = torch.zeros(S, S, dtype=torch.bool)
    temporal[P:, P:] = torch.kron(torch.ones(F, F), (places & places.T).float()).bool()
    heads = torch.stack([temporal if h % 2 else spatial for h in range(num_heads)])
    heads[:, :P, :] = True
    heads[:, :, :P] = True
    return heads


def activation_reference(
    q: Tensor, k: Tensor, v: Tensor, *, activation, rows: Tensor | None = None
) -> Tensor:
    """fp64 causal activation attention: activation(q k^T / sqrt(D)) on the causal pairs (0
    elsewhere) times v; activation: a pointwise function (activation.ACTIVATIONS). (B, H, S, D),
    or (B, H, R, D) for query `rows`."""
    rows, mask = _causal_rows(q.shape[-2], rows)
    q, k, v = (t.double() for t in (q[..., rows.to(q.device), :], k, v))
    weights = activation(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return (weights * mask.to(q.device)) @ v


def vsa_reference(
    q: Tensor, k: Tensor, v: Tensor, *, tile: int, top_k: int, rows: Tensor | None = None
) -> Tensor:
    """fp64 video sparse attention (vsa.py's legend): each tile's mean by a loop over the tiles,
    each query tile's top_k key tiles by sorting its coarse scores, the chosen tiles expanded to
    token pairs by repetition, then dense attention; (B, H, S, D), or (B, H, R, D) for query
    `rows`."""
    S = q.shape[-2]
    q, k, v = (t.double() for t in (q, k, v))
    starts = range(0, S, tile)
    q_means, k_means = (
        torch.stack([x[..., s : s + tile, :].mean(-2) for s in starts], -2) for x in (q, k)
    )
    scores = q_means @ k_means.transpose(-2, -1)
    kept = scores.argsort(dim=-1, descending=True)[..., :top_k]
    chosen = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, kept, True)
    rows = torch.arange(S) if rows is None else rows.cpu()
    tokens = chosen.repeat_interleave(tile, dim=-2)[..., rows.to(q.device), :]
    mask = tokens.repeat_interleave(tile, dim=-1)[..., :S]
    return attention_reference(q[..., rows.to(q.device), :], k, v, mask=mask)
