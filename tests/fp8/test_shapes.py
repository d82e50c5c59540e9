"""The FP8 GEMM shape types: validated, and their record keys those of the committed reports (so
record ids do not change)."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from kernel_lib.fp8.config import Fp8BenchConfig
from kernel_lib.fp8.shapes import GemmShape, GroupedGemmShape, bf16_operands

ROOT = Path(__file__).resolve().parents[2]
REPORTS = sorted((ROOT / "outputs").glob("*/fp8.results.json"))
GEMM_CASES = ("scaled_mm_check", "block_gemm_check", "linear_forward", "block_linear")


@pytest.mark.parametrize(
    "shape, field, value",
    [
        (GemmShape(8, 16, 4), "m", 0),
        (GemmShape(8, 16, 4), "k", -1),
        (GemmShape(8, 16, 4), "n", 2.0),
        (GroupedGemmShape(64, 32, 16, 4), "tokens", 0),
        (GroupedGemmShape(64, 32, 16, 4), "ffn", -16),
        (GroupedGemmShape(64, 32, 16, 4), "experts", 0),
    ],
)
def test_a_bad_size_is_one_line_naming_its_field(shape, field, value):
    with pytest.raises(ValueError, match=f"^{field}={value!r} must be an int >= 1$"):
        dataclasses.replace(shape, **{field: value})


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_record_keys_and_their_order_are_the_committed_reports(path):
    records = json.loads(path.read_text())
    gemms = [r["shape"] for r in records if r["case"] in GEMM_CASES]
    grouped = [r["shape"] for r in records if r["case"] == "grouped_gemm"]
    assert gemms and grouped
    for shape in gemms:
        assert list(GemmShape(*shape.values()).as_dict().items()) == list(shape.items())
    for shape in grouped:
        typed = GroupedGemmShape(shape["T"], shape["K"], shape["N"], shape["E"])
        assert list(typed.as_dict().items()) == list(shape.items())


def test_sweep_and_check_shapes_and_flops():
    assert GemmShape.square(64) == GemmShape(64, 64, 64)
    assert GemmShape.ragged(32).as_dict() == {"M": 37, "K": 64, "N": 32}
    assert GemmShape(3, 5, 7).flops == 2.0 * 3 * 5 * 7
    assert GroupedGemmShape(tokens=64, dim=32, ffn=16, experts=4).flops == 2.0 * 64 * 32 * 16


def test_the_grouped_parameters_name_the_grouped_shape():
    config = Fp8BenchConfig.from_params(
        dict(fp8_grouped_tokens=96, fp8_grouped_dim=48, fp8_grouped_ffn=32, fp8_grouped_experts=5)
    )
    assert config.grouped_shape == GroupedGemmShape(tokens=96, dim=48, ffn=32, experts=5)
    assert config.grouped_shape.as_dict() == {"T": 96, "K": 48, "N": 32, "E": 5}


def test_bf16_operands_follow_the_convention():
    x, w = bf16_operands(GemmShape(5, 64, 3), device="cpu", seed=0)
    assert (x.shape, w.shape, x.dtype, w.dtype) == (
        (5, 64),
        (3, 64),
        torch.bfloat16,
        torch.bfloat16,
    )
    assert torch.equal(bf16_operands(GemmShape(5, 64, 3), device="cpu", seed=0)[1], w)
    assert 0.5 < float((x.float() @ w.float().t()).std()) < 2.0  # W / sqrt(K): unit-scale output
