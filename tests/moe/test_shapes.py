import dataclasses

import pytest

from kernel_lib.moe.bench import sweep_values
from kernel_lib.moe.config import SWEEPS, MoEBenchConfig
from kernel_lib.moe.shapes import LETTERS, MoEShape
from kernel_lib.params import ROOT
from kernel_lib.results.files import read_results

FIELDS = [f.name for f in dataclasses.fields(MoEShape)]
# every committed report's MoE records (and outputs/reference's, where a run left them)
REPORTS = sorted((ROOT / "outputs").glob("*/moe.results.json"))


def test_as_dict_is_the_record_shape_in_letters():
    shape = MoEShape(131, 64, 96, 5, 2, imbalance=0.5, capacity=66)
    assert list(shape.as_dict().items()) == [
        ("T", 131), ("D", 64), ("F", 96), ("E", 5), ("K", 2), ("imbalance", 0.5), ("capacity", 66),
    ]  # fmt: skip
    assert MoEShape(8, 8, 8, 4, 2).as_dict()["capacity"] is None  # dropless


@pytest.mark.parametrize("field, value", [
    ("tokens", -1), ("hidden", 0), ("ffn", 0), ("experts", 0), ("top_k", 0), ("top_k", 5),
    ("imbalance", float("nan")), ("imbalance", float("inf")), ("capacity", -1),
])  # fmt: skip
def test_bad_field_is_named_in_one_line(field, value):
    with pytest.raises(ValueError, match=f"^{field}=") as err:
        MoEShape(**{**dict(tokens=8, hidden=8, ffn=8, experts=4, top_k=2), field: value})
    assert "\n" not in str(err.value)


def test_zero_tokens_and_zero_capacity_are_shapes():
    assert MoEShape(0, 8, 8, 4, 2).with_capacity_factor(1.0).capacity == 0


def test_capacity_factor_gives_the_rows_per_expert():
    shape = MoEShape(131, 64, 96, 4, 2, imbalance=1.0)
    assert shape.with_capacity_factor(1.0) == dataclasses.replace(shape, capacity=66)  # 262 / 4
    assert shape.with_capacity_factor(1.25).capacity == 82


def test_every_sweep_axis_and_letter_is_a_field():
    assert set(SWEEPS) <= set(FIELDS) and set(LETTERS) <= set(FIELDS)
    cfg = MoEBenchConfig()
    for axis in SWEEPS:
        for value in sweep_values(axis, cfg):
            assert getattr(dataclasses.replace(cfg.shapes[0], **{axis: value}), axis) == value


def test_the_committed_reports_moe_shapes_are_moe_shapes():
    assert REPORTS, "no outputs/*/moe.results.json"
    for path in REPORTS:
        for r in read_results(path):  # old reports' shapes in today's names (results.legacy)
            if r["case"] == "routing_check":  # a router's shape, no experts' sizes
                continue
            shape = r["shape"]
            ours = MoEShape(**{f: shape[LETTERS.get(f, f)] for f in FIELDS}).as_dict()
            # a preset's own keys (size factor, Zipf, groups, ...: the presets' and the FP8
            # decode's) and expert parallelism's world size W follow MoEShape's
            assert list(shape.items())[: len(ours)] == list(ours.items()), (path, r["record_id"])
            extra = r["case"].startswith(("preset_", "fp8_decode_", "expert_parallel"))
            assert extra or len(shape) == len(ours), r["record_id"]
