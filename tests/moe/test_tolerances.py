import pytest

from kernel_lib.moe.tolerances import TOLERANCES, tolerance


def test_every_bound_has_its_derivation():
    for key, tol in TOLERANCES.items():
        assert tol.value > 0 and len(tol.why) > 20, key


def test_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="float8"):
        tolerance("forward", "float8")
