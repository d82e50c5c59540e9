"""Attention with an activation instead of softmax: the log-space score_mod and undo_softmax
recover f(S) v against the fp64 reference (through eager flex_attention, which returns the lse on
a CPU), the naive baseline too, compiled flex skipped with Inductor's reason on a CPU, and checks
with teeth (a wrong offset, a non-causal value sum)."""

import pytest
import torch
from torch.nn.attention.flex_attention import AuxRequest, flex_attention

from kernel_lib.attention import activation, mods
from kernel_lib.attention.checks import tolerance
from kernel_lib.attention.flex import causal_block_mask
from kernel_lib.attention.reference import activation_reference
from kernel_lib.checks import Unsupported, against
from tests.attention.conftest import qkv_for

pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention.*:UserWarning")


def _check(q, k, v, name):
    fn = activation.activation_function(name)
    return against(
        lambda: activation_reference(q, k, v, activation=fn),
        reference=f"fp64 {name} attention",
        tolerance=tolerance("forward", "float32"),
    )


def _eager(q, k, v, name, *, offset=activation.OFFSET):
    """Eager flex (not timed anywhere: it materialises the scores) with the module's score_mod."""
    score_mod = mods.activation(activation.activation_function(name), offset)
    mask = causal_block_mask(q.shape[-2], "cpu", 128)
    return flex_attention(
        q, k, v, score_mod=score_mod, block_mask=mask, return_aux=AuxRequest(lse=True)
    )


@pytest.mark.parametrize("name", list(activation.ACTIVATIONS))
@pytest.mark.parametrize("seq_len", [1, 37, 130])
def test_log_space_score_mod_and_undo_recover_the_activation(name, seq_len):
    q, k, v = qkv_for(seq_len, 3)
    out, aux = _eager(q, k, v, name)
    check = _check(q, k, v, name)(activation.undo_softmax(out, aux.lse, v))
    assert check.passed, check


@pytest.mark.parametrize("name", list(activation.ACTIVATIONS))
def test_naive_matches_the_fp64_reference(name):
    q, k, v = qkv_for(37, 3)
    check = _check(q, k, v, name)(activation.activation_naive(q, k, v, activation=name))
    assert check.passed, check


def test_reference_row_sample_matches_the_full_reference():
    q, k, v = qkv_for(37, 2)
    rows = torch.tensor([0, 5, 36])
    fn = activation.activation_function("gelu")
    full = activation_reference(q, k, v, activation=fn)
    assert torch.allclose(
        activation_reference(q, k, v, activation=fn, rows=rows), full[..., rows, :]
    )


def test_check_has_teeth_wrong_offset():
    q, k, v = qkv_for(37, 3)
    out, aux = _eager(q, k, v, "gelu", offset=2.0)
    assert not _check(q, k, v, "gelu")(activation.undo_softmax(out, aux.lse, v)).passed


def test_check_has_teeth_value_sum_over_every_key():
    q, k, v = qkv_for(37, 3)
    out, aux = _eager(q, k, v, "relu")
    wrong = out * aux.lse.exp()[..., None] - v.sum(dim=-2, keepdim=True)  # not the running sum
    assert not _check(q, k, v, "relu")(wrong).passed


def test_compiled_flex_on_cpu_is_skipped_naming_the_lse():
    q, k, v = qkv_for(37, 3)
    with pytest.raises(Unsupported, match="lse"):
        activation.flex_activation(q, k, v, activation="gelu", block_size=64)


def test_unknown_activation_names_the_valid_ones():
    with pytest.raises(ValueError, match="gelu"):
        activation.activation_function("swish")
