import math

import pytest
import torch

from kernel_lib.moe.experts import (
    AdapterExperts,
    AttentionExperts,
    ConvolutionalExperts,
    FeedForwardExperts,
    LoRAExperts,
    SharedExpert,
    activate,
    replayed_activation,
)  # fmt: skip


def test_activations_hand_values():
    h = torch.tensor([[-1.0, 2.0]])
    assert activate(h, "relu").tolist() == [[0.0, 2.0]]
    torch.testing.assert_close(
        activate(h, "gelu"), torch.nn.functional.gelu(h, approximate="tanh")
    )
    torch.testing.assert_close(activate(h, "swiglu"), torch.nn.functional.silu(h[:, :1]) * 2.0)
    clamped = torch.tensor([[9.0, -9.0]])  # gate clamped to 7, up to -7
    assert activate(clamped, "swiglu_clamped").item() == pytest.approx(
        -6 * 7 / (1 + math.exp(-1.702 * 7))
    )


def test_replayed_relu_takes_its_zero_from_the_case():
    h = torch.tensor([[1e-9, -1e-9, 2.0, -3.0]], dtype=torch.float64, requires_grad=True)
    h_case = torch.tensor([[-0.5, 0.5, 1.0, -1.0]])  # the first two on the other side of 0
    out = replayed_activation(h, h_case, "relu")
    out.sum().backward()
    assert out.tolist() == [[0.0, -1e-9, 2.0, 0.0]] and h.grad.tolist() == [[0.0, 1.0, 1.0, 0.0]]


def test_replayed_clamped_swiglu_holds_the_limits_where_the_case_passed_them():
    # [gate | up]: gate just under 7 where the case clamped it; up just over 7 where it did not
    h = torch.tensor([[6.999, 7.001]], dtype=torch.float64, requires_grad=True)
    h_case = torch.tensor([[7.01, 6.99]])
    out = replayed_activation(h, h_case, "swiglu_clamped")
    assert math.isclose(out.item(), (7.001 + 1) * 7.0 / (1 + math.exp(-1.702 * 7.0)))
    out.sum().backward()
    assert h.grad[0, 0] == 0 and h.grad[0, 1] > 0  # the gate held at its limit, up passes
    same = torch.tensor([[0.3, -2.0]], dtype=torch.float64)
    assert torch.equal(
        replayed_activation(same, same, "swiglu_clamped"), activate(same, "swiglu_clamped")
    )


def test_gated_experts_are_2f_wide_in_weights_and_flops():
    for act in ("swiglu", "swiglu_clamped"):
        ex = FeedForwardExperts(3, 4, 6, activation=act)
        assert ex.w_in.shape == (3, 4, 12) and ex.flops_per_row() == 2 * 4 * 12 + 2 * 6 * 4


def test_ffn_expert_is_two_matmuls():
    ex = FeedForwardExperts(3, 4, 6, activation="gelu").double()
    x = torch.randn(5, 4, dtype=torch.float64)
    idx = torch.tensor([0, 3])
    expected = activate(x[idx] @ ex.w_in[1], "gelu") @ ex.w_out[1]
    torch.testing.assert_close(ex.forward_expert(1, x, idx), expected)
    assert ex.flops_per_row() == 2 * 4 * 6 * 2


@pytest.mark.parametrize("bad", [dict(hidden=0), dict(ffn=-1), dict(num_experts=0)])
def test_ffn_rejects_non_positive_sizes(bad):
    args = {"num_experts": 2, "hidden": 4, "ffn": 4, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        FeedForwardExperts(**args)


def test_ffn_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        FeedForwardExperts(2, 4, 4, activation="mish")


def test_conv_expert_sees_only_its_own_sequence_past():
    ex = ConvolutionalExperts(1, 4, 8, seq_len=3, kernel=2).double()
    x = torch.randn(6, 4, dtype=torch.float64)
    out = ex.forward_expert(0, x, torch.tensor([3, 4]))  # 3 starts sequence 2
    mixed = torch.stack([x[3] * ex.conv[0, 0], x[4] * ex.conv[0, 0] + x[3] * ex.conv[0, 1]])
    torch.testing.assert_close(out, torch.relu(mixed @ ex.ffn.w_in[0]) @ ex.ffn.w_out[0])


def test_attention_expert_is_causal_within_a_sequence():
    ex = AttentionExperts(1, 4, seq_len=2).double()
    x = torch.randn(4, 4, dtype=torch.float64)
    both = ex.forward_expert(0, x, torch.tensor([0, 1, 2]))
    alone = ex.forward_expert(0, x, torch.tensor([2]))
    torch.testing.assert_close(both[2], alone[0])  # token 2 (sequence 1) ignores sequence 0
    first = ex.forward_expert(0, x, torch.tensor([0]))
    torch.testing.assert_close(both[0], first[0])  # token 0 ignores the later token 1


def test_lora_expert_is_base_plus_low_rank():
    ex = LoRAExperts(2, 4, 6, rank=2).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    idx = torch.arange(3)
    base = torch.relu(x @ ex.base.w_in[0]) @ ex.base.w_out[0]
    torch.testing.assert_close(ex.forward_expert(1, x, idx), base)  # B = 0 at init
    n_params = sum(p.numel() for p in ex.parameters())
    assert (
        n_params
        < 2 * sum(p.numel() for p in FeedForwardExperts(1, 4, 6).parameters())
        + 2 * 2 * (4 + 6) * 2
    )


def test_adapter_expert_and_shared_expert():
    ad = AdapterExperts(2, 4, rank=3).double()
    x = torch.randn(2, 4, dtype=torch.float64)
    torch.testing.assert_close(
        ad.forward_expert(0, x, torch.arange(2)), torch.relu(x @ ad.down[0]) @ ad.up[0]
    )
    sh = SharedExpert(4, 8).double()
    torch.testing.assert_close(sh(x), sh.ffn.forward_expert(0, x, torch.arange(2)))
