import math

import pytest
import torch

from kernel_lib.moe.balancing import (
    load_over_steps,
    update_bias,
    update_bias_reference,
    zipf_offsets,
)  # fmt: skip
from kernel_lib.moe.presets import preset


@pytest.mark.parametrize("experts", [1, 7, 256])
def test_update_bias_matches_its_twin(experts):
    gen = torch.Generator().manual_seed(experts)
    bias = torch.randn(experts, generator=gen, dtype=torch.float64)
    counts = torch.randint(0, 5, (experts,), generator=gen)  # ties with the mean included
    got = update_bias(bias, counts, gamma=0.01)
    torch.testing.assert_close(got, update_bias_reference(bias, counts, gamma=0.01))


def test_update_bias_moves_towards_the_mean_load():
    got = update_bias(torch.zeros(3), torch.tensor([9, 3, 0]), gamma=0.5)
    assert got.tolist() == [-0.5, 0.5, 0.5]  # mean 4: the busy one down, the others up


def test_teeth_an_inverted_update_is_not_its_twin():
    bias, counts = torch.zeros(3, dtype=torch.float64), torch.tensor([9, 3, 0])
    wrong = bias - 0.5 * torch.sign(counts.double().mean() - counts)
    assert not torch.equal(wrong, update_bias_reference(bias, counts, gamma=0.5))


def test_zipf_offsets_are_a_permuted_zipf_law():
    got = zipf_offsets(6, 1.2, seed=3)
    expected = -1.2 * torch.arange(1, 7).float().log()
    torch.testing.assert_close(got.sort(descending=True).values, expected)
    assert torch.equal(zipf_offsets(6, 0.0), torch.zeros(6))
    shares = zipf_offsets(6, 1.0).softmax(-1).sort(descending=True).values
    torch.testing.assert_close(shares[0] / shares[2], torch.tensor(3.0))


@pytest.mark.parametrize("call", [
    lambda: zipf_offsets(4, -1.0), lambda: zipf_offsets(4, math.nan),
    lambda: update_bias(torch.zeros(2), torch.ones(2), gamma=-1.0),
])  # fmt: skip
def test_bad_values_are_named(call):
    with pytest.raises(ValueError, match="exponent|gamma"):
        call()


def test_aux_loss_free_balancing_evens_a_zipf_load():
    model = preset("deepseek-v3")
    frame = load_over_steps(model, steps=20, tokens=256, gamma=0.05, zipf=0.3)
    last = frame[frame["step"] == 19].set_index("balancing")
    first = frame[frame["step"] == 0].set_index("balancing")
    assert first.loc["none"].equals(first.loc["aux_loss_free"])  # same batch, bias still zero
    assert last.loc["aux_loss_free", "max_over_mean"] < 0.5 * last.loc["none", "max_over_mean"]
    assert list(frame.columns) == ["balancing", "step", "max_over_mean", "min_over_mean", "cv"]


def test_teeth_gamma_zero_balances_nothing():
    frame = load_over_steps(preset("qwen3-30b-a3b"), steps=5, tokens=64, gamma=0.0, zipf=0.3)
    none, free = (
        frame[frame["balancing"] == b].reset_index(drop=True) for b in ("none", "aux_loss_free")
    )
    assert none.drop(columns="balancing").equals(free.drop(columns="balancing"))


def test_load_over_steps_rejects_no_steps():
    with pytest.raises(ValueError, match="steps"):
        load_over_steps(preset("mixtral-8x7b"), steps=0, tokens=8, gamma=0.1, zipf=0.0)
