"""kernel_lib.device_run.preflight: its order, the blockwise and grouped FP8 lines, a check table's
row as a line, and the items after a lost CUDA context."""

import re

import pandas as pd
import pytest
import torch

from kernel_lib.device_run import preflight

NO_GPU = pytest.mark.skipif(
    torch.cuda.is_available(), reason="a GPU runs these kernels: its lines are ok or errors"
)


def test_cheap_items_first_the_quantiser_before_the_new_kernels_and_the_cold_compile_last():
    names = list(preflight.ITEMS)
    kernels = names[names.index("scaled_mm") :]
    assert kernels == [
        "scaled_mm", "triton_quantize", "block_scaled_mm", "grouped_mm", "flex_attention",
    ]  # fmt: skip
    assert 0 in preflight.GROUP_SIZES, "the grouped GEMM's edge case: an empty group"


@NO_GPU
def test_the_blockwise_and_grouped_lines_are_skipped_here_with_their_reason(capsys):
    items = {name: preflight.ITEMS[name] for name in ("block_scaled_mm", "grouped_mm")}
    assert preflight.run_items(items) == 0
    block, grouped = capsys.readouterr().out.splitlines()
    assert re.match(r"block_scaled_mm +skipped: unsupported: .*\S \(", block)
    assert re.match(r"grouped_mm +skipped: unsupported: .*\S \(", grouped)


def _table(**row) -> pd.DataFrame:
    return pd.DataFrame(
        [{"implementation": "loop", "check": "PASS"}, {"implementation": "k", **row}]
    )


def test_a_check_tables_row_is_the_items_line():
    passed = _table(check="PASS", vs_fp8_reference=1e-3, tolerance=8e-3)
    assert preflight.checked_row(passed, "k") == "relative error vs the fp64 FP8 reference 1.0e-03"
    with pytest.raises(AssertionError, match="reference 2.0e-02 > 0.008"):
        preflight.checked_row(_table(check="FAIL", vs_fp8_reference=2e-2, tolerance=8e-3), "k")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        preflight.checked_row(_table(check="failed", reason="illegal memory access"), "k")
    with pytest.raises(preflight.Skip, match="no kernel for cpu"):
        preflight.checked_row(_table(check="skipped", reason="no kernel for cpu"), "k")


def test_after_a_lost_cuda_context_the_later_items_are_skipped_saying_why(monkeypatch, capsys):
    def faults():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(preflight, "context_lost", lambda: True)
    items = {"first": lambda: "fine", "grouped_mm": faults, "flex_attention": lambda: "fine"}
    assert preflight.run_items(items) == 1
    lines = capsys.readouterr().out.splitlines()
    assert re.match(r"first +ok: fine", lines[0])
    assert re.match(r"grouped_mm +error: RuntimeError: CUDA error: an illegal", lines[1])
    assert re.match(
        r"flex_attention +skipped: the CUDA context is lost since grouped_mm's error", lines[2]
    )


def test_the_context_is_lost_when_synchronising_fails(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert not preflight.context_lost()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    assert not preflight.context_lost()

    def sticky():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", sticky)
    assert preflight.context_lost()
