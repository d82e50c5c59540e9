import pytest
import torch

from kernel_lib.fp8.formats import FORMATS
from kernel_lib.fp8.quantize import quantize
from kernel_lib.fp8.quantize_compiled import compiled_quantize

from .conftest import wide_tensor, with_extremes, with_nonfinite


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("gran", ["tensorwise", "rowwise"])
def test_bit_exact_with_quantize(fmt, gran):
    x = with_nonfinite(with_extremes(wide_tensor((37, 300), seed=2, binades=(-9, 5))))
    got, ref = compiled_quantize(x, fmt=fmt, granularity=gran), quantize(x, fmt=fmt, granularity=gran, nonfinite="nan")
    assert torch.equal(got.scale, ref.scale)
    assert torch.equal(got.data.view(torch.uint8), ref.data.view(torch.uint8))


def test_writes_into_out_and_checks_it():
    x = torch.randn(37, 300)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    assert compiled_quantize(x, out=out).data is out
    with pytest.raises(ValueError, match="out"):
        compiled_quantize(x, out=torch.empty(3, dtype=torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="granularity"):
        compiled_quantize(x, granularity="blockwise")
