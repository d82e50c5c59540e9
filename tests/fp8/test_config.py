import pytest

from kernel_lib.fp8.config import Fp8BenchConfig


def test_defaults_and_from_params():
    config = Fp8BenchConfig.from_params({"fp8_gemm_sizes": [64], "fp8_seed": 3, "other_x": 1})
    assert config.gemm_sizes == (64,) and config.seeds == [3, 4, 5]
    assert config.train_config().rows == config.train_batch * config.model_seq


@pytest.mark.parametrize("field, value, match", [
    ("gemm_sizes", [100], "fp8_gemm_sizes=100 must be an integer multiple of 16"),
    ("check_sizes", [0], "fp8_check_sizes=0"),
    ("gemm_sizes", [], "fp8_gemm_sizes"),
    ("linear_format", "e3m4", "fp8_linear_format='e3m4' must be one of"),
    ("grad_format", "float16", "fp8_grad_format"),
    ("recipes", ["fastest"], "fp8_recipes='fastest'"),
    ("train_recipes", ["x"], "fp8_train_recipes"),
    ("granularities", ["colwise"], "fp8_granularities"),
    ("quant_granularities", ["colwise"], "fp8_quant_granularities"),
    ("formats", ["fp8"], "fp8_formats"),
    ("quant_mib", [-1], "fp8_quant_mib"),
    ("model_dim", 30, "fp8_model_dim=30"),
    ("train_steps", 0, "fp8_train_steps"),
    ("train_seeds", 0, "fp8_train_seeds"),
    ("min_time_s", 0.0, "fp8_min_time_s"),
    ("seed", -1, "fp8_seed"),
    ("block_sizes", [100], "fp8_block_sizes=100 must be an integer multiple of 128"),
    ("block_check_sizes", [64], "fp8_block_check_sizes=64"),
    ("block_recipes", ["nvfp4"], "fp8_block_recipes='nvfp4'"),
    ("error_format", "e4m3fnuz", "fp8_error_format='e4m3fnuz'"),
    ("grouped_experts", 1, "fp8_grouped_experts=1"),
    ("grouped_dim", 40, "fp8_grouped_dim=40"),
    ("grouped_tokens", 0, "fp8_grouped_tokens"),
    ("granularities", ["mx"], "fp8_formats .with mx in fp8_granularities.='e4m3fnuz'"),
])  # fmt: skip
def test_bad_values_name_the_parameter(field, value, match):
    with pytest.raises(ValueError, match=match):
        Fp8BenchConfig(**{field: value})


def test_memory_needs_of_hand_computed_cases():
    needs = Fp8BenchConfig(quant_mib=(64, 16), gemm_sizes=(1024,), error_rows=256).memory_needs()
    # 64 MiB of fp32 x: x, the copy's dst, the fp8 output (a quarter), x in fp64 (twice the bytes)
    assert needs["fp8_quant_mib"] == 64 * 2**20 * (1 + 1 + 0.25 + 2)
    # n x n: bf16 x, W, out (2 bytes each), fp8 x, W (1 byte), fp64 x, W, out (8 bytes)
    assert needs["fp8_gemm_sizes"] == 1024**2 * 32
    assert 256**2 * 12 < needs["fp8_error_rows"] < 256**2 * 64


def test_memory_needs_of_training_count_every_steps_batch_drawn_at_once():
    needs = Fp8BenchConfig(train_steps=1000, train_batch=16, model_seq=16).memory_needs()
    # inputs, stacked targets and normalised targets: (1000, 256, 32) fp32 each
    assert 12 * 1000 * 256 * 32 < needs["fp8_train_steps"] < 13 * 1000 * 256 * 32
    assert Fp8BenchConfig(train_steps=10**12).memory_needs()["fp8_train_steps"] > 2**50


@pytest.mark.parametrize("field, small, large", [
    ("quant_mib", (64,), (64, 256)), ("gemm_sizes", (512,), (2048,)), ("error_rows", 64, 4096),
    ("check_sizes", (32,), (32, 1024)), ("block_check_sizes", (128,), (4096,)),
    ("train_steps", 40, 4000), ("train_batch", 16, 64), ("model_seq", 16, 64),
    ("model_dim", 32, 512), ("model_ffn", 64, 4096), ("model_layers", 1, 8),
])  # fmt: skip
def test_memory_needs_grow_with_the_size_they_name(field, small, large):
    def need(value):
        return Fp8BenchConfig(**{field: value}).memory_needs()[f"fp8_{field}"]

    assert need(large) > need(small)
