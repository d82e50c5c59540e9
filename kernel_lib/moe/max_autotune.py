"""The padded strategy compiled by Inductor with max-autotune: its two batched GEMMs are offered to
Inductor's C++ GEMM template beside ATen's bmm, and Inductor keeps whichever it measured faster.

Legend: T tokens, D model, F ffn, E experts, C capacity (rows per expert).
The template generates its micro-kernels for the CPU it compiles on (AMX tiles where the CPU has
AMX-BF16, AVX-512 or AVX2 vectors elsewhere): many small experts get AMX without hand-written AMX
code. One graph per (E, C, D, F, dtype, activation); the first call compiles and autotunes
(seconds), which Inductor's on-disk cache (TORCHINDUCTOR_CACHE_DIR, set by the runner) keeps for
later runs. Forward only (inference): no autograd graph is compiled. CPU only
(`strategies.unavailable`): Inductor offers the template for CPU tensors alone, so on a GPU its
GEMMs would have ATen's bmm alone to choose from.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from kernel_lib.checks import Unsupported
from kernel_lib.moe.dispatch import check_inference, padded_capacity, padded_experts
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.routing import Routing

GEMM_BACKENDS = "CPP,ATEN"  # Inductor's C++ template against ATen (oneDNN / MKL); no Triton on CPU
RECOMPILE_LIMIT = 64  # graphs of this one function per process (one per case shape)


@functools.cache
def _compiled(compile_fn):
    """padded_experts through `compile_fn` (torch.compile), wrapped once: a wrapper costs ~0.8 ms
    to make, too much for a timed call; keyed by the function, so a test that replaces
    torch.compile gets a wrapper of its own."""
    options = {"max_autotune": True, "max_autotune_gemm_backends": GEMM_BACKENDS}
    return compile_fn(padded_experts, options=options, fullgraph=True)


def dispatch_padded_max_autotune(
    x: Tensor, routing: Routing, experts: FeedForwardExperts
) -> Tensor:
    """dispatch_padded (capacity = the largest expert load, read on the host) compiled with
    max-autotune. Raises Unsupported where no token is routed, and once RECOMPILE_LIMIT graphs
    were compiled in this process (a skipped record, never an eager run under this name)."""
    capacity = padded_capacity(x, routing, experts)
    check_inference("padded_max_autotune", x, experts)
    if capacity == 0:  # Inductor fails to lower (or, in its C++ GEMM, divides by) an empty batch
        raise Unsupported("padded_max_autotune: no assignments to compile an (E, 0, D) GEMM for")
    try:
        with (
            torch.no_grad(),
            torch._dynamo.config.patch(
                recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True
            ),
        ):
            return _compiled(torch.compile)(x, routing, experts, capacity)
    except torch._dynamo.exc.FailOnRecompileLimitHit as why:
        raise Unsupported(
            f"padded_max_autotune: recompile limit ({RECOMPILE_LIMIT} graphs) hit in this "
            f"process: {str(why).splitlines()[0][:120]}"
        ) from None
