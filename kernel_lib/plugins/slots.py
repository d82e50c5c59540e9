"""The slots a plug-in fills: each is one kind of case a topic already times, with the call its
candidates already make, the fp64 reference its output is checked against and the baseline its
ratio is taken over. The topic builds the candidates (its `plugin_candidates`); this table is
what `@kernel` validates against and what docs/plugins.md explains."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """`call`: the plug-in's signature; `check`: what its output is compared with;
    `baseline`: what its ratio is over; `sections`: where the topic times it."""

    name: str
    call: str
    check: str
    baseline: str
    sections: str


SLOTS = {
    s.name: s
    for s in (
        Slot(
            "moe.dispatch",
            "fn(x (T, D), routing: Routing, experts: FeedForwardExperts) -> (T, D) in x.dtype",
            "the fp64 loop over experts at the case's tolerance; with backward=True also the "
            "expert-weight gradients against fp64 autograd",
            "dense_gemm (a GEMM pair of the same FLOPs)",
            "moe: throughput, throughput_backward, capacity, sweeps, presets",
        ),
        Slot(
            "fp8.quantize",
            "fn(x (M, K) float32, fmt: str, granularity: str) -> (data (M, K) float8, scale "
            "float32 of scaling.scale_shape, data = fp8(x * scale)) or an Fp8Tensor",
            "bit-exact against the fp64 quantisation reference (bytes and scales)",
            "an fp32 copy of x (bandwidth)",
            "fp8: quantize_bandwidth",
        ),
        Slot(
            "fp8.linear",
            "fn(x (M, K) bfloat16, w (N, K) bfloat16, recipe: str) -> x @ w.T (M, N) "
            "bfloat16, both quantised to FP8 per call (recipe: a key of scaling.RECIPES)",
            "the fp64 FP8 reference of the recipe's granularity at its output tolerance",
            "the bf16 linear",
            "fp8: linear_speed",
        ),
        Slot(
            "fp8.weight_only_linear",
            "fn(x (M, K) bfloat16, weight: Fp8Weight) -> x @ W.T (M, N) bfloat16",
            "fp64 x @ (data * scale_inv).T at the W8A16 tolerance",
            "the bf16 linear",
            "fp8: weight_only_speed",
        ),
        Slot(
            "attention.forward",
            "fn(q, k, v, pattern) -> out of q's shape, run eager: patterns q, k, v "
            "(B, H, S, D), pattern the case's PatternConfig (name, window, ...); decode q "
            "(B, Hq, Lq, D), k, v (B, Hkv, Lk, D) (Hq a multiple of Hkv), pattern the "
            "DecodeShape (mask none / causal bottom-right / document, docs); paged q "
            "(B, Hq, 1, D), k, v the pools (1, Hkv, pages * P, D), pattern the PagedCache "
            "(block_table, page_size, kv_len)",
            "the built-ins' fp64 reference of the case at their tolerance; with backward=True "
            "also dq, dk, dv against fp64 gradients (the causal forward + backward case)",
            "the best SDPA backend of the case (paged: flex on the contiguous cache)",
            "flex_attention: time_patterns (and its backward), time_causal_dtypes, seq_sweep, "
            "time_gym_patterns, time_decode, decode_sweep, paged_case",
        ),
        Slot(
            "backend.matmul",
            "fn(a (N, N), b (N, N)) -> a @ b (N, N), a and b of each swept dtype",
            "the fp64 product (torch_mm's output block) at the dtype's GEMM tolerance",
            "torch_mm (torch.mm) of the same size and dtype",
            "backend notebooks: roofline (the GEMM sweep)",
        ),
    )
}
