"""Correctness of every pattern: compiled flex and SDPA (dense mask) against the fp64 reference.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from kernel_lib.attention.baselines import sdpa_attention
from kernel_lib.attention.flex import block_sparsity, flex_attention_compiled
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import (
    attention_reference,
    dense_bias,
    dense_mask,
    dense_softcap,
    sdpa_mask,
)
from kernel_lib.attention.shapes import AttentionShape, make_qkv

# Max |out - fp64 reference| allowed: fp32 accumulation over S keys vs 8-bit-mantissa outputs.
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}


def reference_rows(seq_len: int, *, max_rows: int = 1024) -> torch.Tensor | None:
    """None (check every query row) up to `max_rows`, else the first and last 64 rows and 128
    spread between: the fp64 reference of all rows at large S would need B*H*S*S*8 bytes."""
    if seq_len <= max_rows:
        return None
    spread = torch.linspace(0, seq_len - 1, 128).long()
    edges = torch.cat([torch.arange(64), torch.arange(seq_len - 64, seq_len)])
    return torch.unique(torch.cat([edges, spread]))


def reference_output(q, k, v, config: PatternConfig, *, rows=None) -> torch.Tensor:
    """The fp64 materialised-scores oracle of `config`: (B, H, S, D); (B, H, R, D) for `rows`."""
    S, H = q.shape[-2], q.shape[1]
    mask = dense_mask(config, S)
    if rows is not None:
        q, mask = q[..., rows.to(q.device), :], mask[rows]
    bias = dense_bias(config, S, H, rows=rows, device=q.device)
    return attention_reference(q, k, v, mask=mask, bias=bias, softcap=dense_softcap(config))


def output_rows(out: torch.Tensor, rows) -> torch.Tensor:
    """The query rows of `out` (B, H, S, D) that the reference computed."""
    return out if rows is None else out[..., rows.to(out.device), :]


def max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).abs().max())


def error_bound(error: float) -> str:
    """The error rounded up to a power of ten ('<=1e-06'): stable across runs for nbval."""
    if error == 0:
        return "0"
    return f"<=1e{math.ceil(math.log10(error)):+03d}"


def check_patterns(
    shape: AttentionShape, configs: list[PatternConfig], *, device, block_size: int = 128
) -> pd.DataFrame:
    """One row per pattern: mask density, block sparsity, flex and SDPA-math errors vs fp64.

    SDPA (math backend, which every device has) runs the pattern as the dense reference mask/bias,
    so a dense reference that disagreed with flex's mask_mod would show up in both columns.
    Above S=1024 only a fixed sample of query rows is compared (see reference_rows).
    Raises AssertionError naming every pattern past TOLERANCE[dtype].
    """
    q, k, v = make_qkv(shape, device=device, seed=0)
    rows = reference_rows(shape.seq_len)
    tolerance = TOLERANCE[shape.dtype]
    rows_q = output_rows(q, rows)
    table, failures = [], []
    for config in configs:
        ref = reference_output(q, k, v, config, rows=rows)
        flex_out = flex_attention_compiled(q, k, v, config, block_size=block_size)
        flex_error = max_error(output_rows(flex_out, rows), ref)
        if dense_softcap(config) is None:  # soft-capping has no SDPA form: checked vs fp64 only
            mask = sdpa_mask(config, shape.seq_len, shape.heads, q.dtype, rows=rows, device=device)
            sdpa_out = sdpa_attention(
                rows_q, k, v, backend="sdpa_math", sdpa_kwargs={"attn_mask": mask}
            )
            sdpa_error = max_error(sdpa_out, ref)
        else:
            sdpa_error = None
        passed = flex_error <= tolerance and (sdpa_error is None or sdpa_error <= tolerance)
        if not passed:
            failures.append(f"{config.name} (flex {flex_error:.2e}, sdpa {sdpa_error})")
        table.append(
            {
                "pattern": config.name,
                "density_%": round(
                    100 * float(dense_mask(config, shape.seq_len).float().mean()), 1
                ),
                "block_sparsity_%": round(
                    block_sparsity(config, shape.seq_len, block_size=block_size, device=device),
                    1,
                ),
                "flex_vs_fp64": error_bound(flex_error),
                "sdpa_vs_fp64": "n/a" if sdpa_error is None else error_bound(sdpa_error),
                "tolerance": tolerance,
                "result": "PASS" if passed else "FAIL",
            }
        )
    if failures:
        raise AssertionError(f"patterns past tolerance {tolerance}: {'; '.join(failures)}")
    return pd.DataFrame(table)
