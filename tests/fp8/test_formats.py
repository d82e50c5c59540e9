import pytest
import torch

from kernel_lib.fp8.formats import FORMATS, format_info, format_table, fp8_dtype
from kernel_lib.fp8.quantize import fp8_grid


@pytest.mark.parametrize("fmt", FORMATS)
def test_ranges_come_from_finfo(fmt):
    info = format_info(fmt)
    fi = torch.finfo(info.dtype)
    assert info.max == fi.max and info.smallest_normal == fi.smallest_normal
    grid = fp8_grid(fmt)
    assert grid[-1].item() == info.max, "largest finite code must be finfo.max"
    assert grid[1].item() == info.min_subnormal, "smallest positive code must be min_subnormal"


@pytest.mark.parametrize("fmt", FORMATS)
def test_eps_is_the_ulp_at_one(fmt):
    grid = fp8_grid(fmt)
    above_one = grid[grid > 1][0].item()
    assert above_one - 1 == format_info(fmt).eps


def test_known_maxima():
    assert [format_info(f).max for f in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz")] == [
        448,
        57344,
        240,
        57344,
    ]
    assert fp8_dtype("e5m2") is torch.float8_e5m2


def test_unknown_format_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"fmt='e3m4'.*e4m3fn"):
        format_info("e3m4")


def test_table_has_a_row_per_format():
    table = format_table()
    assert list(table.index) == list(FORMATS)
    assert table.loc["e5m2", "inf"] and not table.loc["e4m3fn", "inf"]
