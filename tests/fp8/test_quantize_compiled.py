import pytest
import torch

from kernel_lib.checks import Unsupported
from kernel_lib.fp8 import quantize_compiled
from kernel_lib.fp8.formats import FORMATS
from kernel_lib.fp8.quantize import fp8_grid, quantize
from kernel_lib.fp8.quantize_compiled import compiled_quantize

from .conftest import wide_tensor, with_extremes, with_nonfinite

# (granularity, cast, fuse_rows): every compiled variant
VARIANTS = [
    (gran, cast, False) for gran in ("tensorwise", "rowwise") for cast in quantize_compiled.CASTS
] + [("rowwise", "bits", True)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("gran", "cast", "fuse_rows"), VARIANTS)
def test_bit_exact_with_quantize(fmt, gran, cast, fuse_rows):
    x = with_nonfinite(with_extremes(wide_tensor((37, 300), seed=2, binades=(-9, 5))))
    got, ref = (
        compiled_quantize(x, fmt=fmt, granularity=gran, cast=cast, fuse_rows=fuse_rows),
        quantize(x, fmt=fmt, granularity=gran, nonfinite="nan"),
    )
    assert torch.equal(got.scale, ref.scale) and torch.equal(got.amax, ref.amax)
    assert torch.equal(got.data.view(torch.uint8), ref.data.view(torch.uint8))


def test_fused_rows_compile_to_one_loop_over_rows():
    """The point of fuse_rows: Inductor's code has one parallel loop (amax and cast of a row
    inside it), where the unfused rowwise graph has a parallel amax loop and a cast loop."""
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(64, 256)

    def loops(fuse_rows):
        torch._dynamo.reset()
        quantize_compiled._compiled.cache_clear()
        # OpenMP loops are written only for more than one thread (`make test`: one per worker)
        with torch._inductor.config.patch({"cpp.threads": 2}):
            _, code = run_and_get_code(
                lambda: compiled_quantize(x, granularity="rowwise", fuse_rows=fuse_rows)
            )
        return "".join(code).count("#pragma omp for")

    assert loops(True) == 1 and loops(False) > 1


def test_writes_into_out_and_checks_it():
    x = torch.randn(37, 300)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    assert compiled_quantize(x, out=out).data is out
    with pytest.raises(ValueError, match="out"):
        compiled_quantize(x, out=torch.empty(3, dtype=torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="granularity"):
        compiled_quantize(x, granularity="blockwise")
    with pytest.raises(ValueError, match="cast"):
        compiled_quantize(x, cast="magic")
    for cast, gran in (("plain", "rowwise"), ("bits", "tensorwise")):
        with pytest.raises(ValueError, match="fuse_rows"):
            compiled_quantize(x, cast=cast, granularity=gran, fuse_rows=True)


@pytest.mark.parametrize(
    ("cast", "fuse_rows"), [("bits", False), ("plain", False), ("bits", True)]
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_ties_and_near_ties_round_like_torch(fmt, cast, fuse_rows):
    """Every grid value, every midpoint between neighbours and the fp32 values either side of it,
    both signs; the format's max first in each row makes every row's scale exactly 1, so these
    are the values cast. The bit-exact test's shape: its compiled graphs, no compile of its own."""
    grid = fp8_grid(fmt).float()
    mid = (grid[:-1] + grid[1:]) / 2
    values = torch.cat(
        [
            grid,
            mid,
            torch.nextafter(mid, torch.tensor(0.0)),
            torch.nextafter(mid, torch.tensor(1e9)),
        ]
    )
    rest = torch.zeros(37 * 299)
    rest[: 2 * len(values)] = torch.cat([values, -values])
    x = torch.cat([grid.max().expand(37, 1), rest.reshape(37, 299)], dim=1)
    got = compiled_quantize(x, fmt=fmt, granularity="rowwise", cast=cast, fuse_rows=fuse_rows)
    assert (got.scale == 1.0).all()
    assert torch.equal(got.data.view(torch.uint8), x.to(got.data.dtype).view(torch.uint8))


def test_recompile_limit_becomes_unsupported(monkeypatch):
    def limit_hit(*args):
        raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile_limit reached")

    monkeypatch.setattr(quantize_compiled, "_compiled", lambda *key: limit_hit)
    with pytest.raises(Unsupported, match="recompile limit"):
        compiled_quantize(torch.randn(4, 16))


def test_compiles_with_exact_division(monkeypatch):
    """A GPU's Triton `/` is approximate: the scale's division must compile to div_rn there."""
    seen = []

    def record(*key):
        def run(x, codes):
            seen.append(torch._inductor.config.eager_numerics.division_rounding)
            raise torch._dynamo.exc.FailOnRecompileLimitHit("stop here")

        return run

    monkeypatch.setattr(quantize_compiled, "_compiled", record)
    with pytest.raises(Unsupported):
        compiled_quantize(torch.randn(4, 16))
    assert seen == [True] and not torch._inductor.config.eager_numerics.division_rounding
