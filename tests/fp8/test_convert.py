import pytest
from torch import nn

from kernel_lib.fp8.convert import convert_to_fp8
from kernel_lib.fp8.linear import Fp8Linear


def _model():
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 30), nn.Linear(30, 16), nn.Linear(16, 32)
    )


def test_converts_what_it_can_and_says_why_not():
    model = _model()
    weight = model[0].weight
    report = convert_to_fp8(model, module_filter=lambda name, m: name != "4")
    assert report.converted == ["0"]
    assert report.not_converted == {
        "2": "out_features=30 is not a multiple of 16 (torch._scaled_mm needs it)",
        "3": "in_features=30 is not a multiple of 16 (torch._scaled_mm needs it)",
        "4": "excluded by module_filter",
    }
    assert isinstance(model[0], Fp8Linear) and model[0].weight is weight
    assert type(model[2]) is nn.Linear
    assert list(report.frame().columns) == ["layer", "converted", "reason"]


def test_bad_config_type():
    with pytest.raises(TypeError, match="config"):
        convert_to_fp8(_model(), config={"recipe": "tensorwise_dynamic"})
