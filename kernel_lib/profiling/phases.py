"""Named phases inside the kernels, in the project's own words: `with phase("combine"):` marks a
range that `torch.profiler` shows (a `record_function` named `phase: combine`) and that the
profiled pass sums per call. Free when nothing profiles: a `record_function` costs about 18 us per
range even then (2-core EPYC), a MoE dispatch opens four per expert, so `phase` opens one only
while a profiler runs (a 0.5 us check), and never inside a graph torch.compile traces.

`coverage` is the check that a profiled record shows the phases its implementation declares."""

from __future__ import annotations

import contextlib
import fnmatch

import torch
from torch.autograd.profiler import record_function

PREFIX = "phase: "
# Every phase name a kernel may mark, and what it covers.
PHASES = {
    "route": "router logits, top-k and weights",
    "sort/gather": "assignments sorted by expert, token rows gathered in that order",
    "expert GEMM 1": "each expert's first GEMM (w_in)",
    "activation": "the experts' activation (relu, SwiGLU, ...)",
    "expert GEMM 2": "each expert's second GEMM (w_out)",
    "experts fused": "the fused C kernel: GEMM 1, activation and GEMM 2 of every expert at once",
    "combine": "weighted expert outputs summed into each token's row",
    "all-to-all out": "expert parallelism: rows per rank exchanged, token rows sent to their "
    "experts' ranks (waited for)",
    "local experts": "expert parallelism: the received rows through this rank's experts",
    "all-to-all back": "expert parallelism: expert outputs sent back to their tokens' ranks "
    "(waited for)",
    "GEMM 1": "a dense baseline's first GEMM",
    "GEMM 2": "a dense baseline's second GEMM",
    "quantise activation": "the FP8 linear's input cast (its scale from its amax)",
    "quantise weight": "the FP8 linear's weight cast",
    "GEMM": "the scaled FP8 GEMM",
    "block mask": "the flex block mask (built once, then looked up)",
    "kernel": "the compiled flex_attention kernel",
}
# The phases a profile of each implementation (a glob of names) must show; an optional one (an
# `activation` fused into a GEMM) is not listed, nor the `_compiled` twins (one graph).
EXPECTED = {
    "dispatch_packed_segments": ("sort/gather", "expert GEMM 1", "expert GEMM 2", "combine"),
    "dispatch_sorted_grouped": (
        "sort/gather", "expert GEMM 1", "activation", "expert GEMM 2", "combine",
    ),
    "dispatch_sorted_segments": (
        "sort/gather", "expert GEMM 1", "activation", "expert GEMM 2", "combine",
    ),
    "dispatch_fused_c": ("sort/gather", "experts fused"),
    "dense_gemm": ("GEMM 1", "GEMM 2"),
    "fp8_linear_*": ("quantise activation", "quantise weight", "GEMM"),
    "flex_attention_compiled": ("block mask", "kernel"),
    "flex_attention_compiled_paged": ("block mask", "kernel"),
}  # fmt: skip
_NOTHING = contextlib.nullcontext()


def phase(name: str):
    """A context manager marking `name` (declared in PHASES) for a profiler; nothing when none
    runs or when torch.compile traces the caller."""
    if torch.compiler.is_compiling() or not torch.autograd._profiler_enabled():
        return _NOTHING
    return record_function(PREFIX + name)


def expected(implementation: str) -> tuple[str, ...]:
    """The phases `implementation` declares (none where EXPECTED names none)."""
    for pattern, phases in EXPECTED.items():
        if fnmatch.fnmatchcase(implementation, pattern):
            return phases
    return ()


def coverage(implementation: str, phases: dict) -> list[str]:
    """What is wrong with a profile's `phases` of `implementation`: a name not in PHASES (a
    kernel marked a misspelt phase), a phase it declares that did not show; [] when none."""
    unknown = [f"phase {p!r} is not declared in PHASES" for p in phases if p not in PHASES]
    missing = [
        f"{implementation} ran no phase {p!r}" for p in expected(implementation) if p not in phases
    ]
    return unknown + missing
