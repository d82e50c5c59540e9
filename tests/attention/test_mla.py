"""Multi-head latent attention: RoPE against its complex-number definition, the expanded and the
absorbed compiled flex paths and SDPA against the fp64 reference built from the same weights on
an odd shape, bad shapes, and a check with teeth (RoPE left off the shared key fails)."""

import pytest
import torch
import torch.nn.functional as F

from kernel_lib.attention import mla
from kernel_lib.attention.checks import tolerance
from kernel_lib.attention.reference import mla_reference, rope_reference
from kernel_lib.checks import against

# One odd shape for every compiled test: S=200 is not a multiple of the 64 tile, C != Dn + R.
SHAPE = mla.MLAShape(batch=2, heads=3, seq_len=200, kv_lora_rank=40, nope_dim=16, rope_dim=16,
                     v_dim=24)  # fmt: skip
BLOCK = 64


@pytest.fixture(scope="module")
def inputs():
    return mla.make_inputs(SHAPE, device="cpu", seed=0)


def _check(inputs):
    return against(
        lambda: mla_reference(inputs),
        reference="fp64 MLA",
        tolerance=tolerance("forward", "float32"),
    )


@pytest.mark.parametrize("seq_len, dim", [(1, 2), (7, 6), (33, 64)])
def test_rope_matches_the_complex_rotation(seq_len, dim):
    x = torch.randn(2, 3, seq_len, dim, generator=torch.Generator().manual_seed(seq_len))
    got, want = mla.rope(x).double(), rope_reference(x)
    assert (got - want).abs().max() < 1e-5 * want.abs().max()
    assert torch.equal(mla.rope(x)[..., 0, :], x[..., 0, :])  # position 0 is not rotated


def test_rope_makes_scores_depend_on_relative_position_only():
    generator = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 1, 1, 8, generator=generator, dtype=torch.float64) for _ in range(2))
    rotated = lambda x, pos: rope_reference(x.expand(1, 1, 12, 8))[..., pos, :]  # noqa: E731
    score = lambda i, j: float((rotated(q, i) * rotated(k, j)).sum())  # noqa: E731
    assert score(5, 2) == pytest.approx(score(9, 6)) and score(5, 2) != pytest.approx(score(5, 3))


def test_reference_row_sample_matches_the_full_reference(inputs):
    rows = torch.tensor([0, 1, 99, 199])
    full = mla_reference(inputs)
    assert torch.allclose(mla_reference(inputs, rows=rows), full[..., rows, :])


def test_expanded_flex_matches_the_fp64_reference(inputs):
    out = mla.flex_mla(inputs, block_size=BLOCK)
    assert out.shape == (2, 3, 200, 24) and out.dtype == torch.float32
    check = _check(inputs)(out)
    assert check.passed, check


def test_absorbed_flex_matches_the_fp64_reference(inputs):
    check = _check(inputs)(mla.flex_mla_absorbed(inputs, block_size=BLOCK))
    assert check.passed, check


def test_sdpa_on_the_expanded_inputs_matches_the_fp64_reference(inputs):
    check = _check(inputs)(F.scaled_dot_product_attention(*mla.expand(inputs), is_causal=True))
    assert check.passed, check


def test_check_has_teeth_rope_left_off(inputs, monkeypatch):
    monkeypatch.setattr(mla, "rope", lambda x: x)
    check = _check(inputs)(mla.flex_mla(inputs, block_size=BLOCK))
    assert not check.passed, check


def test_check_has_teeth_absorbed_with_a_wrong_rope_key(inputs):
    wide = inputs._replace(k_rope=inputs.k_rope * 2.0)  # the shared key doubled: wrong scores
    check = _check(inputs)(mla.flex_mla_absorbed(wide, block_size=BLOCK))
    assert not check.passed, check


@pytest.mark.parametrize(
    "field, value", [("rope_dim", 3), ("rope_dim", 0), ("kv_lora_rank", 0), ("dtype", "int8")]
)
def test_bad_shape_names_the_field(field, value):
    sizes = dict(batch=1, heads=2, seq_len=8, kv_lora_rank=8, nope_dim=4, rope_dim=4, v_dim=4)
    with pytest.raises(ValueError, match=field):
        mla.MLAShape(**{**sizes, field: value})
