import pytest
import torch

from kernel_lib.checks import Unsupported, relative_error
from kernel_lib.fp8 import checks, grouped
from kernel_lib.fp8.checks import TOLERANCES, grouped_gemm_check
from kernel_lib.fp8.grouped import (
    group_offsets,
    grouped_mm_unsupported,
    looped_scaled_mm,
    quantize_experts,
    scaled_grouped_mm,
    skewed_counts,
)  # fmt: skip
from kernel_lib.fp8.reference import grouped_linear_reference


def _inputs(counts, k=48, n=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(sum(counts), k, generator=gen), torch.randn(
        len(counts), n, k, generator=gen
    )


@pytest.mark.parametrize(
    "counts",
    [[5, 0, 12, 3], [0, 0, 20, 0], [1, 1, 1], [0, 0, 0], [33]],
    ids=["empty_expert", "all_to_one", "single_rows", "no_tokens", "one_expert"],
)
def test_looped_matches_the_fp64_reference(counts):
    x, w = _inputs(counts)
    out = looped_scaled_mm(*quantize_experts(x, w), counts)
    assert out.shape == (sum(counts), 32) and out.dtype == torch.bfloat16
    err = relative_error(out, grouped_linear_reference(x, w, counts))
    assert err <= TOLERANCES["bf16_out"].value, f"{counts}: {err:.2e}"


def test_offsets_are_int32_row_ends():
    offs = group_offsets([3, 0, 5])
    assert offs.dtype == torch.int32 and offs.tolist() == [3, 3, 8]
    assert group_offsets([3, 0, 5], device="cpu") is offs  # built once: no copy in a timed call
    with pytest.raises(ValueError, match="counts"):
        group_offsets([2, -1])


def test_counts_must_match_the_operands():
    qx, qw = quantize_experts(*_inputs([4, 4]))
    with pytest.raises(ValueError, match="counts=\\[4, 3\\]"):
        looped_scaled_mm(qx, qw, [4, 3])
    with pytest.raises(ValueError, match="weights.shape"):
        quantize_experts(torch.randn(4, 16), torch.randn(16, 16))


def test_native_path_has_no_cpu_kernel_and_says_so():
    qx, qw = quantize_experts(*_inputs([4, 4]))
    with pytest.raises(Unsupported, match="_scaled_grouped_mm has no kernel for cpu"):
        scaled_grouped_mm(qx, qw, [4, 4])


def test_skewed_counts_are_seeded_zipf_with_an_empty_last_expert():
    counts = skewed_counts(500, 6, seed=1)
    assert sum(counts) == 500 and counts[-1] == 0 and counts[0] == max(counts)
    assert counts == skewed_counts(500, 6, seed=1) and skewed_counts(0, 3) == [0, 0, 0]
    with pytest.raises(ValueError, match="experts=1"):
        skewed_counts(10, 1)


def test_grouped_check_passes_the_loop_and_skips_the_native_path():
    table = grouped_gemm_check([9, 0, 23, 4], dim=64, ffn=32)
    rows = dict(zip(table["implementation"], table["check"]))
    assert rows == {"scaled_grouped_mm": "skipped", "looped_scaled_mm": "PASS"}, table.to_string()


def test_swapped_experts_fail_the_check(monkeypatch):
    # teeth: each group multiplied by the next expert's weights (an off-by-one in the offsets)
    real = checks.quantize_experts
    monkeypatch.setattr(
        checks, "quantize_experts", lambda x, w, *, fmt: real(x, w.roll(1, dims=0), fmt=fmt)
    )
    table = grouped_gemm_check([9, 5, 23, 4], dim=64, ffn=32)
    assert (table[table["implementation"] == "looped_scaled_mm"]["check"] == "FAIL").all()


def test_bf16_baseline_matches_the_unquantised_reference_and_skips_without_a_kernel(monkeypatch):
    counts = [5, 0, 12, 3]
    x, w = _inputs(counts)
    out = grouped.bf16_grouped_mm(x.bfloat16(), w.bfloat16(), counts)
    ref = grouped_linear_reference(x.bfloat16(), w.bfloat16(), counts, fmt=None)
    assert relative_error(out, ref) <= TOLERANCES["bf16_out"].value
    monkeypatch.setattr(grouped, "grouped_mm_unsupported", lambda device: "unsupported: no kernel")
    with pytest.raises(Unsupported, match="no kernel"):
        grouped.bf16_grouped_mm(x.bfloat16(), w.bfloat16(), counts)


def test_grouped_mm_on_xla_is_refused_without_the_probe_that_would_kill_the_process():
    # torch_xla 2.9 segfaults on torch._grouped_mm: the answer must come before any call
    assert "segfaults" in grouped_mm_unsupported("xla:0")


def test_a_native_kernel_failing_at_the_real_group_count_fails_only_its_row(
    grouped_kernel_up_to_two_groups,
):
    table = grouped_gemm_check([9, 0, 23, 4], dim=64, ffn=32)
    rows = table.set_index("implementation")
    assert rows.loc["scaled_grouped_mm", "check"] == "failed", table.to_string()
    assert rows.loc["scaled_grouped_mm", "reason"] == (
        "RuntimeError: grouped GEMM with 4 groups is not supported"
    )
    assert rows.loc["looped_scaled_mm", "check"] == "PASS"
    two = grouped_gemm_check([9, 23], dim=64, ffn=32)  # the same fake is right where it runs
    assert (two["check"] == "PASS").all(), two.to_string()
