import pytest

from kernel_lib.backends.config import BackendConfig

from .conftest import TINY


def test_from_params_reads_the_notebooks_names_without_a_prefix():
    cfg = BackendConfig.from_params({**TINY, "unrelated": 1})
    assert cfg.gemm_sizes == (16,) and cfg.mlp_dim == 8 and cfg.min_time_s == 0.001


def test_missing_parameters_keep_their_defaults():
    cfg = BackendConfig.from_params({"gemm_sizes": [8]})
    assert cfg.gemm_sizes == (8,) and cfg.tf32_size == BackendConfig().tf32_size


def test_lists_become_tuples_so_the_config_is_hashable():
    assert hash(BackendConfig.from_params(TINY)) == hash(BackendConfig.from_params(TINY))


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
        BackendConfig.from_params({**TINY, name: value})
