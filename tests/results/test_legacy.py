"""Old reports in today's names: the committed reports written before one name per quantity read
back with sweep and grouped-check ids named as new runs name them (kernel_lib.results.legacy)."""

import json
from pathlib import Path

import pytest

from kernel_lib.results.files import read_results
from kernel_lib.results.legacy import record_id_of

ROOT = Path(__file__).resolve().parents[2]
OLD = sorted((ROOT / "outputs").glob("[ch]*/*.results.json"))  # cpu and h100: written before


def _shape_names(record_id: str) -> set[str]:
    return {part.split("=", 1)[0] for part in record_id.split("/")[6].split(",")}


@pytest.mark.parametrize("path", OLD, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_old_ids_read_back_in_todays_names(path):
    raw = json.loads(path.read_text())
    read = read_results(path)
    ids = [r["record_id"] for r in read]
    assert len(set(ids)) == len(ids)  # still one record per id
    forward = next((r for r in read if r["case"] == "forward"), None)
    for old, new in zip(raw, read):
        assert record_id_of(new["record_id"]) == new["record_id"]  # today's ids stay as they are
        if old["case"].startswith("sweep_") and forward:  # the sweep's shape is the forward's
            assert _shape_names(new["record_id"]) == _shape_names(forward["record_id"])
            assert set(new["shape"]) == set(forward["shape"])
        if old["case"] == "grouped_gemm_check":
            assert set(new["shape"]) == {"E", "T"} and _shape_names(new["record_id"]) == {"E", "T"}


def test_a_sweep_id_loses_its_duplicate_and_nothing_else():
    old = "cpu/moe/sweep_experts/dense_gemm/bfloat16/forward/D=64,E=4,F=96,K=2,T=64,experts=4"
    assert (
        record_id_of(old)
        == "cpu/moe/sweep_experts/dense_gemm/bfloat16/forward/D=64,E=4,F=96,K=2,T=64"
    )
    forward = "cpu/moe/forward/dense_gemm/bfloat16/forward/D=64,E=4,F=96,K=2,T=64,experts=4"
    assert record_id_of(forward) == forward  # only the sweeps wrote a duplicate
    check = "cpu/fp8/grouped_gemm_check/scaled_grouped_mm/float8_e4m3fn/-/experts=4,tokens=64"
    assert record_id_of(check).endswith("/-/E=4,T=64")
