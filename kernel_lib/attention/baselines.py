"""Baselines beside flex: SDPA with one backend forced, FlashAttention-2/3 when installed, and
the naive materialised-scores reference. A backend that cannot take the case raises
`checks.Unsupported(reason)`; nothing here ever falls back to another backend.

Legend: B batch, H heads, S sequence length, D head dim. All take q, k, v: (B, H, S, D).
"""

from __future__ import annotations

import importlib.util
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import (
    attention_reference,
    dense_mask,
    dense_softcap,
    rounded_bias,
    sdpa_mask,
)
from kernel_lib.checks import Unsupported

SDPA_BACKENDS = {
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_math": SDPBackend.MATH,
}
FLASH_ATTN_MODULES = {"flash_attn_2": "flash_attn", "flash_attn_3": "flash_attn_interface"}


def sdpa_inputs(config: PatternConfig, seq_len: int, num_heads: int, *, dtype, device) -> dict:
    """SDPA keyword arguments expressing the pattern: is_causal, or a dense attn_mask."""
    pattern = config.pattern
    if pattern.softcapped:
        raise Unsupported("soft-capping acts on q.k inside softmax; SDPA has no hook")
    if pattern.mask_mod is None and pattern.score_mod is None:
        return {}
    if pattern.is_causal:
        return {"is_causal": True}  # the flag, not a mask, so the flash kernels can take it
    return {"attn_mask": sdpa_mask(config, seq_len, num_heads, dtype, device=device)}


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, *, backend: str, sdpa_kwargs: dict) -> Tensor:
    """F.scaled_dot_product_attention restricted to `backend` (a key of SDPA_BACKENDS)."""
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown; valid: {', '.join(SDPA_BACKENDS)}")
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel([SDPA_BACKENDS[backend]]):
        warnings.simplefilter("always")
        try:
            return F.scaled_dot_product_attention(q, k, v, **sdpa_kwargs)
        except RuntimeError as error:  # "No available kernel" / "No viable backend"
            why = " ".join(" ".join(str(w.message).split()) for w in caught) or str(error)
            reason = f"{backend} has no kernel for this case on {q.device.type}: {why}"
            raise Unsupported(reason[:300]) from None


def flash_attn_function(version: str):
    """`flash_attn_func` of FlashAttention-2 or -3, or Unsupported if not installed."""
    if version not in FLASH_ATTN_MODULES:
        raise ValueError(f"version={version!r} is unknown; valid: {', '.join(FLASH_ATTN_MODULES)}")
    module = FLASH_ATTN_MODULES[version]
    if importlib.util.find_spec(module) is None:
        raise Unsupported(f"not installed ({module})")
    return importlib.import_module(module).flash_attn_func


def flash_attn_kwargs(config: PatternConfig) -> dict:
    """The pattern in FlashAttention's own terms, or Unsupported if it has none."""
    if config.pattern.flash is None:
        raise Unsupported(f"FlashAttention's API cannot express pattern {config.name}")
    return config.pattern.flash(config)


def flash_attention(q: Tensor, k: Tensor, v: Tensor, *, version: str, fa_kwargs: dict) -> Tensor:
    """FlashAttention-2/3 on (B, H, S, D) inputs (it takes (B, S, H, D)); fp16/bf16, CUDA only."""
    fn = flash_attn_function(version)
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        raise Unsupported(f"{version} needs fp16/bf16 on CUDA, got {q.dtype} on {q.device}")
    out = fn(*(t.transpose(1, 2) for t in (q, k, v)), **fa_kwargs)
    out = out[0] if isinstance(out, tuple) else out  # some FA3 releases also return the LSE
    return out.transpose(1, 2)


def attention_naive(q: Tensor, k: Tensor, v: Tensor, config: PatternConfig) -> Tensor:
    """The materialised-scores reference in the input dtype: the cost flex avoids."""
    S, H = q.shape[-2], q.shape[1]
    mask = dense_mask(config, S).to(q.device)
    bias = rounded_bias(config, S, H, mask, q.dtype, device=q.device)
    return attention_reference(
        q, k, v, mask=mask, bias=bias, softcap=dense_softcap(config), compute_dtype=q.dtype
    ).to(q.dtype)
