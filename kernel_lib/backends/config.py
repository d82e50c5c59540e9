"""The backend notebooks' parameters as one frozen, validated object (no prefix: `gemm_sizes` in
the notebook and parameters/*.yaml is `BackendBenchConfig.gemm_sizes`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from kernel_lib.allocator import ALLOCATORS
from kernel_lib.config import (
    from_params,
    largest_needs,
    param,
    parse_dtype,
    positive,
    positive_list,
    require,
)
from kernel_lib.measure import MIN_ROUNDS

GEMM_DTYPES = ("float32", "bfloat16", "float16")  # what the sweep times (fp64 is the reference)
_DTYPES = ", ".join(GEMM_DTYPES)


def _positive_ints(values, param: str) -> None:
    positive_list(values, param)
    for value in values:
        require(isinstance(value, int), param, list(values), "a list of integers")


@dataclass(frozen=True)
class BackendBenchConfig:
    PARAM_PREFIX = ""  # the notebooks' parameter names are the fields' (not a field)

    gemm_sizes: tuple = param(
        (256, 512, 1024, 2048), "square GEMM sizes n (n x n x n); a non-empty list of ints > 0"
    )
    gemm_dtypes: tuple = param(
        ("float32", "bfloat16"), f"dtypes of the GEMM sweep; a non-empty list of {_DTYPES}"
    )
    bandwidth_mib: tuple = param(
        (64, 256), "fp32 buffer sizes for copy/triad, MiB per buffer; a non-empty list of ints > 0"
    )
    transfer_mib: tuple = param(
        (1, 64), "host<->device copy sizes, MiB; a non-empty list of ints > 0"
    )
    mlp_batch: int = param(64, "rows of the small MLP's input; an int > 0")
    mlp_dim: int = param(256, "width of the small MLP (hidden layer 4x); an int > 0")
    mlp_dtype: str = param("float32", f"dtype of the small MLP; one of {_DTYPES}")
    compile_mlp: bool = param(
        True, "time torch.compile on the small MLP, including its first call; True or False"
    )
    probe_compile: bool = param(
        True, "probe torch.compile and flex_attention (each compiles once); True or False"
    )
    min_time_s: float = param(
        0.2, "timed seconds per candidate and case, over all rounds; a finite number > 0"
    )
    allocators: tuple = param(
        ("system", "system_kept", "jemalloc", "tcmalloc"),
        f"CPU: host allocators compared (system is the baseline); a list holding system, of "
        f"{', '.join(ALLOCATORS)}",
    )
    allocator_shape: tuple = param(
        (8192, 512, 2048),
        "CPU: M, K, N of the allocator section's workload (relu of M x N, an M x K x N GEMM, "
        "bf16, fresh outputs); three ints > 0",
    )
    allocator_rounds: int = param(
        6, f"CPU: rounds of one process per allocator each; an int >= {MIN_ROUNDS}"
    )
    tf32_size: int = param(
        1024, "NVIDIA: fp32 GEMM size of the TF32 on/off comparison; an int > 0"
    )
    blas_size: int = param(1024, "AMD: GEMM size of rocBLAS vs hipBLASLt; an int > 0")
    xla_seq_lens: tuple = param(
        (17, 33, 50, 71, 100, 120),
        "TPU: input lengths of the shape-change pass; a non-empty list of ints > 0",
    )
    xla_bucket: int = param(
        64, "TPU: pad lengths up to a multiple of this (bucketing); an int > 0"
    )
    xla_precision_size: int = param(
        512, "TPU: fp32 GEMM size of the matmul-precision comparison; an int > 0"
    )

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
        require(
            "system" in self.allocators and set(self.allocators) <= set(ALLOCATORS),
            "allocators",
            list(self.allocators),
            f"a list holding system, of {', '.join(ALLOCATORS)}",
        )
        _positive_ints(self.allocator_shape, "allocator_shape")
        require(
            len(self.allocator_shape) == 3,
            "allocator_shape",
            list(self.allocator_shape),
            "M, K, N",
        )
        require(
            isinstance(self.allocator_rounds, int) and self.allocator_rounds >= MIN_ROUNDS,
            "allocator_rounds",
            self.allocator_rounds,
            f"an int >= {MIN_ROUNDS}",
        )
        require(len(self.gemm_dtypes) > 0, "gemm_dtypes", list(self.gemm_dtypes), "non-empty")
        for name in self.gemm_dtypes:
            parse_dtype(name, param="gemm_dtypes", allowed=GEMM_DTYPES)
        parse_dtype(self.mlp_dtype, param="mlp_dtype", allowed=GEMM_DTYPES)
        for name in ("compile_mlp", "probe_compile"):
            require(isinstance(getattr(self, name), bool), name, getattr(self, name), "True/False")

    def memory_needs(self) -> dict[str, float]:
        """Notebook parameter -> estimated peak bytes of the largest case it sets the size of."""
        mib, fp32 = 2**20, 4
        widest = max(parse_dtype(d).itemsize for d in self.gemm_dtypes)
        cases = [  # GEMM sweep: a, b, out in the widest swept dtype and in fp64 for the reference
            (3 * n * n * (widest + 8), ("gemm_sizes", "gemm_dtypes")) for n in self.gemm_sizes
        ]
        cases += [  # the fp32 GEMMs of one size (TF32, rocBLAS/hipBLASLt, XLA precision)
            (3 * getattr(self, name) ** 2 * (fp32 + 8), (name,))
            for name in ("tf32_size", "blas_size", "xla_precision_size")
        ]
        cases += [(3 * size * mib, ("bandwidth_mib",)) for size in self.bandwidth_mib]  # a, b, c
        m, k, n = self.allocator_shape  # bf16 relu input and output, GEMM operands and output
        cases.append((2 * (2 * m * n + m * k + k * n + m * n), ("allocator_shape",)))
        cases += [
            (2 * size * mib, ("transfer_mib",)) for size in self.transfer_mib
        ]  # host, device
        mlp_item = parse_dtype(self.mlp_dtype).itemsize
        mlp = 8 * self.mlp_dim**2 + 5 * self.mlp_batch * self.mlp_dim  # weights D x 4D x 2, x, h
        cases.append((mlp * (mlp_item + 8), ("mlp_batch", "mlp_dim", "mlp_dtype")))  # + fp64 twin
        # TPU shape-change pass: every fp32 (1, L, D) input; at the longest bucketed L, the
        # padded input on host and device, the 4D hidden before and after GELU, the output
        longest = max(-(-n // self.xla_bucket) * self.xla_bucket for n in self.xla_seq_lens)
        xla = (sum(self.xla_seq_lens) + 11 * longest) * self.mlp_dim * fp32
        cases.append((xla, ("xla_seq_lens", "xla_bucket", "mlp_dim")))
        return largest_needs(cases, "")

    @classmethod
    def from_params(cls, params: dict) -> BackendBenchConfig:
        """The config from a notebook's globals() or a parameter dict (missing names: defaults)."""
        return from_params(cls, params, prefix=cls.PARAM_PREFIX)
