import pytest

from kernel_lib.backends.config import BackendBenchConfig

from .conftest import TINY


def test_from_params_reads_the_notebooks_names_without_a_prefix():
    cfg = BackendBenchConfig.from_params({**TINY, "unrelated": 1})
    assert cfg.gemm_sizes == (16,) and cfg.mlp_dim == 8 and cfg.min_time_s == 0.001


def test_missing_parameters_keep_their_defaults():
    cfg = BackendBenchConfig.from_params({"gemm_sizes": [8]})
    assert cfg.gemm_sizes == (8,) and cfg.tf32_size == BackendBenchConfig().tf32_size


def test_lists_become_tuples_so_the_config_is_hashable():
    assert hash(BackendBenchConfig.from_params(TINY)) == hash(BackendBenchConfig.from_params(TINY))


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("gemm_sizes", [16, 0], "gemm_sizes"),
        ("gemm_sizes", [], "gemm_sizes"),
        ("gemm_sizes", [16.5], "gemm_sizes"),
        ("bandwidth_mib", [-1], "bandwidth_mib"),
        ("transfer_mib", [0], "transfer_mib"),
        ("xla_seq_lens", [0, 4], "xla_seq_lens"),
        ("mlp_batch", 0, "mlp_batch"),
        ("mlp_dim", -1, "mlp_dim"),
        ("tf32_size", 0, "tf32_size"),
        ("blas_size", -4, "blas_size"),
        ("xla_bucket", 0, "xla_bucket"),
        ("xla_precision_size", 0, "xla_precision_size"),
        ("min_time_s", 0.0, "min_time_s"),
        ("gemm_dtypes", ["float64"], "gemm_dtypes='float64'"),
        ("gemm_dtypes", [], "gemm_dtypes"),
        ("mlp_dtype", "fp32", "mlp_dtype='fp32'"),
        ("compile_mlp", "yes", "compile_mlp"),
    ],
)
def test_bad_values_are_rejected_naming_the_parameter(name, value, match):
    with pytest.raises(ValueError, match=match):
        BackendBenchConfig.from_params({**TINY, name: value})


def test_memory_needs_of_hand_computed_cases():
    cfg = BackendBenchConfig.from_params(
        {**TINY, "gemm_sizes": [1024], "gemm_dtypes": ["bfloat16"], "bandwidth_mib": [64, 256]}
    )
    needs = cfg.memory_needs()
    assert needs["gemm_sizes"] == 3 * 1024**2 * (2 + 8)  # a, b, out in bf16 and fp64
    assert needs["bandwidth_mib"] == 3 * 256 * 2**20  # triad's a, b, c at the largest size
    wider = BackendBenchConfig.from_params(
        {**TINY, "gemm_sizes": [1024], "gemm_dtypes": ["float32"]}
    )
    assert wider.memory_needs()["gemm_dtypes"] == 3 * 1024**2 * (4 + 8)


@pytest.mark.parametrize("name, small, large", [
    ("gemm_sizes", [256], [256, 4096]), ("bandwidth_mib", [1], [512]), ("transfer_mib", [1], [64]),
    ("tf32_size", 16, 4096), ("mlp_dim", 8, 1024), ("mlp_batch", 4, 4096),
    ("xla_seq_lens", [17], [17, 10**6]), ("xla_bucket", 64, 2**20),
])  # fmt: skip
def test_memory_needs_grow_with_the_size_they_name(name, small, large):
    def need(value):
        return BackendBenchConfig.from_params({**TINY, name: value}).memory_needs()[name]

    assert need(large) > need(small)
