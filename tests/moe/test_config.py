import dataclasses

import pytest

from kernel_lib.moe import suite
from kernel_lib.moe.config import DECODE_WEIGHT_BYTES, MoEBenchConfig
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.suite import Context


def test_defaults_are_valid_and_frozen():
    cfg = MoEBenchConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.top_k = 1
    assert cfg.shapes == [MoEShape(4096, 512, 2048, 8, 2)]


def test_from_params_reads_moe_prefixed_names_and_makes_lists_tuples():
    cfg = MoEBenchConfig.from_params(
        {
            "moe_tokens": [8, 16],
            "moe_hidden": [16, 32],
            "moe_ffn": [32, 64],
            "moe_compile": [],
            "other": 1,
        }
    )
    assert (
        cfg.tokens == (8, 16) and cfg.compile == () and cfg.shapes[1] == MoEShape(16, 32, 64, 8, 2)
    )
    hash(cfg)


@pytest.mark.parametrize("param, value", [
    ("top_k", 9), ("experts", 0), ("tokens", [0]), ("hidden", [16.5]), ("dtype", "int8"),
    ("dtype", "float64"), ("activation", "tanh"), ("strategies", ["magic"]),
    ("compile", ["fused"]), ("sweep_strategies", ["x"]), ("layer_types", ["dense"]),
    ("capacity_factor", 0.0), ("capacity_factor", float("inf")), ("imbalance", [float("nan")]),
    ("imbalance", []), ("min_time_s", -1.0), ("sweep_top_k", [1, 9]), ("sweep_experts", [1, 4]),
    ("backward", "yes"), ("sweep_base_tokens", 0), ("presets", ["DeepSeek-V3"]),
    ("preset_scale", 0.0), ("preset_scale", 2.0), ("preset_tokens", 0), ("preset_zipf", -1.0),
    ("balance_preset", "mixtral"), ("balance_steps", 0), ("balance_gamma", 0.0),
    ("strategies", []), ("sweep_strategies", []), ("layer_types", []), ("presets", []),
    ("side_strategies", ["magic"]), ("side_strategies", []), ("fp8_decode_presets", ["DeepSeek"]),
    ("edge_strategies", ["magic"]), ("edge_strategies", []),
    ("fp8_decode_presets", "deepseek-v3"), ("fp8_decode_tokens", []), ("fp8_decode_tokens", [0]),
    ("fp8_decode_tokens", [2.0]), ("fp8_decode_tokens", 4),
])  # fmt: skip
def test_bad_parameter_is_named(param, value):
    with pytest.raises(ValueError, match=f"moe_{param}="):
        MoEBenchConfig(**{param: value})


def test_top_k_message_names_both_parameters():
    with pytest.raises(ValueError, match="moe_top_k=9 must be <= moe_experts=8"):
        MoEBenchConfig(top_k=9)


def test_shape_lists_must_have_equal_length():
    with pytest.raises(ValueError, match="moe_ffn"):
        MoEBenchConfig(tokens=(8, 8), hidden=(16, 16), ffn=(32,))


def test_an_empty_compile_list_is_fine():  # the plain loop is timed compiled anyway
    assert MoEBenchConfig(compile=[]).compile == ()


def test_an_empty_fp8_decode_presets_list_is_fine():  # no FP8 decode section (moe_ep_presets too)
    assert MoEBenchConfig(fp8_decode_presets=[]).fp8_decode_presets == ()


def test_the_side_compares_time_moe_strategies_that_side_strategies_names():
    cfg = MoEBenchConfig(
        strategies=["padded", "loop", "fused_c"], side_strategies=["fused_c", "padded", "triton"]
    )
    assert cfg.side == ("padded", "fused_c")  # moe_strategies' order; triton is not timed at all
    assert MoEBenchConfig().side == MoEBenchConfig().strategies  # the full sweep: all of them


def test_the_edge_check_runs_moe_strategies_that_edge_strategies_names(monkeypatch, cpu_facts):
    cfg = MoEBenchConfig(strategies=["padded", "loop"], edge_strategies=["loop", "triton"])
    assert cfg.edge == ("loop",) and MoEBenchConfig().edge == MoEBenchConfig().strategies
    checked = []
    real = suite.check_table
    monkeypatch.setattr(
        suite,
        "check_table",
        lambda case, strategies: checked.append(strategies) or real(case, strategies),
    )
    records = suite.edge_check(Context(cfg, cpu_facts)).records
    assert checked and all(s == ("loop",) for s in checked)
    assert {r.implementation for r in records} == {"dispatch_loop"}


SMALL = dict(tokens=(1024,), hidden=(64,), ffn=(256,), experts=4, top_k=2, sweep_tokens=(8,),
             sweep_base_tokens=8, sweep_experts=(4,), sweep_top_k=(1,),
             strategies=("loop", "sorted_grouped"), presets=("mixtral-8x7b",),
             preset_scale=0.001, preset_tokens=8)  # fmt: skip


def test_memory_needs_of_a_hand_computed_case():
    needs = MoEBenchConfig(**SMALL).memory_needs()
    # T=1024, D=64, F=256, E=4, K=2: x and grad_out 3 T D, w_in/w_out and their gradients
    # 2 x 2 x E D 2F, routed rows T K (D + 4F): 2 949 120 elements, each in bfloat16 + fp64 ...
    assert needs["moe_dtype"] == 2_949_120 * (2 + 8)
    # ... and the seed-style comparison at the same shape in float32 + fp64, the largest case
    assert needs["moe_tokens"] == needs["moe_hidden"] == 2_949_120 * (4 + 8)
    assert set(needs) >= {"moe_sweep_tokens", "moe_sweep_experts", "moe_sweep_top_k"}


@pytest.mark.parametrize("field, bigger", [
    ("tokens", (2048,)), ("hidden", (128,)), ("experts", 8), ("sweep_tokens", (4096,)),
    ("sweep_experts", (64,)), ("sweep_base_tokens", 4096), ("sweep_top_k", (4,)),
])  # fmt: skip
def test_memory_needs_grow_with_the_size_they_name(field, bigger):
    small = MoEBenchConfig(**SMALL).memory_needs()
    large = MoEBenchConfig(**{**SMALL, field: bigger}).memory_needs()
    assert large[f"moe_{field}"] > small[f"moe_{field}"]
    assert all(large[k] >= v for k, v in small.items())


def test_memory_needs_of_the_presets_follow_their_scaled_sizes():
    deepseek = {**SMALL, "presets": ("deepseek-v3",), "preset_tokens": 8192}
    small = MoEBenchConfig(**{**deepseek, "preset_scale": 0.0625}).memory_needs()
    large = MoEBenchConfig(**{**deepseek, "preset_scale": 0.25})
    # DeepSeek-V3 at 1/16: D=448, F=128, E=256, K=8, T=8192 (memory_needed's terms)
    elements = 3 * 8192 * 448 + 4 * 256 * 448 * 256 + 8192 * 8 * (448 + 4 * 128)
    assert small["moe_preset_scale"] == elements * (2 + 8)
    assert large.memory_needs()["moe_preset_scale"] > small["moe_preset_scale"]


def test_memory_needs_of_the_fp8_decode_count_its_experts_at_the_scaled_sizes():
    qwen = {**SMALL, "fp8_decode_presets": ("qwen3-30b-a3b",), "preset_scale": 0.0625}
    needs = MoEBenchConfig(**qwen).memory_needs()
    # Qwen3-30B-A3B at 1/16: D=128, F=48, H=2F (SwiGLU), E=128, K=8; T=16 of the fp64 check
    weights, rows = 128 * 128 * (96 + 48), 16 * (3 * 128 + 8 * (96 + 48))
    need = weights * DECODE_WEIGHT_BYTES + rows * 8
    assert needs["moe_fp8_decode_presets"] == needs["moe_fp8_decode_tokens"] == need
    none = MoEBenchConfig(**{**qwen, "fp8_decode_presets": ()}).memory_needs()
    assert "moe_fp8_decode_tokens" not in none
    larger = MoEBenchConfig(**{**qwen, "preset_scale": 0.25}).memory_needs()
    assert larger["moe_fp8_decode_presets"] > need


def test_capacity_mode_counts_the_padded_buffers_of_the_padded_strategy():
    padded = {**SMALL, "strategies": ("loop", "padded")}
    assert "moe_capacity_factor" not in MoEBenchConfig(**SMALL).memory_needs()
    need = MoEBenchConfig(**padded).memory_needs()["moe_capacity_factor"]
    # the dtype's case plus E x C = 4 x ceil(1.25 x 1024 x 2 / 4) rows of D, F, F, D in bfloat16
    assert need == 2_949_120 * (2 + 8) + 2560 * 2 * (64 + 256) * 2
    huge = MoEBenchConfig(**padded, capacity_factor=1e9).memory_needs()["moe_capacity_factor"]
    assert huge > 2**50
