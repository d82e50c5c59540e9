"""FlexAttention patterns with dense references, compiled execution, baselines and benchmarks."""

from kernel_lib.attention.baselines import (
    SDPA_BACKENDS,
    attention_naive,
    flash_attention,
    sdpa_attention,
)
from kernel_lib.attention.checks import TOLERANCES
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import (
    block_mask_for,
    block_sparsity,
    cache_info,
    first_calls,
    flex_attention_compiled,
    flex_attention_flash,
)
from kernel_lib.attention.patterns import PATTERNS, Pattern, PatternConfig, build_pattern
from kernel_lib.attention.reference import (
    attention_reference,
    dense_bias,
    dense_mask,
    reference_grads,
    reference_output,
)
from kernel_lib.attention.shapes import AttentionShape
from kernel_lib.attention.suite import run_suite

__all__ = [
    # configuration
    "AttentionBenchConfig", "AttentionShape",
    # the pattern registry and its dense references
    "PATTERNS", "Pattern", "PatternConfig", "build_pattern",
    "dense_mask", "dense_bias", "attention_reference", "reference_output", "reference_grads",
    "TOLERANCES",
    # compiled execution
    "flex_attention_compiled", "flex_attention_flash", "block_mask_for", "block_sparsity",
    "cache_info", "first_calls",
    # baselines
    "SDPA_BACKENDS", "sdpa_attention", "flash_attention", "attention_naive",
    # benchmarks
    "run_suite",
]  # fmt: skip
