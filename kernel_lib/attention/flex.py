"""Compiled FlexAttention: one `torch.compile(flex_attention)` per process, called through one
wrapper that turns Inductor's refusals into `skipped` reasons, block masks cached per (pattern, S,
device, block size), compiles counted so a recompile is never silent; the same flex through its
FLASH backend (FlashAttention-4) where that can run.

Legend: B batch, H heads, S sequence length, D head dim.
Eager flex_attention materialises the full score matrix (the seed system's 0.05x, research
seed_system.md 2.3); this module only ever calls the compiled function.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import typing
from typing import NamedTuple

import torch
from torch import Tensor
from torch._dynamo.exc import BackendCompilerFailed
from torch._dynamo.utils import counters
from torch.nn.attention import flex_attention as torch_flex
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from kernel_lib.attention.patterns import FlexMods, PatternConfig, build_pattern
from kernel_lib.checks import Unsupported, error_line
from kernel_lib.profiling.phases import phase
from kernel_lib.timing import Timing, time_fn

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Device types torch's flex_attention accepts (torch.nn.attention.flex_attention._validate_device).
DEVICE_TYPES = ("cuda", "cpu", "xpu", "hpu", "mps")
# Every (pattern, shape) pair is its own graph; past Dynamo's default limit of 8 a non-fullgraph
# compile would silently run eager flex. fullgraph=True turns that into an error; this raises it.
_RECOMPILE_LIMIT = 512
CAUSAL = PatternConfig("causal")
# FlashAttention-4 (`pip install flash-attn-4`): the CuTe DSL kernels torch's FLASH backend
# JIT-instantiates; the module torch looks for (torch/_inductor/kernel/flex/flex_flash_attention.py)
FLASH_MODULE = "flash_attn.cute"
FLASH_OPTIONS = {"BACKEND": "FLASH"}  # flex_attention's kernel_options selecting it


@functools.cache
def compiled_flex_attention():
    """The process-wide compiled flex_attention (static shapes, whole graph or an error).

    Raises Dynamo's recompile limits once for the process: patching them around every call
    instead costs ~0.5 ms per call, which would be charged to flex in every timing.
    """
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, _RECOMPILE_LIMIT)
    dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit, _RECOMPILE_LIMIT)
    return torch.compile(flex_attention, fullgraph=True, dynamic=False)


def call_flex(q: Tensor, k: Tensor, v: Tensor, **kwargs):
    """compiled_flex_attention()(q, k, v, **kwargs) (kwargs: flex_attention's); Unsupported
    naming the head dims, dtype, device and Inductor's own error where Inductor cannot compile it
    (no lse on a CPU, a head dim past the GPU kernel's shared memory, a tile the GPU kernel's
    BLOCK_M/BLOCK_N do not divide): the one place a refused flex compile becomes a skip."""
    try:
        with phase("kernel"):
            return compiled_flex_attention()(q, k, v, **kwargs)
    except BackendCompilerFailed as why:  # InductorError (a refused lowering) is one too
        raise Unsupported(
            f"Inductor cannot compile flex_attention for D={q.shape[-1]}, Dv={v.shape[-1]}, "
            f"{q.dtype} on {q.device.type}: {error_line(why.inner_exception)}"
        ) from None


def compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far (first compiles and recompiles)."""
    return counters["stats"]["unique_graphs"]


@functools.lru_cache(maxsize=128)
def _pattern(config: PatternConfig, seq_len: int, num_heads: int, device: str) -> FlexMods:
    return build_pattern(config, seq_len=seq_len, num_heads=num_heads, device=device)


@functools.lru_cache(maxsize=128)
def _block_mask(config: PatternConfig, seq_len: int, device: str, block_size: int) -> BlockMask:
    pattern = _pattern(config, seq_len, 1, device)
    # B=None, H=None: one mask broadcast over batch and heads (no pattern here depends on them).
    return create_block_mask(
        pattern.mask_mod, None, None, seq_len, seq_len, device=device, BLOCK_SIZE=block_size
    )


def block_mask_for(
    config: PatternConfig, seq_len: int, *, device: torch.device | str, block_size: int = 128
) -> BlockMask | None:
    """The cached BlockMask of `config` (None for patterns without a mask: attend everywhere)."""
    _check_block_size(block_size)
    if config.pattern.mask_mod is None:
        return None
    return _block_mask(config, seq_len, str(torch.device(device)), block_size)


def causal_block_mask(seq_len: int, device: str, block_size: int) -> BlockMask:
    """The causal (S, S) BlockMask, broadcast over B and H: the pattern sections' cached one (for
    modules that build their own flex calls: MLA, activation attention)."""
    return block_mask_for(CAUSAL, seq_len, device=device, block_size=block_size)


class BlockCounts(NamedTuple):
    """The (query block, key block) tiles of one BlockMask, per batch and head."""

    full: int  # visited without mask_mod (every pair allowed)
    partial: int  # visited with mask_mod evaluated on every score of the tile
    tiles: int  # ceil(S / block)^2


def block_counts(
    config: PatternConfig, seq_len: int, *, block_size: int = 128, device="cpu"
) -> BlockCounts:
    """How the kernel visits `config`'s tiles (no mask: every tile full)."""
    tiles = math.ceil(seq_len / block_size) ** 2
    mask = block_mask_for(config, seq_len, device=device, block_size=block_size)
    if mask is None:
        return BlockCounts(tiles, 0, tiles)
    full = 0 if mask.full_kv_num_blocks is None else int(mask.full_kv_num_blocks.sum())
    return BlockCounts(full, int(mask.kv_num_blocks.sum()), tiles)


def block_sparsity(
    config: PatternConfig, seq_len: int, *, block_size: int = 128, device="cpu"
) -> float:
    """Percent of (query block, key block) tiles the kernel skips entirely (0 for no mask).

    Counted over ceil(S / block)^2 tiles (BlockMask.sparsity() divides by the unpadded S and
    goes negative when S is not a multiple of the block size).
    """
    counts = block_counts(config, seq_len, block_size=block_size, device=device)
    return 100.0 * (1.0 - (counts.full + counts.partial) / counts.tiles)


class FlexVariant(NamedTuple):
    """One way to run compiled flex (flex_attention_compiled's options): the BlockMask tile,
    which on a CPU is also the kernel's (query, key) tile, and fp32 compute for bf16/fp16.

    What a CPU exposes (torch 2.13, Inductor's C++ flex template): only the tile. Of the
    kernel_options, PARTITION_SIZE is read by the decoding template alone (q_len 1),
    OUTPUT_LOGSUMEXP must be False (it is, without grad or return_lse), SKIP_MASK_SCORE drops
    the mask on diagonal tiles too, BLOCK_M/BLOCK_N are Triton's. Most of the time (53-65 %,
    perf, 2-core EPYC) is q k^T in the template's fixed 1x16 inner-product micro-kernel, which
    rereads the key tile per query row (measured slower past 64 keys: a 32 KiB L1d holds a
    16 KiB fp32 tile, not a 32 KiB one), and converts bf16 element-wise (so fp32 compute,
    `upcast`, wins where there is no AMX)."""

    block_size: int = 128
    upcast: bool = False

    @property
    def name(self) -> str:
        return f"block{self.block_size}" + ("_fp32" if self.upcast else "")


class FirstCall(NamedTuple):
    """The first call of one (pattern, shape, dtype, device, block size): compile + one run."""

    pattern: str
    shape: tuple[int, ...]
    dtype: str
    block_size: int
    timing: Timing  # one rep, no warm-up
    new_graphs: int  # 0 when an earlier compile (or the inductor cache) covered it


_FIRST_CALLS: dict[tuple, FirstCall] = {}


def first_call(
    config: PatternConfig, q: Tensor, *, block_size: int = 128, upcast: bool = False
) -> FirstCall | None:
    """The logged first call of `config` on inputs shaped like q, or None if not yet called."""
    return _FIRST_CALLS.get(_first_call_key(config, q, block_size, upcast))


def _first_call_key(config: PatternConfig, q: Tensor, block_size: int, upcast: bool) -> tuple:
    dtype = torch.float32 if upcast else q.dtype  # the dtype the kernel was compiled for
    # requires_grad compiles a different forward graph (it saves what backward needs)
    return (config, tuple(q.shape), dtype, str(q.device), q.requires_grad, block_size)


def first_calls() -> list[FirstCall]:
    """Every first call of this process, in order (the compile-time log)."""
    return list(_FIRST_CALLS.values())


class CacheInfo(NamedTuple):
    block_mask_hits: int
    block_mask_misses: int
    compiled_graphs: int


def cache_info() -> CacheInfo:
    """Block-mask cache hits/misses and graphs compiled, for reporting recompiles."""
    info = _block_mask.cache_info()
    return CacheInfo(info.hits, info.misses, compiled_graphs())


def valid_block_size(block_size: int) -> bool:
    """A power of two >= 16 (BlockMask tiles; Triton's tl.arange needs powers of two)."""
    return isinstance(block_size, int) and block_size >= 16 and not block_size & (block_size - 1)


def _check_block_size(block_size: int) -> None:
    if not valid_block_size(block_size):
        raise ValueError(f"block_size={block_size} must be a power of two >= 16")


def check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """ValueError/TypeError for inputs flex_attention_compiled can't take; Unsupported for
    what this torch cannot run here (CPU backward)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}.shape={tuple(t.shape)} must be (B, H, S, D)")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}, v.shape={tuple(v.shape)} "
            "must match (self-attention patterns are defined on S x S)"
        )
    if q.dtype not in FLOAT_DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"dtype={q.dtype} must be one of {FLOAT_DTYPES}, the same for q, k, v")
    if q.shape[-2] < 1:
        raise ValueError(f"seq_len={q.shape[-2]} must be >= 1")
    if q.device.type not in DEVICE_TYPES or not (q.device == k.device == v.device):
        raise ValueError(f"device={q.device} must be one of {DEVICE_TYPES}, the same for q, k, v")
    if q.device.type == "cpu" and any(t.requires_grad for t in (q, k, v)):
        raise Unsupported(
            f"backward: FlexAttention has no CPU backward in torch {torch.__version__} "
            "(inference only); run backward on a GPU"
        )


def _check_call(config: PatternConfig, q: Tensor, k: Tensor, v: Tensor, block_size: int) -> None:
    if not isinstance(config, PatternConfig):
        raise TypeError(f"config must be a PatternConfig, got {type(config).__name__}")
    check_inputs(q, k, v)
    _check_block_size(block_size)


def _flex_kwargs(config: PatternConfig, q: Tensor, block_size: int) -> dict:
    """flex_attention's score_mod and (cached) block_mask of `config` on inputs shaped like q."""
    _, H, S, _ = q.shape
    device = str(q.device)
    with phase("block mask"):
        mask = block_mask_for(config, S, device=device, block_size=block_size)
    return {"score_mod": _pattern(config, S, H, device).score_mod, "block_mask": mask}


def flex_attention_compiled(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    config: PatternConfig,
    *,
    block_size: int = 128,
    upcast: bool = False,
) -> Tensor:
    """Compiled flex_attention of q, k, v: (B, H, S, D) under `config`'s mask and score_mod.

    fp32/bf16/fp16 in, same dtype out (softmax accumulates in fp32). `upcast`: bf16/fp16
    inputs are copied to fp32, run through the fp32 kernel and the output cast back (on a CPU
    without AMX the fp32 GEMMs can beat the bf16 ones; the cast can't fuse into Inductor's CPU
    flex template, so it runs outside it). The first call for a new (pattern, shape, dtype,
    block size) compiles (seconds) and is logged (see first_calls); later calls reuse the
    kernel and block mask. Unsupported where Inductor cannot compile it (call_flex).
    """
    _check_call(config, q, k, v, block_size)
    if upcast and q.dtype != torch.float32:
        out = flex_attention_compiled(
            q.float(), k.float(), v.float(), config, block_size=block_size
        )
        return out.to(q.dtype)
    call = functools.partial(call_flex, q, k, v, **_flex_kwargs(config, q, block_size))
    key = _first_call_key(config, q, block_size, upcast=False)
    if key in _FIRST_CALLS:
        return call()
    graphs, result = compiled_graphs(), []
    timing = time_fn(lambda: result.append(call()), device=q.device, warmup=0, reps=1)
    _FIRST_CALLS[key] = FirstCall(
        config.name,
        tuple(q.shape),
        str(q.dtype).removeprefix("torch."),
        block_size,
        timing,
        compiled_graphs() - graphs,
    )
    return result[0]


def _torch_flex_backends() -> tuple[str, ...]:
    """The kernel_options BACKEND values this torch's flex_attention takes (() without BACKEND)."""
    options = getattr(torch_flex, "FlexKernelOptions", None)
    hints = typing.get_type_hints(options) if options is not None else {}
    return typing.get_args(hints.get("BACKEND"))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing too
        return False


@functools.cache  # asked before every timed call: its answer must cost nothing there
def flash_backend_refusal(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why flex's FLASH backend cannot run on `device` in `dtype` (None: it can): it needs an
    NVIDIA GPU of sm_90+ (Hopper, Blackwell: FlashAttention-4's kernels), bf16/fp16, a torch
    whose flex_attention takes kernel_options BACKEND='FLASH', and FLASH_MODULE installed."""
    if device.type != "cuda" or torch.version.hip:
        where = "ROCm" if torch.version.hip else device.type
        return f"FlexAttention's FLASH backend (FlashAttention-4) needs an NVIDIA GPU, not {where}"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"FlashAttention-4 needs sm_90+ (Hopper, Blackwell), this GPU is sm_{major}{minor}"
    if dtype not in (torch.bfloat16, torch.float16):
        return f"FlashAttention-4 takes bf16/fp16 inputs, not {dtype}"
    if "FLASH" not in _torch_flex_backends():
        return f"torch {torch.__version__}'s flex_attention has no kernel_options BACKEND='FLASH'"
    if not _installed(FLASH_MODULE):
        return f"not installed ({FLASH_MODULE}: pip install flash-attn-4)"
    return None


def flex_attention_flash(
    q: Tensor, k: Tensor, v: Tensor, config: PatternConfig, *, block_size: int = 128
) -> Tensor:
    """Compiled flex_attention of q, k, v: (B, H, S, D) under `config` through its FLASH backend:
    `config`'s mask and score_mod compiled into FlashAttention-4's CuTe DSL kernel (bf16/fp16 in,
    same dtype out). Unsupported with flash_backend_refusal's reason where it cannot run: never
    another kernel under its name (on a CPU torch ignores BACKEND and runs its C++ template)."""
    _check_call(config, q, k, v, block_size)
    reason = flash_backend_refusal(q.device, q.dtype)
    if reason is not None:
        raise Unsupported(reason)
    kwargs = _flex_kwargs(config, q, block_size)
    return call_flex(q, k, v, **kwargs, kernel_options=FLASH_OPTIONS)
