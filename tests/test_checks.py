import math

import pytest
import torch

from kernel_lib import checks
from kernel_lib.checks import Tolerance, against, check_output, errors, exact, relative_error

TOL = Tolerance(1e-6, "fp32 output of an exact sum")


def test_relative_error_is_max_abs_over_max_reference():
    ref = torch.tensor([1.0, -4.0, 2.0])
    assert relative_error(ref + torch.tensor([0.0, 0.0, 0.4]), ref) == pytest.approx(0.1)


def test_tuples_are_compared_tensor_by_tensor():
    a, b = torch.ones(3), torch.full((2,), 2.0)
    assert errors((a, b + 0.2), (a, b)) == pytest.approx((0.2, 0.1))
    with pytest.raises(ValueError, match="shape"):
        errors(torch.ones(3), torch.ones(4))


def test_nan_never_passes_and_empty_outputs_do():
    check = check_output(
        torch.tensor([math.nan]), torch.tensor([1.0]), reference="r", tolerance=TOL
    )
    assert not check.passed and math.isnan(check.rel_error)
    assert check_output(torch.ones(0, 4), torch.ones(0, 4), reference="r", tolerance=TOL).passed


def test_check_fails_past_tolerance_and_says_so():
    check = check_output(torch.ones(4) * 1.01, torch.ones(4), reference="fp64 twin", tolerance=TOL)
    assert not check.passed
    assert check.describe() == "rel_error 1.0e-02 > 1.0e-06 vs fp64 twin"
    assert check.as_dict()["pass"] is False


def test_against_computes_a_lazy_reference_once():
    calls = []
    check = against(lambda: calls.append(1) or torch.ones(2), reference="r", tolerance=TOL)
    assert check(torch.ones(2)).passed and check(torch.ones(2)).passed and calls == [1]


def test_exact_needs_identical_bits():
    ref = torch.arange(8, dtype=torch.uint8)
    assert exact(ref, reference="bytes")(ref.clone()).passed
    assert not exact(ref, reference="bytes")(ref.flip(0)).passed


def test_tolerance_validates():
    with pytest.raises(ValueError, match="metric"):
        Tolerance(1.0, "why", metric="ulps")
    with pytest.raises(ValueError, match="value"):
        Tolerance(math.nan, "why")


def test_large_outputs_are_compared_in_chunks_with_the_same_result(monkeypatch):
    out, ref = torch.randn(7, 11), torch.randn(7, 11).double()
    whole = errors(out, ref)
    monkeypatch.setattr(checks, "CHUNK", 5)
    assert errors(out, ref) == whole
    out[6, 10] = float("nan")  # in the last chunk
    assert math.isnan(errors(out, ref)[0])
