import pytest
import torch

from kernel_lib.fp8.linear import Fp8Linear, Fp8LinearConfig
from kernel_lib.fp8.training import TrainConfig, make_model, train, training_runs


@pytest.mark.parametrize("recipe", ["tensorwise_dynamic", "tensorwise_delayed", "rowwise_dynamic"])
def test_fp8_training_updates_weights_and_lowers_loss(recipe):
    cfg = TrainConfig(steps=25)
    model, report = make_model(cfg, fp8=Fp8LinearConfig.from_recipe_name(recipe))
    assert "head" in report.not_converted, "vocab 40 is not a multiple of 16"
    fp8_layers = [m for m in model.modules() if isinstance(m, Fp8Linear)]
    assert len(fp8_layers) == 4
    before = [m.weight.detach().clone() for m in fp8_layers]
    losses = train(model, cfg)
    for layer, w0 in zip(fp8_layers, before):
        assert not torch.equal(layer.weight, w0), "FP8 layer weights must be trained"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.3, f"loss {first:.3f} -> {last:.3f}"


def test_fp8_tracks_bf16():
    frame = training_runs(TrainConfig(steps=25), recipes=["tensorwise_dynamic"])
    final = frame.groupby("run")["loss"].apply(lambda s: s.tail(5).mean())
    assert abs(final["fp8_tensorwise_dynamic"] / final["bf16"] - 1) < 0.05, final.to_dict()


def test_train_config_validation():
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="dim=30"):
        TrainConfig(dim=30, heads=4)
