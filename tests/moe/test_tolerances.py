import dataclasses

import pytest
import torch

from kernel_lib.moe.cases import _ReplayedKinks, fp64_experts, make_case
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.moe.tolerances import TOLERANCES, tolerance


def test_every_bound_has_its_derivation():
    for key, tol in TOLERANCES.items():
        assert tol.value > 0 and len(tol.why) > 20, key


def test_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="float8"):
        tolerance("forward", "float8")


def test_the_fp64_reference_takes_its_kinks_from_the_case():
    """One pre-activation that bf16 and fp64 put on opposite sides of ReLU's 0 moved dL/dw_in by
    5.6e-2 (CPU, T=2048, D=1024; H100: 3.8e-2 at T=4096), so the reference replays the case's
    kinks. Teeth: with every kink of the case flipped, the reference follows the case."""
    case = make_case(MoEShape(tokens=6, hidden=4, ffn=8, experts=1, top_k=1), dtype="float32")
    experts, x, tokens = fp64_experts(case.feedforward), case.x.double(), torch.arange(6)
    h = x @ experts.w_in[0]
    flipped = _ReplayedKinks(dataclasses.replace(case, x=-case.x), experts)
    assert torch.equal(flipped.forward_expert(0, x, tokens), (h * (h < 0)) @ experts.w_out[0])
    same = _ReplayedKinks(case, experts)
    assert torch.allclose(same.forward_expert(0, x, tokens), experts.forward_expert(0, x, tokens))
