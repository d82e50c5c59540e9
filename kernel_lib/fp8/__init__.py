"""Native FP8: formats, scaling recipes (tensorwise, rowwise, blockwise, MXFP8), quantisation and
its fp64 reference, a _scaled_mm linear layer, block-scaled and grouped GEMMs, conversion,
inference and training, and weight-only FP8 linears for CPU inference. Triton kernels
(`quantize_triton`) and C kernels are imported on demand."""

from kernel_lib.fp8.block_scaled import (
    BLOCK_RECIPES,
    block_linear,
    block_scaled_mm,
    quantize_operands,
    split_k_scaled_mm,
)  # fmt: skip
from kernel_lib.fp8.checks import (
    TOLERANCES,
    block_gemm_check,
    grouped_gemm_check,
    linear_check,
    scaled_mm_check,
)  # fmt: skip
from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.convert import ConversionReport, convert_to_fp8, swap_linears
from kernel_lib.fp8.formats import (
    FORMATS,
    FormatInfo,
    Fp8Format,
    format_info,
    format_table,
    fp8_dtype,
)
from kernel_lib.fp8.grouped import (
    looped_scaled_mm,
    quantize_experts,
    scaled_grouped_mm,
    skewed_counts,
)  # fmt: skip
from kernel_lib.fp8.inference import (
    Fp8InferenceLinear,
    InferenceComparison,
    compare_inference,
    convert_for_inference,
    weight_bytes,
)  # fmt: skip
from kernel_lib.fp8.linear import (
    Fp8Linear,
    Fp8LinearConfig,
    check_fp8_dims,
    dynamic_quantize,
    fp8_matmul_support,
    scaled_mm,
    scaled_mm_unsupported,
)  # fmt: skip
from kernel_lib.fp8.numerics import (
    error_metrics,
    quantization_error_table,
    recipe_error_table,
    relative_errors,
    sample_tensor,
)
from kernel_lib.fp8.quantize import Fp8Tensor, dequantize, fp8_grid, quantize
from kernel_lib.fp8.quantize_compiled import compiled_quantize
from kernel_lib.fp8.reference import (
    fp8_linear_reference,
    grouped_linear_reference,
    quantize_reference,
    round_to_format,
)  # fmt: skip
from kernel_lib.fp8.scaling import (
    GRANULARITIES,
    RECIPES,
    CastStats,
    Granularity,
    ScalingMode,
    ScalingRecipe,
    amax,
    cast_stats,
    delayed_scale,
    mx_scale_from_amax,
    push_amax,
    scale_from_amax,
    scaling_recipe,
)  # fmt: skip
from kernel_lib.fp8.training import TrainConfig, loss_checks, make_model, train, training_runs
from kernel_lib.fp8.weight_only import (
    Fp8Weight,
    compiled_dequant_linear,
    dequant_linear,
    dequantize_weight,
    quantize_weight,
    weight_only_reference,
)  # fmt: skip

__all__ = [
    # configuration
    "Fp8BenchConfig",
    # formats
    "FORMATS", "Fp8Format", "FormatInfo", "format_info", "format_table", "fp8_dtype",
    # scaling
    "GRANULARITIES", "RECIPES", "CastStats", "Granularity", "ScalingMode", "ScalingRecipe", "amax",
    "cast_stats", "delayed_scale", "mx_scale_from_amax", "push_amax", "scale_from_amax",
    "scaling_recipe",
    # quantisation and the compiled CPU/GPU path
    "Fp8Tensor", "dequantize", "fp8_grid", "quantize", "compiled_quantize",
    # fp64 references, tolerances, error metrics and correctness tables
    "fp8_linear_reference", "grouped_linear_reference", "quantize_reference", "round_to_format",
    "TOLERANCES", "error_metrics", "quantization_error_table", "recipe_error_table",
    "relative_errors", "sample_tensor", "linear_check", "scaled_mm_check", "block_gemm_check",
    "grouped_gemm_check",
    # block-scaled (DeepSeek-V3 blockwise, MXFP8) and grouped (MoE experts) GEMMs
    "BLOCK_RECIPES", "block_linear", "block_scaled_mm", "quantize_operands", "split_k_scaled_mm",
    "looped_scaled_mm", "quantize_experts", "scaled_grouped_mm", "skewed_counts",
    # layers, conversion, inference, training
    "Fp8Linear", "Fp8LinearConfig", "check_fp8_dims", "dynamic_quantize", "fp8_matmul_support",
    "scaled_mm", "scaled_mm_unsupported",
    "ConversionReport", "convert_to_fp8", "swap_linears",
    "Fp8InferenceLinear", "InferenceComparison", "compare_inference", "convert_for_inference", "weight_bytes",
    "TrainConfig", "loss_checks", "make_model", "train", "training_runs",
    # weight-only FP8 (W8A16) for CPU inference (the C kernel: kernel_lib.fp8.weight_only_c)
    "Fp8Weight", "quantize_weight", "dequantize_weight", "weight_only_reference", "dequant_linear",
    "compiled_dequant_linear",
]  # fmt: skip
