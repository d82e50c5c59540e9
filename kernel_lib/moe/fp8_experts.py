"""Routed experts as FP8 checkpoints store them (DeepSeek-V3/R1, Qwen3 FP8: e4m3fn with 128 x 128
block scales, served on CPUs by KTransformers and SGLang), and a MoE layer's decode step on them
in one C call: `c_moe_decode` (weight_only_c.c's moe_decode) reads only the chosen experts' FP8
weights, each once, converting them in registers as the W8A16 kernel does; on bf16 experts it
runs the same dispatch reading bf16.

Legend: T tokens, D model, F ffn, H = 2F ([gate; up], the gated activations) or F, E experts,
A assignments. Per expert the layout is nn.Linear's (out features, in features), the one
kernel_lib.fp8.weight_only quantises: w_in (E, H, D), w_out (E, D, F)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.c_kernels import check_tensor
from kernel_lib.fp8 import weight_only_c
from kernel_lib.fp8.scaling import BLOCK
from kernel_lib.fp8.weight_only import (
    Fp8Weight,
    dequantize_weight,
    quantize_weight,
    weight_only_reference,
)  # fmt: skip
from kernel_lib.fp8.weight_only_c import PREFETCH_BYTES, check_prefetch
from kernel_lib.moe.dispatch import check_inference, dispatch_loop
from kernel_lib.moe.experts import (
    SWIGLU_ALPHA,
    SWIGLU_LIMIT,
    FeedForwardExperts,
    activate,
    in_width,
)
from kernel_lib.moe.fused_c import ACTIVATIONS, counts_error, range_error, routing_tensors
from kernel_lib.moe.routing import Routing

WEIGHT_DTYPES = (torch.float8_e4m3fn, torch.bfloat16)


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


class DecodeExperts(NamedTuple):
    """E experts' weights as `c_moe_decode` reads them: w_in (E, H, D) and w_out (E, D, F),
    e4m3fn with fp32 block scales s_in (E, ceil(H/128), ceil(D/128)) and s_out (E, ceil(D/128),
    ceil(F/128)), or bf16 with both scales None. An expert family (`forward_expert`, in fp64)."""

    w_in: Tensor
    w_out: Tensor
    activation: str
    s_in: Tensor | None = None
    s_out: Tensor | None = None

    @property
    def is_fp8(self) -> bool:
        return self.s_in is not None

    @property
    def num_experts(self) -> int:
        return self.w_in.shape[0]

    def weights(self, e: int) -> tuple[Fp8Weight, Fp8Weight]:
        """Expert e's FP8 w_in (H, D) and w_out (D, F), block-scaled (views)."""
        return (
            Fp8Weight(self.w_in[e], self.s_in[e], "block"),
            Fp8Weight(self.w_out[e], self.s_out[e], "block"),
        )

    def expert_bytes(self, experts: Tensor) -> int:
        """The bytes of experts `experts` (distinct indices) as stored: weights and scales."""
        tensors = (self.w_in, self.w_out, self.s_in, self.s_out)
        per_expert = sum(t[0].numel() * t.element_size() for t in tensors if t is not None)
        return per_expert * experts.numel()

    def forward_expert(self, e: int, x: Tensor, token_idx: Tensor) -> Tensor:
        """Expert e on rows token_idx of x in fp64, from its exact weights (each FP8 value times
        its block scale, or bf16): the reference's expert, for `dispatch_loop`."""
        if self.is_fp8:
            w_in, w_out = self.weights(e)
            return weight_only_reference(
                activate(weight_only_reference(x[token_idx], w_in), self.activation), w_out
            )
        h = x[token_idx].double() @ self.w_in[e].double().t()
        return activate(h, self.activation) @ self.w_out[e].double().t()


def fp8_experts(experts: FeedForwardExperts, only: Tensor | None = None) -> DecodeExperts:
    """`experts` (those of indices `only`, in its order, where given) quantised per expert and
    weight to e4m3fn with 128 x 128 block scales (`quantize_weight(w, "block")` of w_in[e].T and
    w_out[e].T), as DeepSeek-V3 stores them."""
    picked = lambda w: w.detach() if only is None else w.detach()[only]  # noqa: E731
    w_in = [quantize_weight(w.t(), "block") for w in picked(experts.w_in)]
    w_out = [quantize_weight(w.t(), "block") for w in picked(experts.w_out)]
    return DecodeExperts(
        torch.stack([w.data for w in w_in]),
        torch.stack([w.data for w in w_out]),
        experts.activation,
        torch.stack([w.scale_inv for w in w_in]),
        torch.stack([w.scale_inv for w in w_out]),
    )


def bf16_experts(experts: DecodeExperts) -> DecodeExperts:
    """FP8 `experts` dequantised to bf16 (`dequantize_weight`: the fp32 product rounded once):
    the same model, as a bf16 checkpoint of it would hold it."""
    pairs = [experts.weights(e) for e in range(experts.num_experts)]
    return DecodeExperts(
        torch.stack([dequantize_weight(w, torch.bfloat16) for w, _ in pairs]),
        torch.stack([dequantize_weight(w, torch.bfloat16) for _, w in pairs]),
        experts.activation,
    )


def decode_reference(x: Tensor, routing: Routing, experts: DecodeExperts) -> Tensor:
    """fp64 (T, D): the loop over experts (`dispatch_loop`) on x in fp64, each expert from its
    exact weights, its rows times their routing weights, summed in fp64."""
    return dispatch_loop(x.double(), routing, experts)


def _checked_experts(experts: DecodeExperts) -> tuple[int | None, int | None]:
    """Pointers to the scales (None for bf16 weights) once `experts` is what moe_decode reads:
    contiguous w_in (E, H, D) and w_out (E, D, F) of one weight dtype, H the activation's width
    of F, and for FP8 contiguous fp32 block scales of their shapes."""
    if not isinstance(experts, DecodeExperts):
        raise TypeError(f"experts must be a DecodeExperts, got {type(experts).__name__}")
    if experts.activation not in ACTIVATIONS:
        raise ValueError(
            f"experts.activation={experts.activation!r} must be one of {list(ACTIVATIONS)}"
        )
    w_in = check_tensor("experts.w_in", experts.w_in, WEIGHT_DTYPES, ("E", "H", "D"))
    e, h, d = w_in.shape
    w_out = check_tensor("experts.w_out", experts.w_out, (w_in.dtype,), ("E", "D", "F"))
    if w_out.shape[:2] != (e, d):
        raise ValueError(
            f"experts.w_out (E, D, F) has E, D = {tuple(w_out.shape[:2])}, experts.w_in "
            f"(E, H, D) {e}, {d}"
        )
    f = w_out.shape[2]
    if h != in_width(f, experts.activation):
        raise ValueError(
            f"experts.w_in has H={h} rows per expert; experts.activation="
            f"{experts.activation!r} at F={f} needs "
            f"{in_width(f, experts.activation)}"
        )
    if w_in.dtype == torch.bfloat16:
        if experts.s_in is not None or experts.s_out is not None:
            raise ValueError("experts.s_in and experts.s_out must be None for bf16 weights")
        return None, None
    fp32 = (torch.float32,)
    s_in = check_tensor("experts.s_in", experts.s_in, fp32, (e, _blocks(h), _blocks(d)))
    s_out = check_tensor("experts.s_out", experts.s_out, fp32, (e, _blocks(d), _blocks(f)))
    return s_in.data_ptr(), s_out.data_ptr()


def _checked_routing(routing: Routing, tokens: int, experts: int) -> tuple[Tensor, ...]:
    """token_idx, expert_idx (int64), weight (fp32) and counts (int64), contiguous, once their
    dtypes and shapes are what moe_decode reads (A, A, A, E), for T=`tokens` and E=`experts`.
    Their ranges and counts the C code checks before it reads through them (`_failure`)."""
    if not isinstance(routing, Routing):
        raise TypeError(f"routing must be a Routing, got {type(routing).__name__}")
    if routing.num_experts != experts or routing.num_tokens != tokens:
        raise ValueError(
            f"routing is for T={routing.num_tokens}, E={routing.num_experts}; x and experts "
            f"have T={tokens}, E={experts}"
        )
    tokens, ids, weight, counts = routing_tensors(routing, experts)
    return tokens.contiguous(), ids.contiguous(), weight.float().contiguous(), counts.contiguous()


def _failure(code: int, x: Tensor, routing: Routing, experts: int) -> Exception:
    """The exception of moe_decode's return code (1-4)."""
    if code == 2:
        return range_error("token_idx", routing.token_idx, x.shape[0])
    if code == 3:
        return range_error("expert_idx", routing.expert_idx, experts)
    if code == 4:
        return counts_error(routing)
    return MemoryError(
        f"c_moe_decode: no memory for its buffers at T={x.shape[0]}, D={x.shape[1]}"
    )


def c_moe_decode(
    x: Tensor, routing: Routing, experts: DecodeExperts, *, prefetch: int = PREFETCH_BYTES
) -> Tensor:
    """out (T, D) bf16 = sum over each token's assignments of weight * expert(x[token]): the
    chosen experts' weights read once each (FP8 converted in registers, or bf16), each line
    prefetched `prefetch` bytes ahead (0: none; the same bits either way), fp32 accumulation in
    expert order, rounded to bf16 once; on torch's thread count, the same bits on any. x: (T, D)
    bf16. Raises TypeError/ValueError naming a bad operand (dtype, shape, contiguity; token or
    expert index out of range, counts that do not count expert_idx: checked in C before any
    index is read; prefetch not an int >= 0), MemoryError where the buffers do not fit,
    Unsupported where the kernel cannot be built. No autograd (check_inference)."""
    check_prefetch(prefetch)
    scales = _checked_experts(experts)
    e, h, d = experts.w_in.shape
    f = experts.w_out.shape[2]
    check_tensor("x", x, (torch.bfloat16,), ("T", d), contiguous=False)
    tokens, ids, weight, counts = _checked_routing(routing, x.shape[0], e)
    check_inference("c_moe_decode", x, experts)
    lib = weight_only_c._library()
    x, out = x.contiguous(), torch.empty(x.shape, dtype=torch.bfloat16)
    code = lib.moe_decode(
        x.data_ptr(), x.shape[0], d, tokens.data_ptr(), ids.data_ptr(), weight.data_ptr(),
        tokens.shape[0], counts.data_ptr(), e, int(scales[0] is not None), experts.w_in.data_ptr(),
        scales[0], h, experts.w_out.data_ptr(), scales[1], f, ACTIVATIONS[experts.activation],
        SWIGLU_LIMIT, SWIGLU_ALPHA, out.data_ptr(), torch.get_num_threads(), prefetch,
    )  # fmt: skip
    if code:
        raise _failure(code, x, routing, e)
    return out
