import dataclasses

import pytest
import torch

from kernel_lib.fp8 import linear
from kernel_lib.fp8.linear import Fp8Linear, Fp8LinearConfig
from kernel_lib.fp8.quantize import Fp8Tensor
from kernel_lib.fp8.training import (
    TrainConfig,
    loss_checks,
    make_model,
    regression_data,
    train,
    training_runs,
)

CFG = TrainConfig(steps=20, rows=128)
SEEDS = [0, 1, 2]


def _checks():
    return loss_checks(training_runs(CFG, recipes=["tensorwise_dynamic"], seeds=SEEDS))


def test_targets_are_the_teachers_outputs_at_unit_variance():
    cfg = TrainConfig(steps=3, rows=8)
    x, y = regression_data(cfg)
    teacher, _ = make_model(cfg, seed=cfg.seed + 1000)
    with torch.no_grad():
        expected = teacher(x)  # the whole batch at once; the data are made a step at a time
    torch.testing.assert_close(y, expected / expected.std())
    assert abs(float(y.std()) - 1.0) < 1e-6


def test_the_data_are_drawn_on_the_device_from_a_generator_seeded_there(monkeypatch):
    # at GPU sizes (500 steps x 8192 rows x 512) a host draw is 8 GiB per run, then copied over
    draws, real = [], torch.randn

    def spy(*shape, generator, device, **kwargs):
        draws.append((generator.device, torch.device(device)))
        return real(*shape, generator=generator, device=device, **kwargs)

    monkeypatch.setattr(torch, "randn", spy)
    regression_data(TrainConfig(steps=2, rows=4), device="cpu")
    assert draws == [(torch.device("cpu"), torch.device("cpu"))]


def test_every_linear_is_fp8_and_trained():
    model, report = make_model(CFG, fp8=Fp8LinearConfig.from_recipe_name("rowwise_dynamic"))
    assert (
        not report.not_converted
        and len([m for m in model.modules() if isinstance(m, Fp8Linear)]) == 2
    )
    before = [p.detach().clone() for p in model.parameters()]
    train(model, TrainConfig(steps=3, rows=32))
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before))


@pytest.mark.slow
def test_fp8_learns_and_tracks_bf16_over_three_seeds():
    table = _checks()
    assert len(table) == 2 * len(SEEDS) and (table["check"] == "PASS").all(), table.to_string()


@pytest.mark.slow
def test_zeroed_fp8_weights_fail_the_check(monkeypatch):
    real = linear._Operand.__call__

    def zeroed(self, t):
        q = real(self, t)
        return dataclasses.replace(q, data=torch.zeros_like(q.data)) if self.name == "w" else q

    monkeypatch.setattr(linear._Operand, "__call__", zeroed)
    table = _checks().set_index(["seed", "run"])
    assert (table.xs("fp8_tensorwise_dynamic", level="run")["check"] == "FAIL").all()
    assert (table.xs("bf16", level="run")["check"] == "PASS").all()


@pytest.mark.slow
def test_inverted_scale_fails_the_check(monkeypatch):
    monkeypatch.setattr(Fp8Tensor, "inverse_scale", property(lambda t: t.scale))
    table = _checks()
    assert (table[table["run"] != "bf16"]["check"] == "FAIL").all()


def test_train_config_validation():
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="rows"):
        TrainConfig(rows=0)
