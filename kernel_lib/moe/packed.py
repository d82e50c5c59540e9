"""Expert weights prepacked once into oneDNN's blocked layout, for inference on CPUs.

Legend: D model, F ffn (2F for SwiGLU's w_in), E experts. oneDNN's brgemm reads bf16 weights in a
blocked (VNNI) layout: a plain (D, F) weight handed to `torch.mm` is copied into it inside every
call (no reorder shows in ONEDNN_VERBOSE; it is part of the matmul's time), which a short
per-expert GEMM amortises worst, most of all with AMX tiles. Packing each expert once (`torch.ops.mkldnn._reorder_linear_weight`, what
Inductor's freezing does for nn.Linear) and running `torch.ops.mkldnn._linear_pointwise` with the
relu fused as a post-op removes both the repack and the activation's pass over (n, F).
Forward only: packed weights carry no autograd.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib.moe.experts import FeedForwardExperts

PACKED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class PackedExperts(NamedTuple):
    """Per expert, w_in as (F, D) and w_out as (D, F) in oneDNN's blocked layout."""

    w_in: tuple[Tensor, ...]
    w_out: tuple[Tensor, ...]


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@functools.cache
def _packing_error(dtype: torch.dtype) -> str | None:
    """oneDNN's own reason it cannot pack `dtype` weights on this CPU (fp16 needs AVX512-FP16
    or AVX-NE-CONVERT), or None."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.ones(16, 16, dtype=dtype), None)
    except RuntimeError as err:
        return str(err).splitlines()[0]
    return None


def packing_unavailable(x: Tensor, experts) -> str | None:
    """Why these operands cannot run on prepacked oneDNN weights here, or None."""
    if not isinstance(experts, FeedForwardExperts):
        return f"prepacked weights are built for FeedForwardExperts, not {type(experts).__name__}"
    if x.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return f"oneDNN prepacked linear runs on CPUs with oneDNN, not {x.device.type}"
    if x.dtype not in PACKED_DTYPES:
        return f"oneDNN prepacked linear takes {[str(d) for d in PACKED_DTYPES]}, not {x.dtype}"
    return _packing_error(x.dtype)


def _stamp(experts: FeedForwardExperts) -> tuple:
    w_in, w_out = experts.w_in, experts.w_out
    return (w_in.data_ptr(), w_in._version, w_out.data_ptr(), w_out._version, w_in.dtype)


def packed_once(cache: weakref.WeakKeyDictionary, experts: FeedForwardExperts, pack: Callable):
    """pack(experts) (run without grad) kept in `cache` per expert set and run again only when a
    weight changed (its storage, in-place version or dtype): packing is never part of a call."""
    stamp, got = _stamp(experts), cache.get(experts)
    if got is None or got[0] != stamp:
        with torch.no_grad():
            got = (stamp, pack(experts))
        cache[experts] = got
    return got[1]


def _pack_for_onednn(experts: FeedForwardExperts) -> PackedExperts:
    pack = torch.ops.mkldnn._reorder_linear_weight
    return PackedExperts(
        tuple(pack(w.t().contiguous(), None) for w in experts.w_in),
        tuple(pack(w.t().contiguous(), None) for w in experts.w_out),
    )


def packed(experts: FeedForwardExperts) -> PackedExperts:
    """The experts' weights packed for oneDNN, packed again only when a weight changed."""
    return packed_once(_CACHE, experts, _pack_for_onednn)


def packed_linear(x: Tensor, weight: Tensor, *, relu: bool = False) -> Tensor:
    """x (n, in) @ weight.T for a packed (out, in) weight, relu fused when asked; x's dtype."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "relu" if relu else "none", [], "")
