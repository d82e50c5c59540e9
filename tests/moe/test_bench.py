import pytest

from kernel_lib.moe.bench import suite
from kernel_lib.moe.cases import check_strategies, make_case

PARAMS = dict(
    moe_tokens=[64], moe_hidden=[16], moe_ffn=[32], moe_experts=4, moe_top_k=2,
    moe_dtype="float32", moe_activation="relu", moe_capacity_factor=1.0,
    moe_strategies=["loop", "sorted_grouped", "padded", "triton"], moe_compile=[],
    moe_backward=True, moe_layer_types=["standard", "switch"], moe_imbalance=[0.0, 1.0],
    moe_sweep_tokens=[32, 64], moe_sweep_experts=[2, 4], moe_sweep_top_k=[1, 2],
    moe_sweep_base_tokens=32, moe_sweep_strategies=["sorted_grouped"], moe_min_time_s=0.0,
)  # fmt: skip


def test_suite_records_fractions_ratios_and_skips(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    records = suite(PARAMS)
    fwd = {r.implementation: r for r in records if r.case == "forward"}
    assert fwd["dispatch_sorted_grouped"].fraction_of_peak > 0
    assert fwd["dispatch_sorted_grouped"].baseline == "seed_style"
    assert fwd["dispatch_triton"].status == "skipped" and "GPU" in fwd["dispatch_triton"].reason
    assert fwd["seed_style"].metrics["drop_rate"] > 0
    assert {r.case for r in records} >= {
        "forward_backward",
        "forward_capacity",
        "layer_forward",
        "sweep_top_k",
    }


def test_check_strategies_passes_and_skips_misaligned_grouped():
    table = check_strategies(
        make_case(33, 7, 13, 3, 2, dtype="float32"), ["loop", "sorted_grouped", "padded"]
    )
    assert table["result"].tolist()[:2] == ["PASS", "skipped"] and "hidden" in table["reason"][1]


@pytest.mark.parametrize(
    "param, value", [("top_k", 5), ("hidden", 0), ("dtype", "int8"), ("tokens", -1)]
)
def test_make_case_bad_input(param, value):
    args = dict(tokens=8, hidden=8, ffn=8, experts=4, top_k=2, dtype="float32")
    with pytest.raises(ValueError, match=param):
        make_case(**{**args, param: value})


def test_shape_lists_must_match():
    from kernel_lib.moe.bench import base_case

    with pytest.raises(ValueError, match="moe_ffn"):
        base_case({**PARAMS, "moe_ffn": [32, 64]})
