"""Dispatch strategies: run the routed experts and combine y[t] = sum_a weight_a * expert_a(x[t]).

Legend: T tokens, D model, F ffn, E experts, A kept assignments, C capacity (rows per expert).
All take the same (x, routing, experts) and return the same (T, D) output in x's dtype:
  dispatch_loop            the reference: loop over experts with index selection (any family)
  dispatch_sorted_grouped  sort by expert + `torch._grouped_mm` (as torchtitan's grouped_mm path)
  dispatch_sorted_segments sort by expert + a matmul per contiguous segment (any dtype, host sync)
  dispatch_packed_segments the same on oneDNN-prepacked weights, relu fused (CPU inference)
  dispatch_padded          capacity-padded buffer (E, C, D) + `torch.bmm` (GShard / Switch layout)
The Triton fused gather + grouped GEMM lives in dispatch_triton.py, the fused C kernel for
bf16 on CPUs (gather, both GEMMs, activation and weighting per tile of rows) in fused_c.py.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_lib.moe.experts import FeedForwardExperts, activate
from kernel_lib.moe.packed import packed, packed_linear
from kernel_lib.moe.routing import Routing
from kernel_lib.profiling.phases import phase

GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_inputs(x: Tensor, routing: Routing) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be (T, D), got shape {tuple(x.shape)}")
    if x.shape[0] != routing.num_tokens:
        raise ValueError(f"x has {x.shape[0]} tokens but routing.num_tokens={routing.num_tokens}")


def _check_ffn(experts) -> None:
    if not isinstance(experts, FeedForwardExperts):
        raise NotImplementedError(
            f"experts={type(experts).__name__}: this strategy runs FeedForwardExperts only; "
            "use dispatch_loop for other expert families"
        )


def _accumulator(x: Tensor) -> torch.dtype:
    """fp64 stays fp64 (the reference); everything else accumulates the combine in fp32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def dispatch_loop(x: Tensor, routing: Routing, experts) -> Tensor:
    """Reference: for each expert, select its assignments, run it, index_add the weighted rows.

    x: (T, D) any float dtype; experts: any family with forward_expert. Combine accumulates in
    fp32 (fp64 for fp64 input). Reads each expert's row set on the host, as any loop must.
    """
    _check_inputs(x, routing)
    out = torch.zeros(x.shape, dtype=_accumulator(x), device=x.device)
    for e in range(routing.num_experts):
        rows = (routing.expert_idx == e).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        tokens = routing.token_idx[rows]
        y = experts.forward_expert(e, x, tokens)
        out.index_add_(0, tokens, y.to(out.dtype) * routing.weight[rows, None].to(out.dtype))
    return out.to(x.dtype)


def sort_by_expert(routing: Routing) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Stable sort of assignments by expert, all on the device (no host sync): the permutation,
    token_idx and weight in sorted order, and each expert's int32 segment end offset (E,)."""
    order = torch.argsort(routing.expert_idx, stable=True)
    offsets = torch.cumsum(routing.counts, 0, dtype=torch.int32)
    return order, routing.token_idx[order], routing.weight[order], offsets


def sum_slots(grid: Tensor) -> Tensor:
    """grid (T, K, D) summed over its K slots, accumulated in fp32 and rounded once. Top-2 is one
    add, which gives the same bits (two values added in fp32, rounded once) about 5x faster than
    eager's reduction over the middle dim on a CPU (4096x2x512 bf16, 1 thread: 0.8 vs 4.8 ms)."""
    if grid.shape[1] == 2:
        return grid[:, 0] + grid[:, 1]
    return grid.sum(1)


def combine_sorted(y_sorted: Tensor, order: Tensor, routing: Routing, x: Tensor) -> Tensor:
    """out[t] = sum over t's assignments of weight * y, y given in expert-sorted order (A, D).

    Token-choice routings (routing.slot set) put the weighted rows into their (T, K) grid and
    sum the K columns with sum_slots (fp32 accumulation for bf16/fp16, rounded once; empty slots
    are zeros); expert choice index_adds into an fp32 buffer. Scales y_sorted in place: the
    caller's buffer is consumed.
    Dropless, the grid is a gather through the inverse permutation (a row gather runs about
    twice as fast as the row scatter on CPU); with drops, a scatter into zeros.
    """
    if routing.slot is not None and x.dtype != torch.float64:
        y_sorted.mul_(routing.weight[order, None].to(y_sorted.dtype))
        rows, slots = routing.num_tokens * routing.top_k, routing.slot[order]
        if y_sorted.shape[0] == rows:  # dropless: every slot is written
            position = torch.empty_like(slots)  # slot -> its row in y_sorted
            position[slots] = torch.arange(rows, device=slots.device)
            grid = y_sorted.index_select(0, position)
        else:
            grid = y_sorted.new_zeros(rows, x.shape[1]).index_copy_(0, slots, y_sorted)
        return sum_slots(grid.view(routing.num_tokens, routing.top_k, x.shape[1])).to(x.dtype)
    out = torch.zeros(x.shape, dtype=_accumulator(x), device=x.device)
    weight = routing.weight[order, None].to(out.dtype)
    out.index_add_(0, routing.token_idx[order], y_sorted.to(out.dtype) * weight)
    return out.to(x.dtype)


def check_inference(name: str, x: Tensor, experts: FeedForwardExperts) -> None:
    """Raise ValueError where an inference-only strategy would need gradients: its output has no
    path back to the weights, so training through it would silently leave them unchanged."""
    wants_grad = x.requires_grad or experts.w_in.requires_grad or experts.w_out.requires_grad
    if torch.is_grad_enabled() and wants_grad:
        raise ValueError(
            f"{name} is inference only (no autograd): run it under torch.no_grad() or on "
            "tensors that do not require grad, or train with another strategy"
        )


def check_grouped_mm(x: Tensor, experts: FeedForwardExperts) -> None:
    """Raise unless `torch._grouped_mm` can take these operands: fp32/bf16/fp16, and rows of
    x, w_in and w_out 16-byte aligned (hidden and ffn multiples of 16 / itemsize)."""
    if x.dtype not in GROUPED_MM_DTYPES:
        raise ValueError(
            f"dtype={x.dtype} not supported by torch._grouped_mm "
            f"(needs one of {[str(d) for d in GROUPED_MM_DTYPES]})"
        )
    align = 16 // x.element_size()
    for name, size in (("hidden", experts.hidden), ("ffn", experts.ffn)):
        if size % align:
            raise ValueError(
                f"{name}={size} must be a multiple of {align} for torch._grouped_mm "
                f"in {x.dtype} (16-byte row strides)"
            )


def dispatch_sorted_grouped(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> Tensor:
    """Sort assignments by expert, gather rows once, two `torch._grouped_mm` calls, combine.

    x: (T, D) fp32/bf16/fp16 (the GEMMs accumulate in fp32 and round to x's dtype); hidden and ffn
    must keep 16-byte row strides. Raises ValueError otherwise (use dispatch_sorted_segments).
    """
    _check_inputs(x, routing)
    _check_ffn(experts)
    check_grouped_mm(x, experts)
    with phase("sort/gather"):
        order, tokens, _, offsets = sort_by_expert(routing)
        xs = x.index_select(0, tokens)
    with phase("expert GEMM 1"):
        h = torch._grouped_mm(xs, experts.w_in, offs=offsets)
    with phase("activation"):
        h = activate(h, experts.activation, inplace=True)
    with phase("expert GEMM 2"):
        y = torch._grouped_mm(h, experts.w_out, offs=offsets)
    with phase("combine"):
        return combine_sorted(y, order, routing, x)


def dispatch_sorted_segments(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> Tensor:
    """Sort by expert, then one matmul pair per expert on its contiguous slice (any float dtype).

    Reads the segment sizes on the host (one sync); empty experts are skipped. Differentiable.
    """
    _check_inputs(x, routing)
    _check_ffn(experts)
    with phase("sort/gather"):
        order, tokens, _, _ = sort_by_expert(routing)
        xs = x.index_select(0, tokens)
    ys = []
    for e, seg in enumerate(xs.split(routing.counts.tolist())):
        with phase("expert GEMM 1"):
            h = seg @ experts.w_in[e]
        with phase("activation"):
            h = activate(h, experts.activation, inplace=True)
        with phase("expert GEMM 2"):
            ys.append(h @ experts.w_out[e])
    y = torch.cat(ys) if ys else xs
    with phase("combine"):
        return combine_sorted(y, order, routing, x)


def dispatch_packed_segments(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> Tensor:
    """dispatch_sorted_segments for inference on a CPU: each expert's weights prepacked once for
    oneDNN (packed.py), relu fused into the first GEMM as a post-op, each expert's output put
    in one preallocated (A, D) buffer.

    x: (T, D) fp32/bf16 (fp16 where oneDNN packs it); no autograd (check_inference). Host sync
    as the segments.
    """
    _check_inputs(x, routing)
    _check_ffn(experts)
    check_inference("packed_segments", x, experts)
    weights = packed(experts)
    relu = experts.activation == "relu"
    with phase("sort/gather"):
        order, tokens, _, _ = sort_by_expert(routing)
        xs = x.index_select(0, tokens)
    y = torch.empty_like(xs)
    start = 0
    for e, n in enumerate(routing.counts.tolist()):
        if n:
            with phase("expert GEMM 1"):
                h = packed_linear(xs[start : start + n], weights.w_in[e], relu=relu)
            if not relu:
                with phase("activation"):
                    h = activate(h, experts.activation, inplace=True)
            with phase("expert GEMM 2"):
                y[start : start + n] = packed_linear(h, weights.w_out[e])
        start += n
    with phase("combine"):
        return combine_sorted(y, order, routing, x)


def dispatch_padded(
    x: Tensor, routing: Routing, experts: FeedForwardExperts, *, capacity: int | None = None
) -> Tensor:
    """Scatter rows into an (E, C, D) buffer, two `torch.bmm`, gather back, combine.

    capacity: rows per expert; None uses the largest expert load (dropless, one host sync).
    It must hold every kept assignment: apply capacity.apply_capacity first to drop overflow.
    Padding rows are zeros and are computed anyway: this strategy runs E*C rows, not A.
    """
    return padded_experts(x, routing, experts, padded_capacity(x, routing, experts, capacity))


def padded_capacity(
    x: Tensor, routing: Routing, experts: FeedForwardExperts, capacity: int | None = None
) -> int:
    """The padded strategies' checked inputs and rows per expert: `capacity`, or None for the
    largest expert load (one host sync). ValueError where it is negative or below that load."""
    _check_inputs(x, routing)
    _check_ffn(experts)
    if capacity is None:
        return int(routing.counts.max()) if routing.counts.numel() else 0
    if capacity < 0:
        raise ValueError(f"capacity={capacity} must be >= 0")
    if routing.counts.numel() and int(routing.counts.max()) > capacity:
        raise ValueError(
            f"capacity={capacity} is below the largest expert load "
            f"{int(routing.counts.max())}; apply_capacity first"
        )
    return capacity


def padded_experts(
    x: Tensor, routing: Routing, experts: FeedForwardExperts, capacity: int
) -> Tensor:
    """dispatch_padded's tensor work, with no host sync (what max_autotune.py compiles whole):
    capacity must hold the largest expert load, unchecked here."""
    num_experts = routing.num_experts
    order, tokens, _, offsets = sort_by_expert(routing)
    expert_sorted = torch.repeat_interleave(
        torch.arange(num_experts, device=x.device), routing.counts, output_size=tokens.numel()
    )
    starts = offsets.long() - routing.counts
    slot = (
        expert_sorted * capacity
        + torch.arange(tokens.numel(), device=x.device)
        - starts[expert_sorted]
    )
    buf = x.new_zeros(num_experts * capacity, x.shape[1])
    buf.index_copy_(0, slot, x.index_select(0, tokens))
    h = torch.bmm(buf.view(num_experts, capacity, x.shape[1]), experts.w_in)
    y = torch.bmm(activate(h, experts.activation, inplace=True), experts.w_out)
    y = y.view(num_experts * capacity, x.shape[1])
    return combine_sorted(y.index_select(0, slot), order, routing, x)
