"""The Triton kernels: compiled on a GPU, else under the interpreter (fp32, fp16 and bf16)."""

import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are defined

pytest.importorskip("triton")
from kernel_lib.fp8.quantize import quantize  # noqa: E402
from kernel_lib.fp8.quantize_triton import BLOCK_SIZE, fused_quantize, partial_amax  # noqa: E402

from .conftest import wide_tensor, with_extremes, with_nonfinite  # noqa: E402

# fnuz types have no interpreter support; AMD MI300 runs them (and not the OCP ones).
FORMATS = (
    ["e4m3fnuz", "e5m2fnuz"] if DEVICE == "cuda" and torch.version.hip else ["e4m3fn", "e5m2"]
)


def _same(a, b):
    return torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("gran", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(37, 1500), (3, 5, 17)])
def test_bit_exact_with_quantize(fmt, gran, dtype, shape):
    x = with_nonfinite(with_extremes(wide_tensor(shape, seed=5, binades=(-4, 3)))).to(
        DEVICE, dtype
    )
    got, ref = (
        fused_quantize(x, fmt=fmt, granularity=gran),
        quantize(x, fmt=fmt, granularity=gran, nonfinite="nan"),
    )
    assert torch.equal(got.scale, ref.scale)
    assert torch.equal(got.amax, ref.amax)
    assert _same(got, ref), (
        f"{(got.data.view(torch.uint8) != ref.data.view(torch.uint8)).sum()} bytes differ"
    )


def test_tensorwise_first_pass_writes_one_amax_and_count_per_block():
    # one slot per block, no atomic to a shared address: the max over the slots is the amax
    x = with_nonfinite(torch.randn(3 * BLOCK_SIZE + 7)).to(DEVICE, torch.bfloat16)
    amax, bad = partial_amax(x)
    blocks = torch.nn.functional.pad(x.float(), (0, -x.numel() % BLOCK_SIZE)).view(-1, BLOCK_SIZE)
    finite = torch.where(blocks.isfinite(), blocks.abs(), 0.0)
    assert torch.equal(amax, finite.amax(1))
    assert bad.tolist() == (~blocks.isfinite()).sum(1).tolist() == [1, 1, 0, 1]


@pytest.mark.parametrize("gran", ["tensorwise", "rowwise"])
def test_check_nonfinite_raises_with_the_count(gran):
    with pytest.raises(ValueError, match="x has 3 NaN/inf"):
        fused_quantize(
            with_nonfinite(torch.randn(4, 32)).to(DEVICE), granularity=gran, check_nonfinite=True
        )


def test_bad_granularity_and_empty_input():
    with pytest.raises(ValueError, match="granularity"):
        fused_quantize(torch.randn(4, 32, device=DEVICE), granularity="blockwise")
    assert fused_quantize(torch.empty(0, 32, device=DEVICE), granularity="rowwise").data.shape == (
        0,
        32,
    )
