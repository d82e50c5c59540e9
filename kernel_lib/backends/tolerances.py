"""The backend topic's one tolerance table: every check's bound with its derivation.

Errors are checks.relative_error, max |out - ref| / max |ref|, against float64 of the same
operands (input rounding excluded): what remains is accumulation and output rounding.
"""

from kernel_lib.checks import Tolerance

GEMM = {
    "float32": Tolerance(
        1e-5,
        "fp32 accumulation over K: ~eps32*sqrt(K)/5 = 1.5e-6 at K=16384; "
        "TF32 (2^-11) or bf16 passes fail it",
    ),
    "bfloat16": Tolerance(
        1e-2,
        "output rounded to bf16: 2^-8 = 3.9e-3 of an entry, plus fp32 accumulation; 2.5x headroom",
    ),
    "float16": Tolerance(
        2e-3,
        "output rounded to fp16: 2^-11 = 4.9e-4 of an entry, plus fp32 accumulation; 4x headroom",
    ),
}
TF32 = Tolerance(
    5e-3,
    "operands rounded to TF32's 10-bit mantissa: 2^-11 each, products 2^-10, "
    "partly cancelling over K; 5x headroom",
)
# torch_xla set_mat_mul_precision: 'default' is one bf16 pass, 'high' three (bf16x3).
XLA_PRECISION = {
    "default": Tolerance(
        2e-2,
        "operands rounded to bf16 (2^-8 each) before an fp32 accumulate; "
        "errors partly cancel over K",
    ),
    "high": Tolerance(
        1e-3,
        "bf16x3 keeps ~16 mantissa bits of each operand: 2^-16 each, with "
        "headroom for the dropped lo*lo term",
    ),
    "highest": GEMM["float32"],
}
MLP = {
    "float32": Tolerance(
        1e-4,
        "two fp32 GEMMs (K = dim, 4 dim) and GELU; compiled code may fuse "
        "and reorder: 10x the GEMM bound",
    ),
    "bfloat16": Tolerance(
        3e-2,
        "bf16 weights and activations rounded between the two GEMMs: "
        "2^-8 per rounding, a few roundings deep",
    ),
    "float16": Tolerance(
        1e-2,
        "fp16 rounding between the two GEMMs: 2^-11 per rounding, "
        "with headroom for GELU's fp16 evaluation",
    ),
}
EXACT = Tolerance(
    0.0, "copies and one IEEE add (b + 2c: 2c is exact) are bit-exact", "max_abs_error"
)
