"""FlexAttention patterns with dense references, compiled execution, baselines and benchmarks."""

from kernel_lib.attention.baselines import (
    SDPA_BACKENDS,
    BackendUnavailable,
    attention_naive,
    flash_attention,
    sdpa_attention,
)
from kernel_lib.attention.bench import suite
from kernel_lib.attention.checks import check_patterns
from kernel_lib.attention.flex import (
    block_mask_for,
    block_sparsity,
    cache_info,
    first_calls,
    flex_attention_compiled,
)
from kernel_lib.attention.patterns import PATTERNS, AttentionPattern, PatternConfig, build_pattern
from kernel_lib.attention.reference import attention_reference, dense_bias, dense_mask
from kernel_lib.attention.shapes import AttentionShape

__all__ = [
    # patterns and their dense references
    "PATTERNS", "PatternConfig", "AttentionPattern", "build_pattern",
    "dense_mask", "dense_bias", "attention_reference",
    # compiled execution
    "flex_attention_compiled", "block_mask_for", "block_sparsity", "cache_info", "first_calls",
    # baselines
    "SDPA_BACKENDS", "BackendUnavailable", "sdpa_attention", "flash_attention", "attention_naive",
    # benchmarks
    "AttentionShape", "check_patterns", "suite",
]  # fmt: skip
