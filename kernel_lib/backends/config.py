"""The backend notebooks' parameters as one frozen, validated object (no prefix: `gemm_sizes` in
the notebook and parameters/*.yaml is `BackendConfig.gemm_sizes`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from kernel_lib.config import from_params, parse_dtype, positive, positive_list, require

GEMM_DTYPES = ("float32", "bfloat16", "float16")  # what the sweep times (fp64 is the reference)


def _positive_ints(values, param: str) -> None:
    positive_list(values, param)
    for value in values:
        require(isinstance(value, int), param, list(values), "a list of integers")


@dataclass(frozen=True)
class BackendConfig:
    gemm_sizes: tuple = (256, 512, 1024, 2048)  # square GEMM sizes n (n x n x n)
    gemm_dtypes: tuple = ("float32", "bfloat16")  # dtypes of the GEMM sweep
    bandwidth_mib: tuple = (64, 256)  # fp32 buffer sizes for copy/triad, MiB per buffer
    transfer_mib: tuple = (1, 64)  # host<->device copy sizes, MiB
    mlp_batch: int = 64  # rows of the small MLP's input
    mlp_dim: int = 256  # width of the small MLP (hidden layer 4x)
    mlp_dtype: str = "float32"  # dtype of the small MLP
    compile_mlp: bool = True  # time torch.compile on the small MLP, including its first call
    probe_compile: bool = True  # probe torch.compile and flex_attention (each compiles once)
    min_time_s: float = 0.2  # timed seconds per candidate
    tf32_size: int = 1024  # NVIDIA: fp32 GEMM size of the TF32 on/off comparison
    blas_size: int = 1024  # AMD: GEMM size of rocBLAS vs hipBLASLt
    xla_seq_lens: tuple = (17, 33, 50, 71, 100, 120)  # TPU: lengths of the shape-change pass
    xla_bucket: int = 64  # TPU: pad lengths up to a multiple of this (bucketing)
    xla_precision_size: int = 512  # TPU: fp32 GEMM size of the matmul-precision comparison

    def __post_init__(self):
        for f in fields(self):  # lists from YAML become tuples: the config stays hashable
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        for name in ("gemm_sizes", "bandwidth_mib", "transfer_mib", "xla_seq_lens"):
            _positive_ints(getattr(self, name), name)
        for name in (
            "mlp_batch",
            "mlp_dim",
            "tf32_size",
            "blas_size",
            "xla_bucket",
            "xla_precision_size",
        ):
            _positive_ints((getattr(self, name),), name)
        positive(self.min_time_s, "min_time_s")
        require(len(self.gemm_dtypes) > 0, "gemm_dtypes", list(self.gemm_dtypes), "non-empty")
        for name in self.gemm_dtypes:
            parse_dtype(name, param="gemm_dtypes", allowed=GEMM_DTYPES)
        parse_dtype(self.mlp_dtype, param="mlp_dtype", allowed=GEMM_DTYPES)
        for name in ("compile_mlp", "probe_compile"):
            require(isinstance(getattr(self, name), bool), name, getattr(self, name), "True/False")

    @classmethod
    def from_params(cls, params: dict) -> BackendConfig:
        """The config from a notebook's globals() or a parameter dict (missing names: defaults)."""
        return from_params(cls, params, prefix="")
